// Host values <-> the bytes of a device buffer of a given dtype (dense,
// row-major, little-endian; pred one byte per element, as Note [kernel ABI]).
// Values are doubles, as in eval::Literal; encoding rounds to the dtype
// (bf16/f16 round to nearest even, integers truncate).
#ifndef GPTC_RUNTIME_GPU_HOST_VALUES_H_
#define GPTC_RUNTIME_GPU_HOST_VALUES_H_

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/ir/shape.h"

namespace gptc::rt::gpu {

std::string EncodeValues(ir::DType dtype, std::span<const double> values);
// Decodes bytes.size() / DTypeBytes(dtype) elements.
std::vector<double> DecodeValues(ir::DType dtype, std::string_view bytes);

}  // namespace gptc::rt::gpu

#endif  // GPTC_RUNTIME_GPU_HOST_VALUES_H_
