#include "compiler/eval/value.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <new>

#include "compiler/support/float_bits.h"

namespace gptc::eval::internal {

namespace {

// Pooled buffers are mapped directly, so that an evicted one goes back to
// the system at once (malloc's heap could keep it, and the resident size
// with it).
void* MapBuffer(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  // Huge pages where the system gives them on request: a fresh 100 MB
  // buffer then costs 50 page faults instead of 25,000.
  if (bytes >= (size_t{2} << 20)) madvise(p, bytes, MADV_HUGEPAGE);
  return p;
}

void UnmapBuffer(void* buffer, size_t bytes) { munmap(buffer, bytes); }

}  // namespace

BufferPool::~BufferPool() {
  for (auto& [bytes, buffers] : free_) {
    for (void* buffer : buffers) UnmapBuffer(buffer, bytes);
  }
}

std::shared_ptr<void> BufferPool::Allocate(const std::shared_ptr<BufferPool>& pool, size_t bytes) {
  // Small buffers: malloc's own free lists already keep them warm.
  if (bytes < kMinPooledBytes) return std::shared_ptr<void>(std::malloc(bytes), std::free);
  void* buffer = nullptr;
  auto it = pool->free_.find(bytes);
  if (it != pool->free_.end() && !it->second.empty()) {
    buffer = it->second.back();
    it->second.pop_back();
    pool->pooled_bytes_ -= bytes;
  } else {
    pool->EvictFor(bytes);
    buffer = MapBuffer(bytes);
  }
  pool->live_bytes_ += bytes;
  pool->high_water_ = std::max(pool->high_water_, pool->live_bytes_);
  std::weak_ptr<BufferPool> weak = pool;
  return std::shared_ptr<void>(buffer, [weak, bytes](void* b) {
    if (std::shared_ptr<BufferPool> alive = weak.lock()) {
      alive->Release(b, bytes);
    } else {
      UnmapBuffer(b, bytes);
    }
  });
}

void BufferPool::EvictFor(size_t bytes) {
  const size_t bound = std::max(2 * high_water_, live_bytes_ + bytes);
  while (pooled_bytes_ > 0 && live_bytes_ + pooled_bytes_ + bytes > bound) {
    auto largest = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (!it->second.empty() && (largest == free_.end() || it->first > largest->first)) {
        largest = it;
      }
    }
    if (largest == free_.end()) break;
    UnmapBuffer(largest->second.back(), largest->first);
    largest->second.pop_back();
    pooled_bytes_ -= largest->first;
  }
}

void BufferPool::Release(void* buffer, size_t bytes) {
  live_bytes_ -= bytes;
  if (pooled_bytes_ + bytes > kMaxPooledBytes) {
    UnmapBuffer(buffer, bytes);
    return;
  }
  free_[bytes].push_back(buffer);
  pooled_bytes_ += bytes;
}

std::shared_ptr<Value> NewArray(const Context& ctx, const ir::Shape& shape) {
  auto value = std::make_shared<Value>();
  value->shape = shape;
  value->size = shape.num_elements();
  value->float_storage = ctx.FloatStorage(shape.dtype());
  // Uninitialized: every kernel writes all of its result, and zero-filling a
  // [256,50304] logits buffer first would cost a full extra pass.
  size_t element_bytes = value->float_storage ? sizeof(float) : sizeof(double);
  value->data = BufferPool::Allocate(ctx.pool, std::max<size_t>(value->size * element_bytes, 1));
  return value;
}

std::shared_ptr<Value> ShareArray(const ir::Shape& shape, const Value& source) {
  auto value = std::make_shared<Value>();
  value->shape = shape;
  value->size = source.size;
  value->float_storage = source.float_storage;
  value->data = source.data;
  return value;
}

void RoundToDType(const Context& ctx, Value& value) {
  ir::DType dtype = value.shape.dtype();
  if (!ctx.options.round_16bit || (dtype != ir::DType::kBF16 && dtype != ir::DType::kF16)) return;
  WithStorage(value.float_storage, [&](auto tag) {
    using T = decltype(tag);
    T* data = value.mutable_get<T>();
    if (dtype == ir::DType::kBF16) {
      for (int64_t i = 0; i < value.size; ++i) data[i] = RoundToBF16(static_cast<float>(data[i]));
    } else {
      for (int64_t i = 0; i < value.size; ++i) data[i] = RoundToF16(static_cast<float>(data[i]));
    }
  });
}

StatusOr<ValuePtr> FromLiteral(const Context& ctx, const Literal& literal) {
  if (literal.shape.is_tuple()) {
    if (literal.elements.size() != literal.shape.tuple_elements().size()) {
      return Error("{} literal has {} elements", literal.shape.ToString(), literal.elements.size());
    }
    auto value = std::make_shared<Value>();
    value->shape = literal.shape;
    for (const Literal& element : literal.elements) {
      ASSIGN_OR_RETURN(ValuePtr v, FromLiteral(ctx, element));
      value->elements.push_back(std::move(v));
    }
    return ValuePtr(std::move(value));
  }
  if (static_cast<int64_t>(literal.values.size()) != literal.shape.num_elements()) {
    return Error("{} literal has {} values", literal.shape.ToString(), literal.values.size());
  }
  std::shared_ptr<Value> value = NewArray(ctx, literal.shape);
  WithStorage(value->float_storage, [&](auto tag) {
    using T = decltype(tag);
    std::transform(literal.values.begin(), literal.values.end(), value->mutable_get<T>(),
                   [](double x) { return static_cast<T>(x); });
  });
  RoundToDType(ctx, *value);
  return ValuePtr(std::move(value));
}

Literal ToLiteral(const Value& value, Workspace* workspace) {
  Literal literal;
  literal.shape = value.shape;
  if (value.shape.is_tuple()) {
    for (const ValuePtr& element : value.elements) {
      literal.elements.push_back(ToLiteral(*element, workspace));
    }
    return literal;
  }
  const size_t size = static_cast<size_t>(value.size);
  literal.values = workspace != nullptr ? workspace->TakeValues(size) : std::vector<double>(size);
  WithStorage(value.float_storage, [&](auto tag) {
    using T = decltype(tag);
    std::copy_n(value.get<T>(), size, literal.values.begin());
  });
  return literal;
}

}  // namespace gptc::eval::internal

namespace gptc::eval {

Workspace::Workspace() : pool_(std::make_shared<internal::BufferPool>()) {}
Workspace::~Workspace() = default;

void Workspace::Recycle(Literal literal) {
  // The same bound as the pool: a workspace never holds more than a few
  // steps' worth of state.
  constexpr size_t kMaxRecycledBytes = size_t{1} << 30;
  for (Literal& element : literal.elements) Recycle(std::move(element));
  const size_t bytes = literal.values.size() * sizeof(double);
  if (bytes == 0 || recycled_bytes_ + bytes > kMaxRecycledBytes) return;
  recycled_bytes_ += bytes;
  recycled_[literal.values.size()].push_back(std::move(literal.values));
}

std::vector<double> Workspace::TakeValues(size_t size) {
  auto it = recycled_.find(size);
  if (it == recycled_.end() || it->second.empty()) return std::vector<double>(size);
  std::vector<double> values = std::move(it->second.back());
  it->second.pop_back();
  recycled_bytes_ -= size * sizeof(double);
  return values;
}

}  // namespace gptc::eval
