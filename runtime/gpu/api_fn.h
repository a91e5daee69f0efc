// One function of a CUDA API table (the runtime's RuntimeApi, DriverApi,
// CublasLtApi), as a backend provides it.
//
// Note [bound API functions]
// CUDA's C functions carry no context: cudaMalloc does not say which
// device it allocates on, because NVIDIA's runtime keeps a current device
// per thread. A backend that is an object (the emulated device, several of
// which a process may hold) needs its own state in every call without a
// process-global to find it, so each entry of the table is either a plain
// C function with CUDA's signature (NVIDIA's, resolved at link time or with
// dlsym) or a function of the same signature bound to a context:
//   .Malloc = &::cudaMalloc                               // NVIDIA's
//   .Malloc = BindApiFn<&emu::Malloc>(&device)            // Malloc(State&, void**, size_t)
// Callers write `Cuda().Malloc(&p, bytes)` either way and the signature is
// checked at compile time against CUDA's header: a table entry of
// ApiFn<decltype(::cudaMalloc)> takes nothing else.
#ifndef GPTC_RUNTIME_GPU_API_FN_H_
#define GPTC_RUNTIME_GPU_API_FN_H_

namespace gptc::rt::gpu {

template <class Signature>
class ApiFn;

template <class R, class... A>
class ApiFn<R(A...)> {
 public:
  using Plain = R (*)(A...);

  ApiFn() = default;
  // A plain C function (null: the entry stays empty).
  ApiFn(Plain f)  // NOLINT(google-explicit-constructor): tables assign C functions
      : call_(f != nullptr ? &CallPlain : nullptr), context_(reinterpret_cast<void*>(f)) {}
  // `F(*context, args...)` for each call; `context` must outlive the table.
  template <auto F, class C>
  static ApiFn Bind(C* context) {
    ApiFn f;
    f.call_ = [](void* c, A... a) -> R { return F(*static_cast<C*>(c), a...); };
    f.context_ = const_cast<void*>(static_cast<const void*>(context));
    return f;
  }

  R operator()(A... a) const { return call_(context_, a...); }
  explicit operator bool() const { return call_ != nullptr; }

 private:
  static R CallPlain(void* f, A... a) { return reinterpret_cast<Plain>(f)(a...); }

  R (*call_)(void*, A...) = nullptr;
  void* context_ = nullptr;
};

namespace api_fn_internal {
template <auto F>
struct Binder;
template <class R, class C, class... A, R (*F)(C&, A...)>
struct Binder<F> {
  static ApiFn<R(A...)> To(C* context) { return ApiFn<R(A...)>::template Bind<F>(context); }
};
}  // namespace api_fn_internal

// `F` (whose first parameter is `C&`) bound to `context`, as the table entry
// of the signature of its other parameters.
template <auto F, class C>
auto BindApiFn(C* context) {
  return api_fn_internal::Binder<F>::To(context);
}

}  // namespace gptc::rt::gpu

#endif  // GPTC_RUNTIME_GPU_API_FN_H_
