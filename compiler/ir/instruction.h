// Instruction: one SSA value of a computation.
//
// An instruction has an opcode, a result shape, operands (earlier instructions
// of the same computation) and the attributes its opcode uses. Operand and
// user lists are private: only the IR edits them (ReplaceOperandWith,
// ReplaceAllUsesWith), so the two always mirror each other.
#ifndef GPTC_COMPILER_IR_INSTRUCTION_H_
#define GPTC_COMPILER_IR_INSTRUCTION_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "compiler/ir/gemm_epilogue.h"
#include "compiler/ir/opcode.h"
#include "compiler/ir/role.h"
#include "compiler/ir/shape.h"

namespace gptc::ir {

class Computation;

// Dot dimension numbers, as XLA: the result is [batch..., lhs free..., rhs free...].
struct DotDimensions {
  std::vector<int64_t> lhs_batch, rhs_batch;
  std::vector<int64_t> lhs_contracting, rhs_contracting;
  bool operator==(const DotDimensions&) const = default;
};

// Per-dimension [start, limit) with a positive stride.
struct SliceSpec {
  std::vector<int64_t> starts, limits, strides;
  bool operator==(const SliceSpec&) const = default;
};

// The attributes of all opcodes in one plain struct; each opcode reads only
// its own fields (see the printer for which). Keeping them in one place lets
// the builder, parser, printer, verifier and cloner share one definition.
struct Attrs {
  // parameter: parameter number; iota: iota dimension; get-tuple-element:
  // tuple index; gather / scatter-add: the indexed axis of the table;
  // attention-grad: the operand differentiated (0 q, 1 k, 2 v; `wrt=` in text);
  // reduce-scatter / all-gather: the number of ranks (`replicas=` in text).
  int64_t index = 0;
  // broadcast: operand dim i -> result dim dimensions[i]; transpose: result
  // dim i is operand dim dimensions[i]; reduce: reduced dims; concatenate: {axis}.
  std::vector<int64_t> dimensions;
  std::vector<int64_t> pad_low, pad_high;  // pad: edge padding per dim (>= 0)
  SliceSpec slice;
  DotDimensions dot;
  CompareDirection direction = CompareDirection::kEq;
  ReduceKind reduce_kind = ReduceKind::kSum;  // reduce, all-reduce, reduce-scatter
  FusionKind fusion_kind = FusionKind::kLoop;
  // fusion, kind=gemm: what follows the dot (set by the fusion pass).
  std::optional<GemmEpilogue> gemm_epilogue;
  // constant: the values in row-major order. Every dtype's values are exact
  // in a double (f32, bf16, f16, s32, u16, pred as 0/1).
  std::vector<double> literal;
  // attention, attention-lse, attention-grad: causal masking and the logit
  // scale (usually 1/sqrt(head dim)).
  bool causal = false;
  double scale = 1.0;
  // attention: the operand dtype of its backward's matmuls (Note [bf16
  // attention backward] in passes/mixed_precision.h); unset: q's dtype.
  std::optional<DType> grad_dtype;
  // softmax-cross-entropy: classes at or above this index are padding and
  // excluded from the softmax (0 means the whole last dimension).
  int64_t num_classes = 0;
  // all-reduce, reduce-scatter, all-gather: its bucket, the NCCL group it
  // is issued in (`bucket=` in text; unset until the combiner runs:
  // compiler/ir/all_reduce_bucket.h).
  std::optional<int64_t> bucket;

  bool operator==(const Attrs&) const = default;
};

class Instruction {
 public:
  static const Attrs kNoAttrs;  // the default attributes
  Instruction(std::string name, Opcode opcode, Shape shape, std::vector<Instruction*> operands,
              Attrs attrs = {});
  Instruction(const Instruction&) = delete;
  Instruction& operator=(const Instruction&) = delete;

