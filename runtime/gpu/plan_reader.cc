#include "runtime/gpu/plan_reader.h"

#include <cublasLt.h>
#include <library_types.h>

#include <algorithm>
#include <type_traits>

#include "compiler/ir/parser.h"
#include "compiler/program/json_field.h"
#include "runtime/gpu/host_values.h"

namespace gptc::rt::gpu {

namespace {

using nlohmann::json;

// A slice {"offset", "size"} that must lie inside the arena; `at` names it.
StatusOr<ArenaSlice> ReadSliceValue(const json& v, const std::string& at, int64_t arena_size) {
  ArenaSlice s;
  ASSIGN_OR_RETURN(s.offset, program::JsonField<int64_t>(v, "offset", at));
  ASSIGN_OR_RETURN(s.size, program::JsonField<int64_t>(v, "size", at));
  ASSIGN_OR_RETURN(s.buffer, program::JsonFieldOr<int64_t>(v, "buffer", at, -1));
  if (s.offset < 0 || s.size < 0 || s.offset > arena_size || s.size > arena_size - s.offset) {
    return Error("{}: slice [{}, +{}) is outside the arena of {} bytes", at, s.offset, s.size,
                 arena_size);
  }
  return s;
}

StatusOr<ArenaSlice> ReadSlice(const json& j, std::string_view key, std::string_view where,
                               int64_t arena_size) {
  if (!j.contains(key)) return Error("{} has no slice '{}'", where, key);
  return ReadSliceValue(j[key], fmt::format("{}.{}", where, key), arena_size);
}

StatusOr<std::array<int64_t, 3>> ReadDim3(const json& j, std::string_view key,
                                          std::string_view where) {
  if (!j.contains(key) || !j[key].is_array() || j[key].size() != 3) {
    return Error("{}.{} is not an array of 3 integers", where, key);
  }
  std::array<int64_t, 3> d;
  for (int i = 0; i < 3; ++i) {
    if (!j[key][i].is_number_integer() || j[key][i].get<int64_t>() < 1) {
      return Error("{}.{}[{}] must be a positive integer, got {}", where, key, i, j[key][i].dump());
    }
    d[i] = j[key][i].get<int64_t>();
  }
  return d;
}

// The numeric value of a cuBLASLt / CUDA enum spelled as a string.
template <typename Table>
StatusOr<int32_t> Lookup(const Table& table, const json& j, std::string_view key,
                         std::string_view where) {
  ASSIGN_OR_RETURN(std::string name, program::JsonField<std::string>(j, key, where));
  for (const auto& [n, v] : table) {
    if (name == n) return static_cast<int32_t>(v);
  }
  return Error("{}.{}: '{}' is not a value this runtime knows", where, key, name);
}

constexpr std::pair<std::string_view, cudaDataType_t> kDataTypes[] = {
    {"CUDA_R_16BF", CUDA_R_16BF}, {"CUDA_R_32F", CUDA_R_32F}, {"CUDA_R_16F", CUDA_R_16F}};
constexpr std::pair<std::string_view, cublasComputeType_t> kComputeTypes[] = {
    {"CUBLAS_COMPUTE_32F", CUBLAS_COMPUTE_32F},
    {"CUBLAS_COMPUTE_32F_FAST_TF32", CUBLAS_COMPUTE_32F_FAST_TF32}};
constexpr std::pair<std::string_view, cublasOperation_t> kOps[] = {{"CUBLAS_OP_N", CUBLAS_OP_N},
                                                                   {"CUBLAS_OP_T", CUBLAS_OP_T}};
constexpr std::pair<std::string_view, cublasLtEpilogue_t> kEpilogues[] = {
    {"CUBLASLT_EPILOGUE_DEFAULT", CUBLASLT_EPILOGUE_DEFAULT},
    {"CUBLASLT_EPILOGUE_BIAS", CUBLASLT_EPILOGUE_BIAS},
    {"CUBLASLT_EPILOGUE_GELU", CUBLASLT_EPILOGUE_GELU},
    {"CUBLASLT_EPILOGUE_GELU_BIAS", CUBLASLT_EPILOGUE_GELU_BIAS},
    {"CUBLASLT_EPILOGUE_GELU_AUX", CUBLASLT_EPILOGUE_GELU_AUX},
    {"CUBLASLT_EPILOGUE_GELU_AUX_BIAS", CUBLASLT_EPILOGUE_GELU_AUX_BIAS},
    {"CUBLASLT_EPILOGUE_DGELU", CUBLASLT_EPILOGUE_DGELU},
    {"CUBLASLT_EPILOGUE_DGELU_BGRAD", CUBLASLT_EPILOGUE_DGELU_BGRAD},
    {"CUBLASLT_EPILOGUE_BGRADA", CUBLASLT_EPILOGUE_BGRADA},
    {"CUBLASLT_EPILOGUE_BGRADB", CUBLASLT_EPILOGUE_BGRADB}};

std::string_view NameOf(int32_t value, const auto& table) {
  for (const auto& [n, v] : table) {
    if (static_cast<int32_t>(v) == value) return n;
  }
  return "?";
}

StatusOr<GemmLayout> ReadLayout(const json& d, std::string_view key, std::string_view where) {
  if (!d.contains(key)) return Error("{} has no layout '{}'", where, key);
  const std::string at = fmt::format("{}.{}", where, key);
  const json& j = d[key];
  GemmLayout l;
  ASSIGN_OR_RETURN(l.dtype, Lookup(kDataTypes, j, "dtype", at));
  ASSIGN_OR_RETURN(l.rows, program::JsonField<int64_t>(j, "rows", at));
  ASSIGN_OR_RETURN(l.cols, program::JsonField<int64_t>(j, "cols", at));
  ASSIGN_OR_RETURN(l.ld, program::JsonField<int64_t>(j, "ld", at));
  ASSIGN_OR_RETURN(l.batch_count, program::JsonFieldOr<int64_t>(j, "batch_count", at, 1));
  ASSIGN_OR_RETURN(l.batch_stride, program::JsonFieldOr<int64_t>(j, "batch_stride", at, 0));
  if (l.rows < 1 || l.cols < 1 || l.ld < l.rows || l.batch_count < 1 || l.batch_stride < 0) {
    return Error("{}: bad layout rows={} cols={} ld={} batch_count={} batch_stride={}", at, l.rows,
                 l.cols, l.ld, l.batch_count, l.batch_stride);
  }
  return l;
}

// Bytes a column-major layout spans (its last element + 1).
int64_t LayoutBytes(const GemmLayout& l) {
  const int64_t elem = l.dtype == CUDA_R_32F ? 4 : 2;
  return elem * ((l.batch_count - 1) * l.batch_stride + (l.cols - 1) * l.ld + l.rows);
}

// One reader per thunk kind; `where` and `name` name the thunk in errors.
StatusOr<KernelThunk> ReadKernelThunk(const json& t, const std::string& where,
                                      const std::string& name, int64_t arena_size) {
  KernelThunk k;
  ASSIGN_OR_RETURN(k.fusion, program::JsonField<std::string>(t, "fusion", where));
  ASSIGN_OR_RETURN(k.fusion_kind, program::JsonFieldOr<std::string>(t, "fusion_kind", where, ""));
  ASSIGN_OR_RETURN(k.grid, ReadDim3(t, "grid", where));
  ASSIGN_OR_RETURN(k.block, ReadDim3(t, "block", where));
  ASSIGN_OR_RETURN(k.dynamic_smem, program::JsonFieldOr<int64_t>(t, "dynamic_smem", where, 0));
  ASSIGN_OR_RETURN(k.operands, program::JsonFieldOr<int64_t>(t, "operands", where, -1));
  ASSIGN_OR_RETURN(k.fallback, program::JsonFieldOr<bool>(t, "fallback", where, false));
  if (k.block[0] * k.block[1] * k.block[2] > 1024 || k.dynamic_smem < 0) {
    return Error("{} ({}): block {}x{}x{} / dynamic smem {} out of range", where, name, k.block[0],
                 k.block[1], k.block[2], k.dynamic_smem);
  }
  if (!t.contains("args") || !t["args"].is_array()) return Error("{} has no 'args'", where);
  for (size_t i = 0; i < t["args"].size(); ++i) {
    ASSIGN_OR_RETURN(
        ArenaSlice s,
        ReadSliceValue(t["args"][i], fmt::format("{}.args[{}]", where, i), arena_size));
    k.args.push_back(s);
  }
  if (k.operands > static_cast<int64_t>(k.args.size())) {
    return Error("{} ({}): {} operands of {} args", where, name, k.operands, k.args.size());
  }
  return k;
}

StatusOr<GemmThunk> ReadGemmThunk(const json& t, const std::string& where, const std::string& name,
                                  int64_t arena_size) {
  auto slice = [&](std::string_view key) { return ReadSlice(t, key, where, arena_size); };
  GemmThunk g;
  if (!t.contains("descriptor")) return Error("{} has no 'descriptor'", where);
  StatusOr<GemmConfig> config = ParseGemmConfig(t["descriptor"]);
  if (!config.ok()) return config.status().WithPrefix(where + " (" + name + ")");
  g.config = std::move(config).value();
  ASSIGN_OR_RETURN(g.a, slice("a"));
  ASSIGN_OR_RETURN(g.b, slice("b"));
  ASSIGN_OR_RETURN(g.c, slice("c"));
  ASSIGN_OR_RETURN(g.d, slice("d"));
  if (t.contains("bias")) {
    ASSIGN_OR_RETURN(g.bias, slice("bias"));
  }
  if (t.contains("fallback_d")) {
    ASSIGN_OR_RETURN(g.fallback_d, slice("fallback_d"));
  }
  if (t.contains("aux")) {
    ASSIGN_OR_RETURN(g.aux, slice("aux"));
  }
  const GemmConfig& c = g.config;
  if ((c.reads_bias || c.writes_bias) != g.bias.has_value()) {
    return Error("{} ({}): epilogue {} {} a bias slice", where, name, c.epilogue_name,
                 g.bias ? "does not take" : "needs");
  }
  if ((c.writes_aux || c.reads_aux) != g.aux.has_value()) {
    return Error("{} ({}): epilogue {} {} an aux slice", where, name, c.epilogue_name,
                 g.aux ? "does not take" : "needs");
  }
  for (auto [matrix, s, layout] : {std::tuple{"a", &g.a, &c.a}, std::tuple{"b", &g.b, &c.b},
                                   std::tuple{"c", &g.c, &c.c}, std::tuple{"d", &g.d, &c.d}}) {
    if (LayoutBytes(*layout) > s->size) {
      return Error("{} ({}): matrix {} spans {} bytes, its slice has {}", where, name, matrix,
                   LayoutBytes(*layout), s->size);
    }
  }
  return g;
}

StatusOr<CopyThunk> ReadCopyThunk(const json& t, const std::string& where, const std::string& name,
                                  int64_t arena_size) {
  auto slice = [&](std::string_view key) { return ReadSlice(t, key, where, arena_size); };
  CopyThunk c;
  ASSIGN_OR_RETURN(c.src, slice("src"));
  ASSIGN_OR_RETURN(c.dst, slice("dst"));
  ASSIGN_OR_RETURN(c.bytes, program::JsonField<int64_t>(t, "bytes", where));
  ASSIGN_OR_RETURN(c.reason, program::JsonFieldOr<std::string>(t, "reason", where, ""));
  if (c.bytes < 0 || c.bytes > c.src.size || c.bytes > c.dst.size) {
    return Error("{} ({}): copies {} bytes between slices of {} and {}", where, name, c.bytes,
                 c.src.size, c.dst.size);
  }
  return c;
}

StatusOr<ConstantThunk> ReadConstantThunk(const json& t, const std::string& where,
                                          const std::string& name, int64_t arena_size) {
  auto slice = [&](std::string_view key) { return ReadSlice(t, key, where, arena_size); };
  ConstantThunk c;
  ASSIGN_OR_RETURN(std::string dtype, program::JsonField<std::string>(t, "dtype", where));
  std::optional<ir::DType> d = ir::ParseDType(dtype);
  if (!d) return Error("{} ({}): unknown dtype '{}'", where, name, dtype);
  c.dtype = *d;
  ASSIGN_OR_RETURN(c.dst, slice("dst"));
  if (!t.contains("values") || !t["values"].is_array()) {
    return Error("{} ({}) has no 'values' array", where, name);
  }
  std::vector<double> values;
  for (const json& v : t["values"]) {
    if (!v.is_number()) return Error("{} ({}): value {} is not a number", where, name, v.dump());
    values.push_back(v.get<double>());
  }
  const int64_t count = c.dst.size / ir::DTypeBytes(c.dtype);
  if (values.size() == 1 && count > 1) values.assign(count, values[0]);  // a splat
  if (static_cast<int64_t>(values.size()) != count) {
    return Error("{} ({}): {} values for a slice of {} {} elements", where, name, values.size(),
                 count, dtype);
  }
  c.bytes = EncodeValues(c.dtype, values);
  return c;
}

StatusOr<AllReduceThunk> ReadAllReduceThunk(const json& t, const std::string& where,
                                            const std::string& name, int64_t arena_size) {
  auto slice = [&](std::string_view key) { return ReadSlice(t, key, where, arena_size); };
  AllReduceThunk a;
  ASSIGN_OR_RETURN(a.reduce, program::JsonField<std::string>(t, "reduce", where));
  ASSIGN_OR_RETURN(std::string dtype, program::JsonField<std::string>(t, "dtype", where));
  std::optional<ir::DType> d = ir::ParseDType(dtype);
  if (!d) return Error("{} ({}): unknown dtype '{}'", where, name, dtype);
  a.dtype = *d;
  ASSIGN_OR_RETURN(a.count, program::JsonField<int64_t>(t, "count", where));
  ASSIGN_OR_RETURN(a.in, slice("in"));
  ASSIGN_OR_RETURN(a.out, slice("out"));
  ASSIGN_OR_RETURN(a.bucket, program::JsonFieldOr<int64_t>(t, "bucket", where, -1));
  if (a.reduce != "sum" && a.reduce != "max") {
    return Error("{} ({}): unknown reduction '{}'", where, name, a.reduce);
  }
  const int64_t bytes = a.count * ir::DTypeBytes(a.dtype);
  if (a.count < 0 || bytes > a.in.size || bytes > a.out.size) {
    return Error("{} ({}): {} {} elements do not fit its slices", where, name, a.count, dtype);
  }
  return a;
}

StatusOr<Thunk> ReadThunk(const json& t, int64_t index, int64_t arena_size,
                          std::string_view entry) {
  Thunk thunk;
  thunk.index = index;
  const std::string where = fmt::format("plan entry {} thunk {}", entry, index);
  ASSIGN_OR_RETURN(std::string kind, program::JsonField<std::string>(t, "kind", where));
  ASSIGN_OR_RETURN(thunk.name, program::JsonField<std::string>(t, "name", where));
  ASSIGN_OR_RETURN(thunk.meta, program::JsonFieldOr<std::string>(t, "meta", where, ""));
  const std::string& name = thunk.name;
  if (kind == "kernel") {
    thunk.kind = ThunkKind::kKernel;
    ASSIGN_OR_RETURN(thunk.body, ReadKernelThunk(t, where, name, arena_size));
  } else if (kind == "gemm") {
    thunk.kind = ThunkKind::kGemm;
    ASSIGN_OR_RETURN(thunk.body, ReadGemmThunk(t, where, name, arena_size));
  } else if (kind == "copy") {
    thunk.kind = ThunkKind::kCopy;
    ASSIGN_OR_RETURN(thunk.body, ReadCopyThunk(t, where, name, arena_size));
  } else if (kind == "constant") {
    thunk.kind = ThunkKind::kConstant;
    ASSIGN_OR_RETURN(thunk.body, ReadConstantThunk(t, where, name, arena_size));
  } else if (kind == "all_reduce") {
    thunk.kind = ThunkKind::kAllReduce;
    ASSIGN_OR_RETURN(thunk.body, ReadAllReduceThunk(t, where, name, arena_size));
  } else if (kind == "unsupported") {
    thunk.kind = ThunkKind::kUnsupported;
    UnsupportedThunk u;
    ASSIGN_OR_RETURN(u.what, program::JsonFieldOr<std::string>(t, "what", where, ""));
    ASSIGN_OR_RETURN(u.reason, program::JsonFieldOr<std::string>(t, "reason", where, ""));
    thunk.body = std::move(u);
  } else {
    return Error("{} ({}): unknown thunk kind '{}'", where, thunk.name, kind);
  }
  return thunk;
}

StatusOr<PlanSlot> ReadSlot(const json& j, std::string_view where, int64_t arena_size) {
  PlanSlot s;
  ASSIGN_OR_RETURN(s.role, program::JsonField<std::string>(j, "role", where));
  ASSIGN_OR_RETURN(s.index, program::JsonField<int64_t>(j, "index", where));
  ASSIGN_OR_RETURN(s.name, program::JsonField<std::string>(j, "name", where));
  ASSIGN_OR_RETURN(std::string shape, program::JsonField<std::string>(j, "shape", where));
  StatusOr<ir::Shape> parsed = ir::ParseShape(shape);
  if (!parsed.ok()) return parsed.status().WithPrefix(fmt::format("{}.shape", where));
  s.shape = *parsed;
  ASSIGN_OR_RETURN(s.slice.offset, program::JsonField<int64_t>(j, "offset", where));
  ASSIGN_OR_RETURN(s.slice.size, program::JsonField<int64_t>(j, "size", where));
  ASSIGN_OR_RETURN(s.slice.buffer, program::JsonFieldOr<int64_t>(j, "buffer", where, -1));
  if (s.slice.offset < 0 ||
      s.slice.size < s.shape.num_elements() * ir::DTypeBytes(s.shape.dtype()) ||
      s.slice.offset + s.slice.size > arena_size) {
    return Error("{} (%{}): slice [{}, +{}) does not hold {} inside the arena of {} bytes", where,
                 s.name, s.slice.offset, s.slice.size, shape, arena_size);
  }
  return s;
}

// Every slice that names a buffer names one of the table, at its place.
Status CheckBufferIds(const EntryPlan& p, std::string_view where) {
  auto check = [&](const ArenaSlice& s, const std::string& what) -> Status {
    if (s.buffer < 0) return Status::Ok();
    const PlanBuffer* b = p.FindBuffer(s.buffer);
    if (b == nullptr)
      return Error("{}: {} names buffer {}, which is not in 'buffers'", where, what, s.buffer);
    if (!(b->slice == s)) {
      return Error("{}: {} is [{}, +{}), its buffer %{} is [{}, +{})", where, what, s.offset,
                   s.size, b->name, b->slice.offset, b->slice.size);
    }
    return Status::Ok();
  };
  for (const PlanSlot& slot : p.inputs) RETURN_IF_ERROR(check(slot.slice, "input %" + slot.name));
  for (const PlanSlot& slot : p.outputs) RETURN_IF_ERROR(check(slot.slice, "output %" + slot.name));
  for (const Thunk& t : p.thunks) {
    for (const ArenaSlice* s : ThunkSlices(t)) RETURN_IF_ERROR(check(*s, t.Describe()));
  }
  return Status::Ok();
}

}  // namespace

std::vector<const ArenaSlice*> ThunkSlices(const Thunk& t) {
  std::vector<const ArenaSlice*> out;
  if (const auto* k = std::get_if<KernelThunk>(&t.body)) {
    for (const ArenaSlice& a : k->args) out.push_back(&a);
  } else if (const auto* g = std::get_if<GemmThunk>(&t.body)) {
    for (const ArenaSlice* s : {&g->a, &g->b, &g->c, &g->d}) out.push_back(s);
    if (g->bias) out.push_back(&*g->bias);
    if (g->aux) out.push_back(&*g->aux);
    if (g->fallback_d) out.push_back(&*g->fallback_d);
  } else if (const auto* c = std::get_if<CopyThunk>(&t.body)) {
    out = {&c->src, &c->dst};
  } else if (const auto* k = std::get_if<ConstantThunk>(&t.body)) {
    out = {&k->dst};
  } else if (const auto* a = std::get_if<AllReduceThunk>(&t.body)) {
    out = {&a->in, &a->out};
  }
  return out;
}

std::string_view ThunkKindName(ThunkKind kind) {
  switch (kind) {
    case ThunkKind::kKernel:
      return "kernel";
    case ThunkKind::kGemm:
      return "gemm";
    case ThunkKind::kCopy:
      return "copy";
    case ThunkKind::kConstant:
      return "constant";
    case ThunkKind::kAllReduce:
      return "all_reduce";
    case ThunkKind::kUnsupported:
      return "unsupported";
  }
  return "?";
}

std::string GemmConfig::Summary() const {
  auto layout = [](const GemmLayout& l, int32_t op) {
    return fmt::format("{}{} {}x{} ld {}", NameOf(l.dtype, kDataTypes),
                       op < 0 ? "" : (op == CUBLAS_OP_T ? " T" : " N"), l.rows, l.cols, l.ld);
  };
  std::string s = fmt::format(
      "m={} n={} k={} batch={} | A {} | B {} | D {} | alpha {} beta {} | {}", m, n, k, batch_count,
      layout(a, transa), layout(b, transb), layout(d, -1), alpha, beta, epilogue_name);
  if (bias_dtype) s += fmt::format(" bias {}", NameOf(*bias_dtype, kDataTypes));
  return s;
}

StatusOr<GemmConfig> ParseGemmConfig(const json& d) {
  constexpr std::string_view where = "descriptor";
  GemmConfig c;
  ASSIGN_OR_RETURN(c.compute_type, Lookup(kComputeTypes, d, "compute_type", where));
  ASSIGN_OR_RETURN(c.scale_type, Lookup(kDataTypes, d, "scale_type", where));
  ASSIGN_OR_RETURN(c.transa, Lookup(kOps, d, "transa", where));
  ASSIGN_OR_RETURN(c.transb, Lookup(kOps, d, "transb", where));
  ASSIGN_OR_RETURN(c.m, program::JsonField<int64_t>(d, "m", where));
  ASSIGN_OR_RETURN(c.n, program::JsonField<int64_t>(d, "n", where));
  ASSIGN_OR_RETURN(c.k, program::JsonField<int64_t>(d, "k", where));
  ASSIGN_OR_RETURN(c.batch_count, program::JsonFieldOr<int64_t>(d, "batch_count", where, 1));
  ASSIGN_OR_RETURN(c.a, ReadLayout(d, "a", where));
  ASSIGN_OR_RETURN(c.b, ReadLayout(d, "b", where));
  ASSIGN_OR_RETURN(c.c, ReadLayout(d, "c", where));
  ASSIGN_OR_RETURN(c.d, ReadLayout(d, "d", where));
  ASSIGN_OR_RETURN(c.alpha, program::JsonField<double>(d, "alpha", where));
  ASSIGN_OR_RETURN(c.beta, program::JsonField<double>(d, "beta", where));
  ASSIGN_OR_RETURN(c.epilogue, Lookup(kEpilogues, d, "epilogue", where));
  c.epilogue_name = std::string(NameOf(c.epilogue, kEpilogues));
  if (d.contains("bias_dtype")) {
    ASSIGN_OR_RETURN(c.bias_dtype, Lookup(kDataTypes, d, "bias_dtype", where));
  }
  ASSIGN_OR_RETURN(c.aux_ld, program::JsonFieldOr<int64_t>(d, "aux_ld", where, 0));
  ASSIGN_OR_RETURN(c.workspace_bytes,
                   program::JsonFieldOr<int64_t>(d, "workspace_bytes", where, 0));
  const auto e = static_cast<cublasLtEpilogue_t>(c.epilogue);
  c.reads_bias = e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_BIAS ||
                 e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  c.writes_bias = e == CUBLASLT_EPILOGUE_BGRADA || e == CUBLASLT_EPILOGUE_BGRADB ||
                  e == CUBLASLT_EPILOGUE_DGELU_BGRAD;
  c.writes_aux = e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  c.reads_aux = e == CUBLASLT_EPILOGUE_DGELU || e == CUBLASLT_EPILOGUE_DGELU_BGRAD;
  if (c.m < 1 || c.n < 1 || c.k < 1 || c.batch_count < 1) {
    return Error("{}: bad problem m={} n={} k={} batch_count={}", where, c.m, c.n, c.k,
                 c.batch_count);
  }
  // The layouts must describe op(A)[m, k], op(B)[k, n], C and D [m, n].
  const bool ta = c.transa == CUBLAS_OP_T, tb = c.transb == CUBLAS_OP_T;
  auto check = [&](std::string_view name, const GemmLayout& l, int64_t rows,
                   int64_t cols) -> Status {
    if (l.rows != rows || l.cols != cols) {
      return Error("{}.{} is {}x{}, the problem needs {}x{}", where, name, l.rows, l.cols, rows,
                   cols);
    }
    if (l.batch_count != c.batch_count) {
      return Error("{}.{} has batch_count {}, the problem {}", where, name, l.batch_count,
                   c.batch_count);
    }
    return Status::Ok();
  };
  RETURN_IF_ERROR(check("a", c.a, ta ? c.k : c.m, ta ? c.m : c.k));
  RETURN_IF_ERROR(check("b", c.b, tb ? c.n : c.k, tb ? c.k : c.n));
  RETURN_IF_ERROR(check("c", c.c, c.m, c.n));
  RETURN_IF_ERROR(check("d", c.d, c.m, c.n));
  if ((c.writes_aux || c.reads_aux) && c.aux_ld < c.m) {
    return Error("{}: epilogue {} with aux_ld {} < m {}", where, c.epilogue_name, c.aux_ld, c.m);
  }
  return c;
}

std::string Thunk::Describe() const {
  std::string what = std::string(ThunkKindName(kind));
  if (kind == ThunkKind::kKernel) {
    const auto& k = std::get<KernelThunk>(body);
    return fmt::format("thunk {} (kernel {} for %{}{}{})", index, name, k.fusion,
                       k.fusion_kind.empty() ? "" : ", " + k.fusion_kind,
                       meta.empty() ? "" : ", " + meta);
  }
  return fmt::format("thunk {} ({} %{}{})", index, what, name, meta.empty() ? "" : ", " + meta);
}

const std::string& Thunk::instruction() const {
  if (kind == ThunkKind::kKernel) return std::get<KernelThunk>(body).fusion;
  return name;
}

const PlanBuffer* EntryPlan::FindBuffer(int64_t id) const {
  if (id < 0 || id >= static_cast<int64_t>(buffers.size()) || buffers[id].id != id) {
    return nullptr;
  }
  return &buffers[id];
}

const PlanSlot* EntryPlan::FindInput(std::string_view role, int64_t index) const {
  for (const PlanSlot& s : inputs) {
    if (s.role == role && s.index == index) return &s;
  }
  return nullptr;
}

const PlanSlot* EntryPlan::FindOutput(std::string_view role, int64_t index) const {
  for (const PlanSlot& s : outputs) {
    if (s.role == role && s.index == index) return &s;
  }
  return nullptr;
}

std::array<int64_t, 6> EntryPlan::CountByKind() const {
  std::array<int64_t, 6> n{};
  for (const Thunk& t : thunks) ++n[static_cast<int>(t.kind)];
  return n;
}

StatusOr<EntryPlan> ReadEntryPlan(const json& entry) {
  EntryPlan p;
  ASSIGN_OR_RETURN(p.name, program::JsonField<std::string>(entry, "name", "plan entry"));
  const std::string where = "plan entry " + p.name;
  ASSIGN_OR_RETURN(p.arena_size, program::JsonField<int64_t>(entry, "arena_size", where));
  if (p.arena_size < 0) return Error("{}: arena_size {} < 0", where, p.arena_size);
  for (auto [key, slots] : {std::pair{"inputs", &p.inputs}, std::pair{"outputs", &p.outputs}}) {
    if (!entry.contains(key) || !entry[key].is_array()) {
      return Error("{} has no '{}' array", where, key);
    }
    for (size_t i = 0; i < entry[key].size(); ++i) {
      ASSIGN_OR_RETURN(PlanSlot s, ReadSlot(entry[key][i], fmt::format("{} {}[{}]", where, key, i),
                                            p.arena_size));
      slots->push_back(std::move(s));
    }
  }
  if (entry.contains("donations")) {
    for (const json& d : entry["donations"]) {
      if (!d.is_array() || d.size() != 2 || !d[0].is_number_integer() ||
          !d[1].is_number_integer()) {
        return Error("{}: donation {} is not [output, input]", where, d.dump());
      }
      p.donations.emplace_back(d[0].get<int64_t>(), d[1].get<int64_t>());
    }
  }
  if (entry.contains("buffers")) {
    const json& buffers = entry["buffers"];
    if (!buffers.is_array()) return Error("{}: 'buffers' is not an array", where);
    for (size_t i = 0; i < buffers.size(); ++i) {
      const std::string bw = fmt::format("{} buffers[{}]", where, i);
      PlanBuffer b;
      ASSIGN_OR_RETURN(b.id, program::JsonField<int64_t>(buffers[i], "id", bw));
      ASSIGN_OR_RETURN(b.name, program::JsonField<std::string>(buffers[i], "name", bw));
      ASSIGN_OR_RETURN(b.slice, ReadSliceValue(buffers[i], bw, p.arena_size));
      if (b.id != static_cast<int64_t>(i)) return Error("{}: id {} out of order", bw, b.id);
      b.slice.buffer = b.id;
      p.buffers.push_back(std::move(b));
    }
  }
  if (!entry.contains("thunks") || !entry["thunks"].is_array()) {
    return Error("{} has no 'thunks' array", where);
  }
  const json& thunks = entry["thunks"];
  for (size_t i = 0; i < thunks.size(); ++i) {
    ASSIGN_OR_RETURN(Thunk t, ReadThunk(thunks[i], static_cast<int64_t>(i), p.arena_size, p.name));
    p.thunks.push_back(std::move(t));
  }
  // Note [epilogue fallback]: a fallback kernel stands next to its gemm.
  for (size_t i = 0; i < p.thunks.size(); ++i) {
    const auto* k = std::get_if<KernelThunk>(&p.thunks[i].body);
    if (k == nullptr || !k->fallback) continue;
    auto gemm_at = [&](size_t j) {
      return j < p.thunks.size() && p.thunks[j].kind == ThunkKind::kGemm &&
             p.thunks[j].instruction() == p.thunks[i].instruction();
    };
    if (!gemm_at(i + 1) && !(i > 0 && gemm_at(i - 1))) {
      return Error("{}: thunk {} ({}) is a gemm's fallback kernel, but no gemm of {} is next to it",
                   where, i, p.thunks[i].name, p.thunks[i].instruction());
    }
  }
  if (entry.contains("buckets")) {
    const int64_t n = static_cast<int64_t>(p.thunks.size());
    for (const json& b : entry["buckets"]) {
      const std::string bw = fmt::format("{} bucket {}", where, p.buckets.size());
      AllReduceBucket bucket;
      if (!b.is_object() || !b.contains("members") || !b["members"].is_array()) {
        return Error("{} has no 'members' array", bw);
      }
      for (const json& m : b["members"]) {
        if (!m.is_number_integer())
          return Error("{}: member {} is not a thunk index", bw, m.dump());
        bucket.members.push_back(m.get<int64_t>());
      }
      ASSIGN_OR_RETURN(bucket.issue_after, program::JsonField<int64_t>(b, "issue_after", bw));
      ASSIGN_OR_RETURN(bucket.wait_before, program::JsonField<int64_t>(b, "wait_before", bw));
      ASSIGN_OR_RETURN(bucket.bytes, program::JsonFieldOr<int64_t>(b, "bytes", bw, 0));
      if (bucket.members.empty() || bucket.issue_after != bucket.members.back() ||
          bucket.wait_before <= bucket.issue_after || bucket.wait_before > n) {
        return Error("{}: members {}, issue_after {}, wait_before {} are inconsistent ({} thunks)",
                     bw, b["members"].dump(), bucket.issue_after, bucket.wait_before, n);
      }
      for (size_t k = 0; k < bucket.members.size(); ++k) {
        const int64_t m = bucket.members[k];
        if (m < 0 || m >= n || p.thunks[m].kind != ThunkKind::kAllReduce ||
            std::get<AllReduceThunk>(p.thunks[m].body).bucket !=
                static_cast<int64_t>(p.buckets.size()) ||
            (k > 0 && m <= bucket.members[k - 1])) {
          return Error("{}: member {} is not an all_reduce thunk of this bucket", bw, m);
        }
      }
      p.buckets.push_back(std::move(bucket));
    }
  }
  RETURN_IF_ERROR(CheckBufferIds(p, where));
  for (const Thunk& t : p.thunks) {
    if (t.kind != ThunkKind::kAllReduce) continue;
    const int64_t b = std::get<AllReduceThunk>(t.body).bucket;
    if (b >= static_cast<int64_t>(p.buckets.size())) {
      return Error("{}: {} names bucket {}, the entry has {}", where, t.Describe(), b,
                   p.buckets.size());
    }
  }
  return p;
}

StatusOr<std::vector<EntryPlan>> ReadPlan(const json& plan) {
  if (!plan.is_object() || !plan.contains("entries") || !plan["entries"].is_array()) {
    return Error("section 'plan' has no 'entries' array");
  }
  std::vector<EntryPlan> out;
  for (const json& e : plan["entries"]) {
    ASSIGN_OR_RETURN(EntryPlan p, ReadEntryPlan(e));
    out.push_back(std::move(p));
  }
  return out;
}

StatusOr<std::vector<KernelImage>> ReadKernelIndex(const json& manifest, int64_t ptx_bytes,
                                                   int64_t cubin_bytes) {
  if (!manifest.contains("kernels") || !manifest["kernels"].is_array()) {
    return Error("manifest has no 'kernels' array");
  }
  std::vector<KernelImage> out;
  for (const json& k : manifest["kernels"]) {
    const std::string where = fmt::format("manifest kernels[{}]", out.size());
    KernelImage image;
    ASSIGN_OR_RETURN(image.entry, program::JsonField<std::string>(k, "entry", where));
    ASSIGN_OR_RETURN(image.name, program::JsonField<std::string>(k, "name", where));
    ASSIGN_OR_RETURN(image.ptx_offset, program::JsonField<int64_t>(k, "ptx_offset", where));
    ASSIGN_OR_RETURN(image.ptx_size, program::JsonField<int64_t>(k, "ptx_size", where));
    if (image.ptx_offset < 0 || image.ptx_size < 1 || image.ptx_offset > ptx_bytes ||
        image.ptx_size > ptx_bytes - image.ptx_offset) {
      return Error("{} ({}): PTX [{}, +{}) is outside the ptx section of {} bytes", where,
                   image.name, image.ptx_offset, image.ptx_size, ptx_bytes);
    }
    if (k.contains("cubin_offset")) {
      ASSIGN_OR_RETURN(int64_t offset, program::JsonField<int64_t>(k, "cubin_offset", where));
      ASSIGN_OR_RETURN(int64_t size, program::JsonField<int64_t>(k, "cubin_size", where));
      if (offset < 0 || size < 1 || offset > cubin_bytes || size > cubin_bytes - offset) {
        return Error("{} ({}): cubin [{}, +{}) is outside the cubin section of {} bytes", where,
                     image.name, offset, size, cubin_bytes);
      }
      image.cubin = std::pair{offset, size};
    }
    ASSIGN_OR_RETURN(image.registers, program::JsonFieldOr<int64_t>(k, "registers", where, 0));
    out.push_back(std::move(image));
  }
  return out;
}

}  // namespace gptc::rt::gpu
