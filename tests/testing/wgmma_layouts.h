// The canonical shared-memory layouts of wgmma's operands as the PTX ISA
// pictures them, for tests: written apart from the emulator's bit
// arithmetic (runtime/emu/warpgroup_matrix.h), which they check, and used to
// lay out operands for the test kernels.
#ifndef GPTC_TESTS_TESTING_WGMMA_LAYOUTS_H_
#define GPTC_TESTS_TESTING_WGMMA_LAYOUTS_H_

#include <cstdint>

#include "runtime/emu/warpgroup_matrix.h"

namespace gptc::testing {

using rt::emu::MatrixDescriptor;

// The address of element (r, k) of an R x 16 operand, from the layouts'
// pictures. No swizzle: core matrices of 8 rows of 8 elements (128
// contiguous bytes), stepped by SBO along R and LBO along K. A swizzle of W
// bytes: atoms of 8 rows of W bytes (K-major: a row is one r's K elements;
// MN-major: one k's R elements), and in row i of an atom the 16-byte chunk
// c of the row holds what the unswizzled row has at chunk c ^ (i / (8 /
// (W / 16))): the chunks of every row for W = 128, of pairs of rows for 64,
// of quadruples for 32, XORed with their row's index. The descriptor's start
// may lie inside an atom's first row (the next k-step of a K-major operand).
inline uint32_t PictureAddress(const MatrixDescriptor& d, bool mn_major, uint32_t r, uint32_t k) {
  if (d.swizzle == 0) {
    const uint32_t core = d.start + (r / 8) * d.sbo + (k / 8) * d.lbo;
    // K-major: a core matrix row is 8 K elements of one r; MN-major: 8 r of one k.
    return core + (mn_major ? (k % 8) * 16 + (r % 8) * 2 : (r % 8) * 16 + (k % 8) * 2);
  }
  const uint32_t w = d.swizzle, chunks = w / 16, per_row = w / 2;
  const uint32_t atom = d.start - d.start % w;
  uint32_t row_start, row, in_row;  // the atom row's address, its index, the element's byte
  if (!mn_major) {
    row_start = atom + (r / 8) * d.sbo + (r % 8) * w;
    row = r % 8;
    in_row = d.start % w + 2 * k;
  } else {
    row_start = atom + (r / per_row) * d.lbo + (k / 8) * d.sbo + (k % 8) * w;
    row = k % 8;
    in_row = d.start % w + 2 * (r % per_row);
  }
  const uint32_t swizzled = (in_row / 16) ^ (row / (8 / chunks));
  return row_start + 16 * swizzled + in_row % 16;
}

}  // namespace gptc::testing

#endif  // GPTC_TESTS_TESTING_WGMMA_LAYOUTS_H_
