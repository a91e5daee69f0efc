#include "compiler/program/plan.h"

#include <algorithm>
#include <span>

#include "compiler/ir/parser.h"
#include "compiler/program/json_field.h"

namespace gptc::program {

namespace {

using nlohmann::json;

template <typename E>
struct EnumName {
  E value;
  std::string_view name;
};

constexpr EnumName<GemmDType> kDTypes[] = {{GemmDType::kBF16, "CUDA_R_16BF"},
                                           {GemmDType::kF16, "CUDA_R_16F"},
                                           {GemmDType::kF32, "CUDA_R_32F"}};
constexpr EnumName<GemmCompute> kComputes[] = {
    {GemmCompute::k32F, "CUBLAS_COMPUTE_32F"},
    {GemmCompute::k32FFastTF32, "CUBLAS_COMPUTE_32F_FAST_TF32"}};
constexpr EnumName<GemmOp> kOps[] = {{GemmOp::kN, "CUBLAS_OP_N"}, {GemmOp::kT, "CUBLAS_OP_T"}};
constexpr EnumName<GemmEpilogue> kEpilogues[] = {
#define GPTC_GEMM_EPILOGUE_NAME(e, name, value, activation, bias, aux) \
  {GemmEpilogue::e, "CUBLASLT_EPILOGUE_" #name},
    GPTC_GEMM_EPILOGUES(GPTC_GEMM_EPILOGUE_NAME)
#undef GPTC_GEMM_EPILOGUE_NAME
};
constexpr GemmEpilogueInfo kEpilogueInfos[] = {
#define GPTC_GEMM_EPILOGUE_INFO(e, name, value, activation, bias, aux)                          \
  {GemmEpilogue::e,         "CUBLASLT_EPILOGUE_" #name, value, ir::GemmActivation::activation, \
   EpilogueBias::bias, EpilogueAux::aux},
    GPTC_GEMM_EPILOGUES(GPTC_GEMM_EPILOGUE_INFO)
#undef GPTC_GEMM_EPILOGUE_INFO
};
constexpr EnumName<ThunkKind> kThunkKindNames[] = {{ThunkKind::kKernel, "kernel"},
                                                   {ThunkKind::kGemm, "gemm"},
                                                   {ThunkKind::kCopy, "copy"},
                                                   {ThunkKind::kConstant, "constant"},
                                                   {ThunkKind::kAllReduce, "all_reduce"},
                                                   {ThunkKind::kUnsupported, "unsupported"}};

constexpr EnumName<CollectiveOp> kCollectiveOpNames[] = {
    {CollectiveOp::kAllReduce, "all_reduce"},
    {CollectiveOp::kReduceScatter, "reduce_scatter"},
    {CollectiveOp::kAllGather, "all_gather"}};

template <typename E, size_t N>
std::string_view NameOf(E value, const EnumName<E> (&table)[N]) {
  for (const auto& [v, name] : table) {
    if (v == value) return name;
  }
  return "?";
}

// j[key] as one of `table`'s names.
template <typename E, size_t N>
StatusOr<E> EnumField(const json& j, std::string_view key, std::string_view where,
                      const EnumName<E> (&table)[N]) {
  ASSIGN_OR_RETURN(std::string name, JsonField<std::string>(j, key, where));
  for (const auto& [v, n] : table) {
    if (n == name) return v;
  }
  return Error("{}.{}: '{}' is not a value this reader knows", where, key, name);
}

StatusOr<ir::DType> DTypeField(const json& j, std::string_view key, std::string_view where) {
  ASSIGN_OR_RETURN(std::string name, JsonField<std::string>(j, key, where));
  std::optional<ir::DType> d = ir::ParseDType(name);
  if (!d) return Error("{}.{}: unknown dtype '{}'", where, key, name);
  return *d;
}

StatusOr<std::optional<ArenaSlice>> OptionalSlice(const json& j, std::string_view key,
                                                  std::string_view where) {
  if (!j.contains(key)) return std::optional<ArenaSlice>();
  ASSIGN_OR_RETURN(ArenaSlice s, ObjectField(j, key, where, ArenaSliceFromJson));
  return std::optional<ArenaSlice>(s);
}

StatusOr<std::array<int64_t, 3>> Dim3Field(const json& j, std::string_view key,
                                           std::string_view where) {
  ASSIGN_OR_RETURN(std::vector<int64_t> v, JsonField<std::vector<int64_t>>(j, key, where));
  if (v.size() != 3) return Error("{}.{} is not an array of 3 integers", where, key);
  return std::array<int64_t, 3>{v[0], v[1], v[2]};
}

// --- one writer and one reader per thunk kind ------------------------------------

void BodyToJson(const KernelThunk& k, json& j) {
  json args = json::array();
  for (const ArenaSlice& a : k.args) args.push_back(ToJson(a));
  j["fusion"] = k.fusion;
  j["fusion_kind"] = k.fusion_kind;
  j["grid"] = k.grid;
  j["block"] = k.block;
  j["dynamic_smem"] = k.dynamic_smem;
  j["args"] = std::move(args);
  j["operands"] = k.operands;
  if (k.fallback) j["fallback"] = true;
  if (k.updates_operand) j["updates_operand"] = true;
}

void BodyToJson(const GemmThunk& g, json& j) {
  j["descriptor"] = ToJson(g.config);
  for (auto [key, s] :
       {std::pair{"a", &g.a}, std::pair{"b", &g.b}, std::pair{"c", &g.c}, std::pair{"d", &g.d}}) {
    j[key] = ToJson(*s);
  }
  for (auto [key, s] : {std::pair{"bias", &g.bias}, std::pair{"aux", &g.aux},
                        std::pair{"fallback_d", &g.fallback_d}}) {
    if (*s) j[key] = ToJson(**s);
  }
  if (g.fallback_kernel) j["fallback_kernel"] = *g.fallback_kernel;
}

void BodyToJson(const CopyThunk& c, json& j) {
  j["src"] = ToJson(c.src);
  j["dst"] = ToJson(c.dst);
  j["bytes"] = c.bytes;
  if (!c.reason.empty()) j["reason"] = c.reason;
}

void BodyToJson(const ConstantThunk& c, json& j) {
  j["dtype"] = ir::DTypeName(c.dtype);
  j["values"] = c.values;
  j["dst"] = ToJson(c.dst);
}

void BodyToJson(const AllReduceThunk& a, json& j) {
  j["reduce"] = ir::ReduceKindName(a.reduce);
  j["dtype"] = ir::DTypeName(a.dtype);
  j["count"] = a.count;
  j["in"] = ToJson(a.in);
  j["out"] = ToJson(a.out);
  if (a.bucket >= 0) j["bucket"] = a.bucket;
  if (a.collective != CollectiveOp::kAllReduce) j["collective"] = CollectiveOpName(a.collective);
}

void BodyToJson(const UnsupportedThunk& u, json& j) {
  j["what"] = u.what;
  j["reason"] = u.reason;
}

StatusOr<KernelThunk> KernelFromJson(const json& j, std::string_view where) {
  KernelThunk k;
  ASSIGN_OR_RETURN(k.fusion, JsonField<std::string>(j, "fusion", where));
  ASSIGN_OR_RETURN(k.fusion_kind, JsonField<std::string>(j, "fusion_kind", where));
  ASSIGN_OR_RETURN(k.grid, Dim3Field(j, "grid", where));
  ASSIGN_OR_RETURN(k.block, Dim3Field(j, "block", where));
  ASSIGN_OR_RETURN(k.dynamic_smem, JsonField<int64_t>(j, "dynamic_smem", where));
  ASSIGN_OR_RETURN(k.operands, JsonField<int64_t>(j, "operands", where));
  ASSIGN_OR_RETURN(k.fallback, JsonFieldOr<bool>(j, "fallback", where, false));
  ASSIGN_OR_RETURN(k.updates_operand, JsonFieldOr<bool>(j, "updates_operand", where, false));
  if (!j.contains("args") || !j["args"].is_array()) return Error("{} has no 'args' array", where);
  for (size_t i = 0; i < j["args"].size(); ++i) {
    ASSIGN_OR_RETURN(ArenaSlice s,
                     ArenaSliceFromJson(j["args"][i], fmt::format("{}.args[{}]", where, i)));
    k.args.push_back(s);
  }
  return k;
}

StatusOr<GemmThunk> GemmFromJson(const json& j, std::string_view where) {
  GemmThunk g;
  ASSIGN_OR_RETURN(g.config, ObjectField(j, "descriptor", where, GemmConfigFromJson));
  for (auto [key, s] :
       {std::pair{"a", &g.a}, std::pair{"b", &g.b}, std::pair{"c", &g.c}, std::pair{"d", &g.d}}) {
    ASSIGN_OR_RETURN(*s, ObjectField(j, key, where, ArenaSliceFromJson));
  }
  ASSIGN_OR_RETURN(g.bias, OptionalSlice(j, "bias", where));
  ASSIGN_OR_RETURN(g.aux, OptionalSlice(j, "aux", where));
  ASSIGN_OR_RETURN(g.fallback_d, OptionalSlice(j, "fallback_d", where));
  if (j.contains("fallback_kernel")) {
    ASSIGN_OR_RETURN(g.fallback_kernel, JsonField<int64_t>(j, "fallback_kernel", where));
  }
  return g;
}

StatusOr<CopyThunk> CopyFromJson(const json& j, std::string_view where) {
  CopyThunk c;
  ASSIGN_OR_RETURN(c.src, ObjectField(j, "src", where, ArenaSliceFromJson));
  ASSIGN_OR_RETURN(c.dst, ObjectField(j, "dst", where, ArenaSliceFromJson));
  ASSIGN_OR_RETURN(c.bytes, JsonField<int64_t>(j, "bytes", where));
  ASSIGN_OR_RETURN(c.reason, JsonFieldOr<std::string>(j, "reason", where, ""));
  return c;
}

StatusOr<ConstantThunk> ConstantFromJson(const json& j, std::string_view where) {
  ConstantThunk c;
  ASSIGN_OR_RETURN(c.dtype, DTypeField(j, "dtype", where));
  ASSIGN_OR_RETURN(c.dst, ObjectField(j, "dst", where, ArenaSliceFromJson));
  if (!j.contains("values") || !j["values"].is_array()) {
    return Error("{} has no 'values' array", where);
  }
  for (const json& v : j["values"]) {
    if (!v.is_number()) return Error("{}.values: {} is not a number", where, v.dump());
    c.values.push_back(v.get<double>());
  }
  return c;
}

StatusOr<AllReduceThunk> AllReduceFromJson(const json& j, std::string_view where) {
  AllReduceThunk a;
  ASSIGN_OR_RETURN(std::string reduce, JsonField<std::string>(j, "reduce", where));
  std::optional<ir::ReduceKind> kind = ir::ParseReduceKind(reduce);
  if (!kind) return Error("{}.reduce: unknown reduction '{}'", where, reduce);
  a.reduce = *kind;
  ASSIGN_OR_RETURN(a.dtype, DTypeField(j, "dtype", where));
  ASSIGN_OR_RETURN(a.count, JsonField<int64_t>(j, "count", where));
  ASSIGN_OR_RETURN(a.in, ObjectField(j, "in", where, ArenaSliceFromJson));
  ASSIGN_OR_RETURN(a.out, ObjectField(j, "out", where, ArenaSliceFromJson));
  ASSIGN_OR_RETURN(a.bucket, JsonFieldOr<int64_t>(j, "bucket", where, -1));
  if (j.contains("collective")) {
    ASSIGN_OR_RETURN(a.collective, EnumField(j, "collective", where, kCollectiveOpNames));
  }
  return a;
}

StatusOr<UnsupportedThunk> UnsupportedFromJson(const json& j, std::string_view where) {
  UnsupportedThunk u;
  ASSIGN_OR_RETURN(u.what, JsonField<std::string>(j, "what", where));
  ASSIGN_OR_RETURN(u.reason, JsonField<std::string>(j, "reason", where));
  return u;
}

}  // namespace

GemmThunk PlainGemm(const GemmThunk& g) {
  GemmThunk plain = g;
  plain.config.epilogue = GemmEpilogue::kDefault;
  plain.config.bias_dtype.reset();
  plain.config.aux_ld = 0;
  plain.bias.reset();
  plain.aux.reset();
  if (!WritesBias(g.config.epilogue) && g.fallback_d) {
    for (GemmLayout* l : {&plain.config.c, &plain.config.d}) {
      l->dtype = GemmDType::kF32;
      l->ld = l->rows;
      l->batch_stride = l->rows * l->cols;
    }
    plain.config.beta = 0;
    plain.c = plain.d = *g.fallback_d;
  }
  return plain;
}

// --- enums ------------------------------------------------------------------------

std::string_view GemmDTypeName(GemmDType t) { return NameOf(t, kDTypes); }
std::string_view GemmComputeName(GemmCompute c) { return NameOf(c, kComputes); }
std::string_view GemmOpName(GemmOp op) { return NameOf(op, kOps); }
std::string_view GemmEpilogueName(GemmEpilogue e) { return NameOf(e, kEpilogues); }
std::string_view ThunkKindName(ThunkKind kind) { return NameOf(kind, kThunkKindNames); }
std::string_view CollectiveOpName(CollectiveOp op) { return NameOf(op, kCollectiveOpNames); }

int64_t GemmDTypeBytes(GemmDType t) { return t == GemmDType::kF32 ? 4 : 2; }

std::optional<GemmDType> GemmDTypeOf(ir::DType dtype) {
  switch (dtype) {
    case ir::DType::kBF16:
      return GemmDType::kBF16;
    case ir::DType::kF16:
      return GemmDType::kF16;
    case ir::DType::kF32:
      return GemmDType::kF32;
    default:
      return std::nullopt;
  }
}

const GemmEpilogueInfo& GemmEpilogueInfoOf(GemmEpilogue e) {
  return kEpilogueInfos[static_cast<size_t>(e)];
}

std::optional<GemmEpilogue> FindGemmEpilogue(ir::GemmActivation activation, EpilogueBias bias,
                                             EpilogueAux aux) {
  for (const GemmEpilogueInfo& info : kEpilogueInfos) {
    if (info.activation == activation && info.bias == bias && info.aux == aux) {
      return info.epilogue;
    }
  }
  return std::nullopt;
}

bool ReadsBias(GemmEpilogue e) { return GemmEpilogueInfoOf(e).bias == EpilogueBias::kRead; }
bool WritesBias(GemmEpilogue e) {
  const EpilogueBias b = GemmEpilogueInfoOf(e).bias;
  return b != EpilogueBias::kNone && b != EpilogueBias::kRead;
}
bool WritesAux(GemmEpilogue e) { return GemmEpilogueInfoOf(e).aux == EpilogueAux::kWrite; }
bool ReadsAux(GemmEpilogue e) { return GemmEpilogueInfoOf(e).aux == EpilogueAux::kRead; }

std::string GemmConfig::Summary() const {
  auto layout = [](const GemmLayout& l, std::optional<GemmOp> op) {
    return fmt::format("{}{} {}x{} ld {}", GemmDTypeName(l.dtype),
                       !op ? "" : (*op == GemmOp::kT ? " T" : " N"), l.rows, l.cols, l.ld);
  };
  std::string s =
      fmt::format("m={} n={} k={} batch={} | A {} | B {} | D {} | alpha {} beta {} | {}", m, n, k,
                  batch_count, layout(a, transa), layout(b, transb), layout(d, std::nullopt), alpha,
                  beta, GemmEpilogueName(epilogue));
  if (bias_dtype) s += fmt::format(" bias {}", GemmDTypeName(*bias_dtype));
  return s;
}

// --- thunks and entries ---------------------------------------------------------------

std::string Thunk::Describe() const {
  if (const auto* k = std::get_if<KernelThunk>(&body)) {
    return fmt::format("thunk {} (kernel {} for %{}{}{})", index, name, k->fusion,
                       k->fusion_kind.empty() ? "" : ", " + k->fusion_kind,
                       meta.empty() ? "" : ", " + meta);
  }
  const auto* c = std::get_if<AllReduceThunk>(&body);
  return fmt::format("thunk {} ({} %{}{})", index,
                     c != nullptr ? CollectiveOpName(c->collective) : ThunkKindName(kind()), name,
                     meta.empty() ? "" : ", " + meta);
}

const std::string& Thunk::instruction() const {
  if (const auto* k = std::get_if<KernelThunk>(&body)) return k->fusion;
  return name;
}

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

EntrySignature EntryPlan::Signature() const {
  EntrySignature sig;
  for (const PlanSlot& s : inputs) sig.inputs.push_back(s);
  for (const PlanSlot& s : outputs) sig.outputs.push_back(s);
  sig.donations = donations;
  return sig;
}

const PlanBuffer* EntryPlan::FindBuffer(int64_t id) const {
  if (id < 0 || id >= static_cast<int64_t>(buffers.size()) || buffers[id].id != id) {
    return nullptr;
  }
  return &buffers[id];
}

namespace {

const PlanSlot* FindSlot(const std::vector<PlanSlot>& slots, SlotRole role, int64_t index) {
  for (const PlanSlot& s : slots) {
    if (s.role == role && s.index == index) return &s;
  }
  return nullptr;
}

}  // namespace

const PlanSlot* EntryPlan::FindInput(SlotRole role, int64_t index) const {
  return FindSlot(inputs, role, index);
}

const PlanSlot* EntryPlan::FindOutput(SlotRole role, int64_t index) const {
  return FindSlot(outputs, role, index);
}

std::array<int64_t, kThunkKinds> EntryPlan::CountByKind() const {
  std::array<int64_t, kThunkKinds> n{};
  for (const Thunk& t : thunks) ++n[static_cast<int>(t.kind())];
  return n;
}

// --- the codec ----------------------------------------------------------------------

json ToJson(const ArenaSlice& s) {
  return json{{"offset", s.offset}, {"size", s.size}, {"buffer", s.buffer}};
}

StatusOr<ArenaSlice> ArenaSliceFromJson(const json& j, std::string_view where) {
  ArenaSlice s;
  ASSIGN_OR_RETURN(s.offset, JsonField<int64_t>(j, "offset", where));
  ASSIGN_OR_RETURN(s.size, JsonField<int64_t>(j, "size", where));
  ASSIGN_OR_RETURN(s.buffer, JsonFieldOr<int64_t>(j, "buffer", where, -1));
  return s;
}

json ToJson(const GemmLayout& l) {
  return json{{"dtype", GemmDTypeName(l.dtype)},
              {"rows", l.rows},
              {"cols", l.cols},
              {"ld", l.ld},
              {"batch_count", l.batch_count},
              {"batch_stride", l.batch_stride}};
}

StatusOr<GemmLayout> GemmLayoutFromJson(const json& j, std::string_view where) {
  GemmLayout l;
  ASSIGN_OR_RETURN(l.dtype, EnumField(j, "dtype", where, kDTypes));
  ASSIGN_OR_RETURN(l.rows, JsonField<int64_t>(j, "rows", where));
  ASSIGN_OR_RETURN(l.cols, JsonField<int64_t>(j, "cols", where));
  ASSIGN_OR_RETURN(l.ld, JsonField<int64_t>(j, "ld", where));
  ASSIGN_OR_RETURN(l.batch_count, JsonFieldOr<int64_t>(j, "batch_count", where, 1));
  ASSIGN_OR_RETURN(l.batch_stride, JsonFieldOr<int64_t>(j, "batch_stride", where, 0));
  return l;
}

json ToJson(const GemmConfig& c) {
  json j{{"compute_type", GemmComputeName(c.compute_type)},
         {"scale_type", GemmDTypeName(c.scale_type)},
         {"transa", GemmOpName(c.transa)},
         {"transb", GemmOpName(c.transb)},
         {"m", c.m},
         {"n", c.n},
         {"k", c.k},
         {"batch_count", c.batch_count},
         {"a", ToJson(c.a)},
         {"b", ToJson(c.b)},
         {"c", ToJson(c.c)},
         {"d", ToJson(c.d)},
         {"alpha", c.alpha},
         {"beta", c.beta},
         {"epilogue", GemmEpilogueName(c.epilogue)},
         {"workspace_bytes", c.workspace_bytes}};
  if (c.bias_dtype) j["bias_dtype"] = GemmDTypeName(*c.bias_dtype);
  if (c.aux_ld != 0) j["aux_ld"] = c.aux_ld;
  if (!c.notes.empty()) j["notes"] = c.notes;
  return j;
}

StatusOr<GemmConfig> GemmConfigFromJson(const json& j, std::string_view where) {
  GemmConfig c;
  ASSIGN_OR_RETURN(c.compute_type, EnumField(j, "compute_type", where, kComputes));
  ASSIGN_OR_RETURN(c.scale_type, EnumField(j, "scale_type", where, kDTypes));
  ASSIGN_OR_RETURN(c.transa, EnumField(j, "transa", where, kOps));
  ASSIGN_OR_RETURN(c.transb, EnumField(j, "transb", where, kOps));
  for (auto [key, field] : {std::pair{"m", &c.m}, std::pair{"n", &c.n}, std::pair{"k", &c.k},
                            std::pair{"batch_count", &c.batch_count},
                            std::pair{"workspace_bytes", &c.workspace_bytes}}) {
    ASSIGN_OR_RETURN(*field, JsonField<int64_t>(j, key, where));
  }
  for (auto [key, layout] :
       {std::pair{"a", &c.a}, std::pair{"b", &c.b}, std::pair{"c", &c.c}, std::pair{"d", &c.d}}) {
    ASSIGN_OR_RETURN(*layout, ObjectField(j, key, where, GemmLayoutFromJson));
  }
  ASSIGN_OR_RETURN(c.alpha, JsonField<double>(j, "alpha", where));
  ASSIGN_OR_RETURN(c.beta, JsonField<double>(j, "beta", where));
  ASSIGN_OR_RETURN(c.epilogue, EnumField(j, "epilogue", where, kEpilogues));
  if (j.contains("bias_dtype")) {
    ASSIGN_OR_RETURN(c.bias_dtype, EnumField(j, "bias_dtype", where, kDTypes));
  }
  ASSIGN_OR_RETURN(c.aux_ld, JsonFieldOr<int64_t>(j, "aux_ld", where, 0));
  if (j.contains("notes")) {
    const json& notes = j["notes"];
    if (!notes.is_array()) return Error("{}.notes is not an array", where);
    for (const json& n : notes) {
      if (!n.is_string()) return Error("{}.notes: {} is not a string", where, n.dump());
      c.notes.push_back(n.get<std::string>());
    }
  }
  return c;
}

json ToJson(const Thunk& t) {
  json j{{"kind", ThunkKindName(t.kind())}, {"name", t.name}, {"meta", t.meta}};
  std::visit([&](const auto& body) { BodyToJson(body, j); }, t.body);
  if (t.cost.has_value()) {
    j["cost"] = json{{"flops", t.cost->flops},
                     {"bytes_read", t.cost->bytes_read},
                     {"bytes_written", t.cost->bytes_written}};
  }
  if (t.role.has_value()) j["role"] = ToJson(*t.role);
  return j;
}

namespace {

StatusOr<std::optional<ThunkCost>> ThunkCostFromJson(const json& j, std::string_view where) {
  if (!j.contains("cost")) return std::optional<ThunkCost>();
  const std::string cost_where = fmt::format("{}.cost", where);
  ThunkCost c;
  ASSIGN_OR_RETURN(c.flops, JsonField<double>(j["cost"], "flops", cost_where));
  ASSIGN_OR_RETURN(c.bytes_read, JsonField<int64_t>(j["cost"], "bytes_read", cost_where));
  ASSIGN_OR_RETURN(c.bytes_written, JsonField<int64_t>(j["cost"], "bytes_written", cost_where));
  return std::optional<ThunkCost>(c);
}

}  // namespace

StatusOr<Thunk> ThunkFromJson(const json& j, std::string_view where) {
  Thunk t;
  ASSIGN_OR_RETURN(ThunkKind kind, EnumField(j, "kind", where, kThunkKindNames));
  ASSIGN_OR_RETURN(t.name, JsonField<std::string>(j, "name", where));
  ASSIGN_OR_RETURN(t.meta, JsonFieldOr<std::string>(j, "meta", where, ""));
  switch (kind) {
    case ThunkKind::kKernel: {
      ASSIGN_OR_RETURN(t.body, KernelFromJson(j, where));
      break;
    }
    case ThunkKind::kGemm: {
      ASSIGN_OR_RETURN(t.body, GemmFromJson(j, where));
      break;
    }
    case ThunkKind::kCopy: {
      ASSIGN_OR_RETURN(t.body, CopyFromJson(j, where));
      break;
    }
    case ThunkKind::kConstant: {
      ASSIGN_OR_RETURN(t.body, ConstantFromJson(j, where));
      break;
    }
    case ThunkKind::kAllReduce: {
      ASSIGN_OR_RETURN(t.body, AllReduceFromJson(j, where));
      break;
    }
    case ThunkKind::kUnsupported: {
      ASSIGN_OR_RETURN(t.body, UnsupportedFromJson(j, where));
      break;
    }
  }
  ASSIGN_OR_RETURN(t.cost, ThunkCostFromJson(j, where));
  if (j.contains("role")) {
    ASSIGN_OR_RETURN(t.role, ObjectField(j, "role", where, ThunkRoleFromJson));
  }
  return t;
}

json ToJson(const AllReduceBucket& b) {
  return json{{"id", b.id},
              {"members", b.members},
              {"issue_after", b.issue_after},
              {"wait_before", b.wait_before},
              {"bytes", b.bytes}};
}

StatusOr<AllReduceBucket> AllReduceBucketFromJson(const json& j, std::string_view where) {
  AllReduceBucket b;
  ASSIGN_OR_RETURN(b.id, JsonField<int64_t>(j, "id", where));
  ASSIGN_OR_RETURN(b.members, JsonField<std::vector<int64_t>>(j, "members", where));
  ASSIGN_OR_RETURN(b.issue_after, JsonField<int64_t>(j, "issue_after", where));
  ASSIGN_OR_RETURN(b.wait_before, JsonField<int64_t>(j, "wait_before", where));
  ASSIGN_OR_RETURN(b.bytes, JsonField<int64_t>(j, "bytes", where));
  return b;
}

json ToJson(const PlanBuffer& b) {
  json j{{"id", b.id}, {"name", b.name}, {"offset", b.slice.offset}, {"size", b.slice.size}};
  if (!b.shape.empty()) j["shape"] = b.shape;
  if (b.category) j["category"] = BufferCategoryName(*b.category);
  return j;
}

StatusOr<PlanBuffer> PlanBufferFromJson(const json& j, std::string_view where) {
  PlanBuffer b;
  ASSIGN_OR_RETURN(b.id, JsonField<int64_t>(j, "id", where));
  ASSIGN_OR_RETURN(b.name, JsonField<std::string>(j, "name", where));
  ASSIGN_OR_RETURN(b.slice.offset, JsonField<int64_t>(j, "offset", where));
  ASSIGN_OR_RETURN(b.slice.size, JsonField<int64_t>(j, "size", where));
  ASSIGN_OR_RETURN(b.shape, JsonFieldOr<std::string>(j, "shape", where, ""));
  ASSIGN_OR_RETURN(b.category, OptionalBufferCategory(j, "category", where));
  b.slice.buffer = b.id;
  return b;
}

json ToJson(const PlanSlot& s) {
  json j = ToJson(s.slice);
  j["role"] = SlotRoleName(s.role);
  j["index"] = s.index;
  j["name"] = s.name;
  j["shape"] = s.shape.ToString();
  return j;
}

StatusOr<PlanSlot> PlanSlotFromJson(const json& j, std::string_view where) {
  PlanSlot s;
  ASSIGN_OR_RETURN(std::string role, JsonField<std::string>(j, "role", where));
  std::optional<SlotRole> parsed_role = ParseSlotRole(role);
  if (!parsed_role) return Error("{}.role: unknown role '{}'", where, role);
  s.role = *parsed_role;
  ASSIGN_OR_RETURN(s.index, JsonField<int64_t>(j, "index", where));
  ASSIGN_OR_RETURN(s.name, JsonField<std::string>(j, "name", where));
  ASSIGN_OR_RETURN(std::string shape, JsonField<std::string>(j, "shape", where));
  StatusOr<ir::Shape> parsed = ir::ParseShape(shape);
  if (!parsed.ok()) return parsed.status().WithPrefix(fmt::format("{}.shape", where));
  s.shape = *parsed;
  ASSIGN_OR_RETURN(s.slice, ArenaSliceFromJson(j, where));
  return s;
}

json ToJson(const EntryPlan& e) {
  json inputs = json::array(), outputs = json::array(), donations = json::array();
  json thunks = json::array(), buckets = json::array(), buffers = json::array();
  for (const PlanSlot& s : e.inputs) inputs.push_back(ToJson(s));
  for (const PlanSlot& s : e.outputs) outputs.push_back(ToJson(s));
  for (auto [o, i] : e.donations) donations.push_back(json::array({o, i}));
  for (const Thunk& t : e.thunks) thunks.push_back(ToJson(t));
  for (const AllReduceBucket& b : e.buckets) buckets.push_back(ToJson(b));
  for (const PlanBuffer& b : e.buffers) buffers.push_back(ToJson(b));
  json j{{"name", e.name()},
         {"arena_size", e.arena_size},
         {"inputs", std::move(inputs)},
         {"outputs", std::move(outputs)},
         {"donations", std::move(donations)},
         {"thunks", std::move(thunks)},
         {"buckets", std::move(buckets)},
         {"buffers", std::move(buffers)}};
  if (e.arena_host) j["arena_host"] = EntryRoleName(*e.arena_host);
  return j;
}

StatusOr<EntryPlan> EntryPlanFromJson(const json& j, std::string_view where_unnamed) {
  EntryPlan e;
  ASSIGN_OR_RETURN(std::string name, JsonField<std::string>(j, "name", where_unnamed));
  std::optional<EntryRole> role = ParseEntryRole(name);
  if (!role) {
    return Error("{}: unknown entry '{}' (train_step, accumulate, apply, logits or eval)",
                 where_unnamed, name);
  }
  e.role = *role;
  const std::string where = fmt::format("plan entry {}", name);
  ASSIGN_OR_RETURN(e.arena_size, JsonField<int64_t>(j, "arena_size", where));
  if (j.contains("arena_host")) {
    ASSIGN_OR_RETURN(std::string host, JsonField<std::string>(j, "arena_host", where));
    e.arena_host = ParseEntryRole(host);
    if (!e.arena_host) return Error("{}: arena_host: unknown entry '{}'", where, host);
  }
  ASSIGN_OR_RETURN(e.inputs, ArrayField<PlanSlot>(j, "inputs", where, PlanSlotFromJson));
  ASSIGN_OR_RETURN(e.outputs, ArrayField<PlanSlot>(j, "outputs", where, PlanSlotFromJson));
  if (j.contains("donations")) {
    ASSIGN_OR_RETURN(e.donations,
                     (JsonField<std::vector<std::pair<int64_t, int64_t>>>(j, "donations", where)));
  }
  ASSIGN_OR_RETURN(e.thunks, ArrayField<Thunk>(j, "thunks", where, ThunkFromJson));
  for (size_t i = 0; i < e.thunks.size(); ++i) e.thunks[i].index = static_cast<int64_t>(i);
  if (j.contains("buckets")) {
    ASSIGN_OR_RETURN(e.buckets,
                     ArrayField<AllReduceBucket>(j, "buckets", where, AllReduceBucketFromJson));
  }
  if (j.contains("buffers")) {
    ASSIGN_OR_RETURN(e.buffers, ArrayField<PlanBuffer>(j, "buffers", where, PlanBufferFromJson));
  }
  return e;
}

json ToJson(const Plan& p) {
  json entries = json::array();
  for (const EntryPlan& e : p.entries) entries.push_back(ToJson(e));
  return json{{"entries", std::move(entries)}};
}

StatusOr<Plan> PlanFromJson(const json& j) {
  Plan p;
  ASSIGN_OR_RETURN(p.entries, ArrayField<EntryPlan>(j, "entries", "section 'plan'",
                                                    [](const json& e, const std::string& at) {
                                                      return EntryPlanFromJson(e, at);
                                                    }));
  for (const EntryPlan& e : p.entries) {
    if (!e.arena_host) continue;
    auto host = std::find_if(p.entries.begin(), p.entries.end(),
                             [&](const EntryPlan& h) { return h.role == *e.arena_host; });
    if (host == p.entries.end() || host->arena_host || host->role == e.role) {
      return Error("plan entry {}: arena_host {} is not an entry of the plan with its own arena",
                   e.name(), EntryRoleName(*e.arena_host));
    }
  }
  return p;
}

int64_t ArenaAllocationBytes(std::span<const int64_t> sizes, std::span<const int> hosts) {
  std::vector<int64_t> allocated(sizes.begin(), sizes.end());
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (hosts[i] < 0) continue;
    allocated[hosts[i]] = std::max(allocated[hosts[i]], sizes[i]);
    allocated[i] = 0;
  }
  int64_t bytes = 0;
  for (int64_t b : allocated) bytes += b;
  return bytes;
}

int ArenaHostIndex(std::span<const EntryPlan> entries, const EntryPlan& e) {
  if (!e.arena_host) return -1;
  for (size_t i = 0; i < entries.size(); ++i) {
    if (entries[i].role == *e.arena_host) return static_cast<int>(i);
  }
  return -1;
}

int64_t ArenaAllocationBytes(std::span<const EntryPlan> entries) {
  std::vector<int64_t> sizes;
  std::vector<int> hosts;
  for (const EntryPlan& e : entries) {
    sizes.push_back(e.arena_size);
    hosts.push_back(ArenaHostIndex(entries, e));
  }
  return ArenaAllocationBytes(sizes, hosts);
}

}  // namespace gptc::program
