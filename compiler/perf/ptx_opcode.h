// What a PTX opcode with its suffixes says ("ld.global.v4.f32",
// "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"): ptx_program.cc's
// decoding of one statement's opcode into a PtxInst.
#ifndef GPTC_COMPILER_PERF_PTX_OPCODE_H_
#define GPTC_COMPILER_PERF_PTX_OPCODE_H_

#include <string_view>

#include "compiler/perf/ptx_program.h"

namespace gptc::perf {

// The type a suffix names ("b32", "bf16x2"), or kNone.
PtxType PtxTypeOf(std::string_view suffix);

// Sets `inst`'s op, types, comparison, space, vector width, element bytes
// and shapes from `opcode`.
void DecodeOpcode(std::string_view opcode, PtxInst& inst);

}  // namespace gptc::perf

#endif  // GPTC_COMPILER_PERF_PTX_OPCODE_H_
