// The warpgroup matrix instruction of the emulated device
// (compiler/program/emu_abi.h: EmuRuntime::wgmma): the fragment layouts of
// its registers, the shared-memory matrix descriptors and the canonical
// layouts they describe (PTX ISA, "Asynchronous Warpgroup Level Matrix
// Shared Memory Layout"), and the product. The warpgroup's rendezvous, the
// reads' checks and the asynchronous semantics are warpgroup.h's.
//
// Note [emulated warpgroup matrix operations]
// wgmma.mma_async.m64nNk16 with f32 accumulators: thread t of the warpgroup
// (warp w = t / 32, lane l, g = l / 4, q = l % 4) holds
//   C, D: register 4i + e (i < N / 8): row 16w + g + 8 (e / 2), column
//         8i + 2q + e % 2;
//   A (from registers): register j of 4 (two 16-bit elements, the lower
//         first): row 16w + g + 8 (j % 2), columns 2q + 8 (j / 2), + 1;
// each warp's 16 rows laid out as mma.m16n8k16's fragments (Note [emulated
// warp matrix operations] in warp_matrix.h). An operand in shared memory is
// R x 16 16-bit elements (A: R = 64 rows, B: R = N columns), K-major (a
// row's 16 K elements together: A without imm-trans-a, B without
// imm-trans-b) or MN-major, read through a 64-bit descriptor:
//   bits 0-13 start address >> 4, 16-29 leading byte offset (LBO) >> 4,
//   32-45 stride byte offset (SBO) >> 4, 49-51 base offset, 62-63 swizzle
//   (0 none, 1: 128 bytes, 2: 64, 3: 32); the other bits are zero.
// Element (r, k) lies at shared address, from the start address s:
//   no swizzle (core matrices of 8 rows of 16 bytes):
//     K-major   s + (r / 8) SBO + (r % 8) 16 + (k / 8) LBO + (k % 8) 2
//     MN-major  s + (r / 8) SBO + (r % 8) 2 + (k / 8) LBO + (k % 8) 16
//   swizzle of W = 32, 64 or 128 bytes (atoms of 8 rows of W bytes):
//     K-major   x = s + (r / 8) SBO + (r % 8) W + 2 k          (LBO unused)
//     MN-major  x = s + (r / (W/2)) LBO + (r % (W/2)) 2 + (k % 8) W + (k / 8) SBO
//     then x's 16-byte chunk is XORed with its row in the atom:
//     x ^ (((x >> 7) & (W / 16 - 1)) << 4)
// (the canonical layouts of CUTLASS's make_gmma_desc). The swizzle reads
// address bits 7 and up, so an atom starts at a multiple of 8 W bytes; the
// base offset that would correct an unaligned one is refused, as are
// reserved bits. Arithmetic as mma's: D[i][j] = (scale-d ? C[i][j] : 0) +
// sum_k A[i][k] B[k][j] in double, C first then k ascending, rounded once to
// f32 (imm-scale-a/b negate A or B first): compare with a GPU to a few ulps.
#ifndef GPTC_RUNTIME_EMU_WARPGROUP_MATRIX_H_
#define GPTC_RUNTIME_EMU_WARPGROUP_MATRIX_H_

#include <cstdint>
#include <optional>
#include <string>

#include "compiler/program/emu_abi.h"

namespace gptc::rt::emu {

inline constexpr uint32_t kWarpgroupThreads = 128;
inline constexpr uint32_t kWgmmaM = 64, kWgmmaK = 16;

// "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16"; empty for an op
// the emulator does not know (N not a multiple of 8 in [8, 256], unknown
// bits, imm-trans-a with A in registers).
std::string WgmmaName(uint32_t op);
// The 32-bit operand words the op takes (emu_abi.h), C included.
uint32_t WgmmaOperandWords(uint32_t op);

struct MatrixDescriptor {
  uint32_t start = 0, lbo = 0, sbo = 0;  // bytes
  uint32_t swizzle = 0;                  // bytes of a swizzle row: 0 (none), 32, 64, 128
};
// The descriptor of `bits`, or nullopt with `error` saying what is wrong
// ("base offset 3 has no emulation", "reserved bits 0x...").
std::optional<MatrixDescriptor> DecodeDescriptor(uint64_t bits, std::string* error);
// The bits of `d` (its fields multiples of 16, below 2^18).
uint64_t EncodeDescriptor(const MatrixDescriptor& d);

// The shared address of element (r, k) of an operand (Note [emulated
// warpgroup matrix operations]); MN-major when `mn_major`.
uint32_t OperandAddress(const MatrixDescriptor& d, bool mn_major, uint32_t r, uint32_t k);

// Thread t's A register `j` holds elements (row, col) and (row, col + 1).
void RegisterAElement(uint32_t t, uint32_t j, uint32_t* row, uint32_t* col);
// Thread t's accumulator `reg` is element (row, col) of D.
void AccumulatorElement(uint32_t t, uint32_t reg, uint32_t* row, uint32_t* col);

// D = A B (+ C) for the warpgroup: a is 64 x 16 and b 16 x N (N = op's),
// both row-major 16-bit elements of the op's type; c[t] and d[t] are thread
// t's N / 2 accumulators (d may be c). Every D is computed before any is
// written.
void WarpgroupMma(uint32_t op, const uint16_t* a, const uint16_t* b, bool scale_d,
                  const float* const c[kWarpgroupThreads], float* const d[kWarpgroupThreads]);

}  // namespace gptc::rt::emu

#endif  // GPTC_RUNTIME_EMU_WARPGROUP_MATRIX_H_
