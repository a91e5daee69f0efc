// The warp-level matrix instructions of the emulated device
// (compiler/program/emu_abi.h: EmuRuntime::mma and ldmatrix): what every lane
// of a warp receives, given what every lane supplied, from the fragment
// layouts of the PTX ISA ("Matrix Fragments for mma.m16n8k16 with floating
// point type", "ldmatrix"). The grid runner gathers the warp (Note [emulated
// synchronization] in grid_runner.h) and checks the rows ldmatrix reads.
//
// Note [emulated warp matrix operations]
// mma.m16n8k16.row.col with f32 accumulators, bf16 or f16 multiplicands:
// with g = lane / 4 (PTX's groupID) and t = lane % 4 (threadID_in_group), a
// lane holds
//   A  reg 0: row g, cols 2t, 2t+1       reg 1: row g+8, cols 2t, 2t+1
//      reg 2: row g, cols 2t+8, 2t+9     reg 3: row g+8, cols 2t+8, 2t+9
//   B  reg 0: rows 2t, 2t+1 of col g     reg 1: rows 2t+8, 2t+9 of col g
//   C, D  elements 0, 1: row g, cols 2t, 2t+1; 2, 3: row g+8, cols 2t, 2t+1
// where a 32-bit register holds its first element in the low 16 bits.
// ldmatrix.m8n8.xN[.trans].b16: lanes 8m..8m+7 give the addresses of rows
// 0..7 of matrix m (8 contiguous 16-bit elements, 16-byte aligned; the other
// lanes' addresses are ignored); lane l receives in register m elements
// 2(l%4) and 2(l%4)+1 of row l/4 of matrix m, or with .trans of column l/4
// (that is, rows 2(l%4) and 2(l%4)+1 at column l/4). So ldmatrix.x4 of a
// row-major 16x16 tile (lane l giving row l%16 at column 8(l/16)) is an A
// fragment, and ldmatrix.x2.trans of a row-major 16x8 (k x n) tile is a B
// fragment.
//
// Accumulation order: PTX specifies neither the order nor the precision of
// the tensor cores' sums. The emulator computes every D[i][j] = C[i][j] +
// sum_k A[i][k] * B[k][j] in double, C first then k ascending, and rounds
// once to f32 (to nearest even). Products of bf16 or f16 values are exact in
// double, and 17 such terms sum in double with an error far below an f32
// ulp: D is the exact result rounded once (up to that error). A GPU's tensor
// cores round (or truncate) differently, so results agree to a few f32 ulps
// of |C[i][j]| + sum_k |A[i][k] * B[k][j]|: compare with that tolerance,
// never bit for bit. Subnormal inputs are kept; NaN and infinities propagate
// as in IEEE arithmetic.
#ifndef GPTC_RUNTIME_EMU_WARP_MATRIX_H_
#define GPTC_RUNTIME_EMU_WARP_MATRIX_H_

#include <cstdint>
#include <string>

#include "compiler/program/emu_abi.h"

namespace gptc::rt::emu {

inline constexpr uint32_t kWarpLanes = 32;

// "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"; empty for an op
// the emulator does not know.
std::string MmaName(uint32_t op);
// "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"; empty for an unknown op.
std::string LdmatrixName(uint32_t op);
// The matrices an ldmatrix op loads (1, 2 or 4); 0 for an unknown op.
uint32_t LdmatrixCount(uint32_t op);

// The warp's mma `op` (a known one): fragments[lane] is what lane passed
// (program::emu::kMmaFragmentRegs registers), d[lane] receives its D (4
// floats). Every D is computed before any is written.
void WarpMma(uint32_t op, const uint32_t* const fragments[kWarpLanes], float* const d[kWarpLanes]);

// The warp's ldmatrix `op` (a known one): rows[lane] is the lane's row
// address (read for lanes below 8 * LdmatrixCount(op): 16 bytes each, the
// caller has checked them), out[lane] receives LdmatrixCount(op) registers.
void WarpLdmatrix(uint32_t op, const char* const rows[kWarpLanes], uint32_t* const out[kWarpLanes]);

}  // namespace gptc::rt::emu

#endif  // GPTC_RUNTIME_EMU_WARP_MATRIX_H_
