#ifndef GPTC_COMPILER_SUPPORT_POINTER_INDEX_H_
#define GPTC_COMPILER_SUPPORT_POINTER_INDEX_H_

#include <algorithm>
#include <bit>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace gptc {

// Numbers a fixed set of pointers 0..n-1 in insertion order, and finds a
// pointer's number: an open-addressing table of pointers and numbers in two
// flat arrays. Passes that keep per-instruction facts in vectors indexed by
// this number touch two cache lines per lookup, where a node-based
// std::unordered_map touches a bucket, a node and its allocation: on graphs
// of 40k+ instructions that difference was most of the fusion pass's
// superlinear growth.
class PointerIndex {
 public:
  PointerIndex() = default;
  explicit PointerIndex(size_t expected) { Reserve(expected); }

  // Makes room for `expected` pointers without rehashing.
  void Reserve(size_t expected) {
    size_t want = std::bit_ceil(expected * 2 + 2);
    if (want > keys_.size()) Rehash(want);
  }

  // The number of `p`, giving it the next one if it has none.
  int32_t Insert(const void* p) {
    assert(p != nullptr);
    if ((count_ + 1) * 2 > keys_.size()) Rehash(std::max<size_t>(16, keys_.size() * 2));
    size_t i = Slot(p);
    if (keys_[i] == p) return values_[i];
    keys_[i] = p;
    values_[i] = static_cast<int32_t>(count_++);
    return values_[i];
  }

  // The number of `p`, or -1 if it was never inserted.
  int32_t Find(const void* p) const {
    if (keys_.empty()) return -1;
    size_t i = Slot(p);
    return keys_[i] == p ? values_[i] : -1;
  }

  size_t size() const { return count_; }

 private:
  // The slot holding `p`, or the empty slot where it would go.
  size_t Slot(const void* p) const {
    size_t mask = keys_.size() - 1;
    // Fibonacci hashing (the product's top bits): allocations are aligned,
    // so the pointer's low bits alone would crowd into a few slots.
    size_t i =
        static_cast<size_t>((reinterpret_cast<uintptr_t>(p) * 0x9E3779B97F4A7C15ull) >> shift_);
    while (keys_[i] != nullptr && keys_[i] != p) i = (i + 1) & mask;
    return i;
  }

  void Rehash(size_t capacity) {
    std::vector<const void*> keys = std::move(keys_);
    std::vector<int32_t> values = std::move(values_);
    keys_.assign(capacity, nullptr);
    shift_ = 64 - std::countr_zero(capacity);
    values_.assign(capacity, -1);
    for (size_t i = 0; i < keys.size(); ++i) {
      if (keys[i] != nullptr) {
        size_t j = Slot(keys[i]);
        keys_[j] = keys[i];
        values_[j] = values[i];
      }
    }
  }

  std::vector<const void*> keys_;
  std::vector<int32_t> values_;
  size_t count_ = 0;
  int shift_ = 64;
};

}  // namespace gptc

#endif  // GPTC_COMPILER_SUPPORT_POINTER_INDEX_H_
