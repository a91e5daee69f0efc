// safetensors files (https://github.com/huggingface/safetensors): an 8-byte
// little-endian header length N, N bytes of JSON
//   {"wte.weight": {"dtype": "F32", "shape": [50304, 768], "data_offsets": [0, 154533888]},
//    ..., "__metadata__": {"step": "100"}}
// (padded with spaces to a multiple of 8), then the tensors' raw little-endian
// bytes; data_offsets are relative to the end of the header.
#ifndef GPTC_RUNTIME_SAFETENSORS_H_
#define GPTC_RUNTIME_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/support/status.h"
#include "compiler/support/text.h"

namespace gptc::rt {

struct SafeTensor {
  std::string name;
  std::string dtype;           // "F32", "BF16", "F16", "F64", "I64", "I32", "I16", "U16", "U8", ...
  std::vector<int64_t> shape;  // row-major
  std::string data;            // raw bytes, numel * DTypeBytes(dtype)
};

struct SafeTensors {
  std::vector<SafeTensor> tensors;  // written in this order
  std::map<std::string, std::string> metadata;

  // The tensor called `name`, or nullptr.
  const SafeTensor* Find(const std::string& name) const;
};

// Bytes per element of a safetensors dtype, or 0 if unknown.
int64_t DTypeBytes(const std::string& dtype);

// The whole file's bytes; fails on an unknown dtype, a size that does not
// match the shape, a rank above the reader's limit, or a repeated name.
StatusOr<std::string> SerializeSafeTensors(const SafeTensors& file);
// The file's tensors (in name order) and metadata, checked as Note [strict
// safetensors] in safetensors.cc says: repeated keys, overlapping, unordered
// or uncovered data offsets, dtype/shape/size disagreements and ranks above
// 16 are refused with one short line naming `name` and the tensor.
StatusOr<SafeTensors> ParseSafeTensors(const std::string& bytes, const std::string& name);

// Writes atomically (temp file, fsync, rename): `path` holds either the old
// file or the whole new one, never a torn one.
Status WriteSafeTensors(const std::string& path, const SafeTensors& file);
// Reads and validates; errors name the file and the tensor or offset at fault.
StatusOr<SafeTensors> ReadSafeTensors(const std::string& path);

// Only the __metadata__ of a file, reading its header and not its tensors
// (a checkpoint's model file is ~500 MB at gpt2-124m); the header is checked
// as ParseSafeTensors checks it, against the file's size.
StatusOr<std::map<std::string, std::string>> ReadSafeTensorsMetadata(const std::string& path);

// f32 tensors from/to floats.
SafeTensor F32Tensor(std::string name, std::vector<int64_t> shape, const std::vector<float>& v);
std::vector<float> F32Values(const SafeTensor& t);

}  // namespace gptc::rt

#endif  // GPTC_RUNTIME_SAFETENSORS_H_
