// dot: XLA dot dimension numbers lowered to batched BLAS GEMMs.
//
// Both operands are brought to [batch, M, K] and [batch, K, N] (or their
// per-matrix transposes, which BLAS reads directly through its Trans flags),
// so the common layouts (x @ W, dy @ W^T, x^T @ dy) never copy an operand.
// The result [batch, M, N] is exactly XLA's [batch..., lhs free..., rhs free...].
#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <limits>

#include "compiler/eval/value.h"

namespace gptc::eval::internal {

namespace {

std::vector<int64_t> Concat(std::initializer_list<const std::vector<int64_t>*> parts) {
  std::vector<int64_t> result;
  for (const std::vector<int64_t>* part : parts)
    result.insert(result.end(), part->begin(), part->end());
  return result;
}

// The dims of `shape` that are neither batch nor contracting, in order.
std::vector<int64_t> FreeDims(const ir::Shape& shape, const std::vector<int64_t>& batch,
                              const std::vector<int64_t>& contracting) {
  std::vector<int64_t> free;
  for (int64_t d = 0; d < shape.rank(); ++d) {
    if (std::find(batch.begin(), batch.end(), d) == batch.end() &&
        std::find(contracting.begin(), contracting.end(), d) == contracting.end()) {
      free.push_back(d);
    }
  }
  return free;
}

// Whether permuting by `permutation` is a no-op on the row-major data: true
// when the dims of size > 1 already appear in increasing order.
bool IsLayoutNoop(const ir::Shape& shape, const std::vector<int64_t>& permutation) {
  int64_t last = -1;
  for (int64_t d : permutation) {
    if (shape.dim(d) == 1) continue;
    if (d < last) return false;
    last = d;
  }
  return true;
}

int64_t Product(const ir::Shape& shape, const std::vector<int64_t>& dims) {
  int64_t p = 1;
  for (int64_t d : dims) p *= shape.dim(d);
  return p;
}

// An operand as the GEMM sees it: row-major matrices, one per batch, stored
// either as wanted or transposed.
struct GemmOperand {
  const Value* value;
  std::shared_ptr<Value> copy;  // owns a permuted copy when the layout needed one
  bool transposed;
};

// Picks the layout for one operand: `wanted` and `transposed` are the two
// permutations BLAS can read in place; anything else is copied into `wanted`.
GemmOperand Layout(const Context& ctx, const Value& x, const std::vector<int64_t>& wanted,
                   const std::vector<int64_t>& transposed) {
  if (IsLayoutNoop(x.shape, wanted)) return {&x, nullptr, false};
  if (IsLayoutNoop(x.shape, transposed)) return {&x, nullptr, true};
  std::shared_ptr<Value> copy = Permute(ctx, x, wanted);
  return {copy.get(), copy, false};
}

// OpenBLAS's worker threads wait for work spinning on sched_yield: after
// each threaded gemm they burn the other cores in system time, more than the
// threads save on a small model (docs/PERFORMANCE.md, "The CPU device").
// Gemms under kThreadedMacs multiply-adds (all of gpt2-tiny's) run on the
// calling thread alone; the vocabulary projections of the real GPT-2 sizes
// still split.
constexpr int64_t kThreadedMacs = int64_t{1} << 32;

void UseThreadsFor(int64_t macs) {
  static const int all = openblas_get_num_threads();
  static std::atomic<int> current{all};
  const int want = macs >= kThreadedMacs ? all : 1;
  if (current.exchange(want) != want) openblas_set_num_threads(want);
}

void Gemm(bool ta, bool tb, int m, int n, int k, const float* a, int lda, const float* b, int ldb,
          float* c) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
              k, 1.0f, a, lda, b, ldb, 0.0f, c, n);
}
void Gemm(bool ta, bool tb, int m, int n, int k, const double* a, int lda, const double* b, int ldb,
          double* c) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
              k, 1.0, a, lda, b, ldb, 0.0, c, n);
}

}  // namespace

StatusOr<std::shared_ptr<Value>> EvalDot(const Context& ctx, const ir::Instruction& inst,
                                         const Value& lhs, const Value& rhs) {
  const ir::DotDimensions& dn = inst.attrs().dot;
  const std::vector<int64_t> lhs_free = FreeDims(lhs.shape, dn.lhs_batch, dn.lhs_contracting);
  const std::vector<int64_t> rhs_free = FreeDims(rhs.shape, dn.rhs_batch, dn.rhs_contracting);
  const int64_t batch = Product(lhs.shape, dn.lhs_batch);
  const int64_t m = Product(lhs.shape, lhs_free);
  const int64_t k = Product(lhs.shape, dn.lhs_contracting);
  const int64_t n = Product(rhs.shape, rhs_free);
  constexpr int64_t kMaxBlas = std::numeric_limits<int>::max();
  if (m > kMaxBlas || n > kMaxBlas || k > kMaxBlas) {
    return Error("dot matrix [{}x{}]x[{}x{}] too large for 32-bit BLAS", m, k, k, n);
  }

  std::shared_ptr<Value> out = NewArray(ctx, inst.shape());
  if (out->size == 0) return out;
  GemmOperand a = Layout(ctx, lhs, Concat({&dn.lhs_batch, &lhs_free, &dn.lhs_contracting}),
                         Concat({&dn.lhs_batch, &dn.lhs_contracting, &lhs_free}));
  GemmOperand b = Layout(ctx, rhs, Concat({&dn.rhs_batch, &dn.rhs_contracting, &rhs_free}),
                         Concat({&dn.rhs_batch, &rhs_free, &dn.rhs_contracting}));
  // Leading dims of the stored matrices: [M,K] or [K,M], [K,N] or [N,K].
  const int lda = static_cast<int>(a.transposed ? m : k);
  const int ldb = static_cast<int>(b.transposed ? k : n);
  WithStorage(out->float_storage, [&](auto tag) {
    using T = decltype(tag);
    T* c = out->mutable_get<T>();
    if (k == 0) {  // an empty sum; BLAS implementations disagree on k = 0
      std::fill_n(c, out->size, T(0));
      return;
    }
    UseThreadsFor(batch * m * n * k);
    for (int64_t i = 0; i < batch; ++i) {
      Gemm(a.transposed, b.transposed, static_cast<int>(m), static_cast<int>(n),
           static_cast<int>(k), a.value->get<T>() + i * m * k, std::max(lda, 1),
           b.value->get<T>() + i * k * n, std::max(ldb, 1), c + i * m * n);
    }
  });
  RoundToDType(ctx, *out);
  return out;
}

}  // namespace gptc::eval::internal
