// Deterministic, counter-based parameter initialization.
//
// Every element's initial value is a pure function of (seed, parameter
// index, element index): a splitmix64 hash gives two uniforms per pair of
// elements and Box-Muller turns them into two normals (even element: the
// cosine branch, odd: the sine branch). No generator state is carried from
// one element to the next, so a GPU kernel (one thread per pair) reproduces
// exactly the values this host code produces, in any order.
#ifndef GPTC_RUNTIME_INIT_H_
#define GPTC_RUNTIME_INIT_H_

#include <cstdint>
#include <vector>

#include "compiler/program/param.h"

namespace gptc::rt {

// The splitmix64 finalizer (Steele, Lea, Flood 2014): a bijective 64-bit mix.
inline uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// A standard normal sample for `element` of parameter `param_index`.
double StandardNormal(uint64_t seed, uint64_t param_index, uint64_t element);

// The initial value of `element` of parameter `param_index` under `rule`
// (normal(0, std), zeros or ones), rounded to f32.
float InitValue(const program::InitRule& rule, uint64_t seed, uint64_t param_index,
                uint64_t element);

// All of a parameter's initial values, row-major.
std::vector<float> InitParameter(const program::ParamSpec& spec, uint64_t seed,
                                 uint64_t param_index);

}  // namespace gptc::rt

#endif  // GPTC_RUNTIME_INIT_H_
