// The epilogue of a gemm fusion, described once: what the fused computation
// does after its dot, as an ir::GemmEpilogue record.
//
// Note [gemm epilogue records]
// The fusion pass's gemm rule (passes/fusion.h rule 4) decides what joins a
// dot: the operands' layout ops, converts, a bias, the GELU or its backward
// (Note [GELU epilogues] in gelu_epilogue.h), a residual, a transpose of
// the result, the bias gradient. Right after building each gemm fusion, the
// pass describes it here, in the fusion's own numbers, and stores the record
// on the fusion (`epilogue={...}` in the text; the verifier checks that it
// fits the fusion's operands and outputs). Every later stage reads the
// record and matches nothing again: the cuBLASLt plan maps it to an
// epilogue and its buffers (compiler/artifact/gemm_plan.h), and the
// fallback kernels take the bias-gradient output and the epilogue from it
// (Note [epilogue fallback] in compiler/program/plan.h).
// A group the rule built that this description cannot express is an error
// of the fusion pass, naming the fusion: before the records, such a gemm
// became an unsupported thunk of the plan without a word.
// The chain after the dot is read in the order the rule absorbs it:
// converts, bias (through converts of its operand), converts, the GELU
// (the pre-activation an output: aux) or, after a bare dot, the GELU
// backward reading the aux operand, converts, a residual, converts; or a
// 2-D transpose of the bare dot. Other outputs must be the bias gradient: a
// rank-1 sum, maybe converted after, of an operand the dot reads or of the
// fusion operand that one is a narrower copy of.
#ifndef GPTC_COMPILER_ANALYSIS_GEMM_EPILOGUE_H_
#define GPTC_COMPILER_ANALYSIS_GEMM_EPILOGUE_H_

#include <string>
#include <vector>

#include "compiler/ir/instruction.h"
#include "compiler/support/status.h"

namespace gptc::analysis {

// The record of kind=gemm fusion `fusion` (its attribute is not read), or an
// error naming the fusion and the value that has no place in a record.
StatusOr<ir::GemmEpilogue> DescribeGemmEpilogue(const ir::Instruction& fusion);

// The roundings in `fusion`'s IR that cuBLASLt, computing in f32, does not
// repeat (a narrow value widened again; the bias gradient rounded after the
// sum), and the bias gradient summed from a narrower copy of its operand: one
// sentence each, for the plan's notes. Reads the record for the bias
// gradient; decides nothing.
std::vector<std::string> SkippedRoundings(const ir::Instruction& fusion,
                                          const ir::GemmEpilogue& epilogue);

}  // namespace gptc::analysis

#endif  // GPTC_COMPILER_ANALYSIS_GEMM_EPILOGUE_H_