  const std::string& name() const { return name_; }
  Opcode opcode() const { return opcode_; }
  const Shape& shape() const { return shape_; }
  const Attrs& attrs() const { return attrs_ != nullptr ? *attrs_ : kNoAttrs; }
  Attrs& mutable_attrs() {
    if (attrs_ == nullptr) attrs_ = std::make_unique<Attrs>();
    return *attrs_;
  }
  // Where this value came from in the model, e.g. "h.3.attn.qkv".
  const std::string& metadata() const { return metadata_; }
  void set_metadata(std::string metadata) { metadata_ = std::move(metadata); }
  // Which part of the train step and which layer this value belongs to: what
  // passes decide by (compiler/ir/role.h).
  Role role() const { return Role{phase_, layer_}; }
  void set_role(Role role) {
    phase_ = role.phase;
    layer_ = static_cast<int16_t>(role.layer);
  }

  const std::vector<Instruction*>& operands() const { return operands_; }
  Instruction* operand(int64_t i) const { return operands_[i]; }
  int64_t operand_count() const { return static_cast<int64_t>(operands_.size()); }
  // Each user appears once, however many times it uses this value.
  const std::vector<Instruction*>& users() const { return users_; }

  Computation* parent() const { return parent_; }
  // Where the parser read this instruction (line 0: built in memory), so the
  // verifier can point at the text.
  int line() const { return line_; }
  int column() const { return column_; }
  void set_location(int line, int column) {
    line_ = line;
    column_ = column;
  }
  // Its index in its computation's order as of the computation's last
  // NumberInstructions(), or -1 before one: a position found in O(1), for
  // walks that keep tables by position (as LLVM numbers a block's
  // instructions). Changing the order does not renumber, so a reader checks
  // the number against the order it was given (fusion_internal::Planner::
  // find_pos) or numbers again.
  int32_t position() const { return position_; }
  // fusion: the fused computation; attention / softmax-cross-entropy: the decomposition.
  Computation* called_computation() const { return called_; }
  void set_called_computation(Computation* c) { called_ = c; }

  // Points operand i at `new_operand`:
  //   %y = add(%a, %b)   --ReplaceOperandWith(1, %c)-->   %y = add(%a, %c)
  void ReplaceOperandWith(int64_t i, Instruction* new_operand);
  // Makes every user of this instruction use `other` instead; the root of the
  // parent computation moves too. Shapes must match (checked by the verifier).
  void ReplaceAllUsesWith(Instruction* other);
  // Makes every user of this instruction in `in` use `other` instead (users
  // elsewhere keep this); the root of `in` moves too. For a value moved out
  // of `in` (Computation::ReleaseInstructions) whose users there remain.
  void ReplaceUsesIn(Computation* in, Instruction* other);
  // Drops all operands (and this from their user lists), before removal.
  void DetachOperands();

 private:
  friend class Computation;
  void AddUser(Instruction* user);
  void RemoveUser(Instruction* user);

  // The fields every graph walk reads come first, together (64 bytes): on
  // 40k-instruction graphs each sweep of the fusion pass missed the caches
  // at every instruction, once per cache line it read.
  int32_t position_ = -1;
  Opcode opcode_;
  Phase phase_ = Phase::kNone;  // the role, split to fill the padding before operands_
  int16_t layer_ = -1;
  std::vector<Instruction*> operands_;
  std::vector<Instruction*> users_;
  Computation* parent_ = nullptr;
  Shape shape_;
  std::string metadata_;
  // Null for the default attributes, most instructions' (elementwise ops):
  // an Attrs is 312 bytes of mostly empty vectors, and held inline it made
  // an instruction 520 bytes; graphs of 40k+ instructions spilled the caches
  // (scripts/bench-fusion).
  std::unique_ptr<Attrs> attrs_;
  std::string name_;
  Computation* called_ = nullptr;
  int line_ = 0;
  int column_ = 0;
};

}  // namespace gptc::ir

#endif  // GPTC_COMPILER_IR_INSTRUCTION_H_
