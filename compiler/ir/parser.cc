#include "compiler/ir/parser.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <unordered_set>

#include "compiler/ir/verifier.h"
#include "compiler/support/float_bits.h"

namespace gptc::ir {

namespace {

constexpr int kMaxTupleDepth = 32;
// Larger arrays cannot be allocated anyway; refusing them keeps size
// arithmetic in the verifier and evaluator free of overflow.
constexpr int64_t kMaxElements = int64_t{1} << 48;

bool IsNameChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
}

// The attribute keys each opcode accepts (besides `meta`, and `calls` for
// ops that call a computation).
std::vector<std::string_view> AllowedAttrs(Opcode opcode) {
  switch (opcode) {
    case Opcode::kIota:
      return {"iota_dimension"};
    case Opcode::kBroadcast:
    case Opcode::kTranspose:
    case Opcode::kConcatenate:
      return {"dimensions"};
    case Opcode::kReduce:
      return {"dimensions", "kind"};
    case Opcode::kAllReduce:
      return {"kind", "bucket"};
    case Opcode::kReduceScatter:
      return {"kind", "replicas", "bucket"};
    case Opcode::kAllGather:
      return {"replicas", "bucket"};
    case Opcode::kFusion:
      return {"kind", "epilogue"};
    case Opcode::kSlice:
      return {"slice"};
    case Opcode::kPad:
      return {"low", "high"};
    case Opcode::kCompare:
      return {"direction"};
    case Opcode::kDot:
      return {"lhs_batch", "rhs_batch", "lhs_contracting", "rhs_contracting"};
    case Opcode::kGather:
    case Opcode::kScatterAdd:
      return {"axis"};
    case Opcode::kGetTupleElement:
      return {"index"};
    case Opcode::kAttention:
      return {"causal", "scale", "grad_dtype"};
    case Opcode::kAttentionLse:
      return {"causal", "scale", "grad_dtype"};
    case Opcode::kAttentionGrad:
      return {"causal", "scale", "wrt"};
    case Opcode::kSoftmaxCrossEntropy:
      return {"num_classes"};
    default:
      return {};
  }
}

// Rounds a parsed decimal to the value the dtype holds, so that printing and
// parsing again is exact.
double RoundToDType(DType dtype, double v) {
  switch (dtype) {
    case DType::kF32:
      return static_cast<float>(v);
    case DType::kBF16:
      return RoundToBF16(static_cast<float>(v));
    case DType::kF16:
      return RoundToF16(static_cast<float>(v));
    default:
      return v;
  }
}

class Parser {
 public:
  Parser(std::string_view text, std::string_view filename) : text_(text), filename_(filename) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < text_.size(); ++i) {
      if (text_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  // With `stop_at_next_module`, stops before a following `module` header
  // (ParseModules); otherwise the module runs to the end of the text.
  StatusOr<std::unique_ptr<Module>> ParseModule(bool stop_at_next_module = false) {
    SkipSpace();
    if (!ConsumeWord("module")) return ErrorHere("expected 'module' at the start of the file");
    size_t name_pos = pos_;
    std::string name = ReadNameChars();
    if (name.empty()) return ErrorAt(name_pos, "expected a module name after 'module'");
    auto module = std::make_unique<Module>(name);
    module->set_source_file(std::string(filename_));
    module_ = module.get();
    while (true) {
      SkipSpace();
      if (AtEnd()) break;
      if (stop_at_next_module) {
        size_t here = pos_;
        bool next_module = ConsumeWord("module");
        pos_ = here;
        if (next_module) break;
      }
      RETURN_IF_ERROR(ParseComputation());
    }
    if (module->entry() == nullptr) return ErrorHere("expected an ENTRY computation");
    return module;
  }

  StatusOr<std::vector<std::unique_ptr<Module>>> ParseModules() {
    std::vector<std::unique_ptr<Module>> modules;
    do {
      ASSIGN_OR_RETURN(std::unique_ptr<Module> module, ParseModule(/*stop_at_next_module=*/true));
      modules.push_back(std::move(module));
      SkipSpace();
    } while (!AtEnd());
    return modules;
  }

  StatusOr<Shape> ParseShapeOnly() {
    SkipSpace();
    ASSIGN_OR_RETURN(Shape shape, ParseShape(0));
    SkipSpace();
    if (!AtEnd()) return ErrorHere("unexpected text after shape");
    return shape;
  }

 private:
  // --- errors and positions ---------------------------------------------
  // 1-based line and column of byte offset `pos`.
  std::pair<int, int> LineColumn(size_t pos) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), pos);
    size_t line = it - line_starts_.begin();
    return {static_cast<int>(line), static_cast<int>(pos - line_starts_[line - 1] + 1)};
  }
  Status ErrorAt(size_t pos, std::string_view message) const {
    auto [line, col] = LineColumn(pos);
    return Error("{}:{}:{}: {}", filename_, line, col, message);
  }
  Status ErrorHere(std::string_view message) const { return ErrorAt(pos_, message); }

  // --- characters ---------------------------------------------------------
  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek() const { return AtEnd() ? '\0' : text_[pos_]; }

  void SkipSpace() {
    while (!AtEnd()) {
      char c = text_[pos_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else if (c == '/' && pos_ + 1 < text_.size() && text_[pos_ + 1] == '/') {
        while (!AtEnd() && text_[pos_] != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  bool Consume(char c) {
    SkipSpace();
    if (Peek() != c) return false;
    ++pos_;
    return true;
  }

  Status Expect(char c, std::string_view context) {
    if (Consume(c)) return Status::Ok();
    return ErrorHere(fmt::format("expected '{}' {}", c, context));
  }

  std::string ReadNameChars() {
    SkipSpace();
    size_t start = pos_;
    while (!AtEnd() && IsNameChar(text_[pos_])) ++pos_;
    return std::string(text_.substr(start, pos_ - start));
  }

  // Consumes `word` if it is the next whole word.
  bool ConsumeWord(std::string_view word) {
    SkipSpace();
    if (text_.substr(pos_, word.size()) != word) return false;
    size_t end = pos_ + word.size();
    if (end < text_.size() && IsNameChar(text_[end])) return false;
    pos_ = end;
    return true;
  }

  StatusOr<std::string> ParsePercentName(std::string_view what) {
    SkipSpace();
    if (Peek() != '%') return ErrorHere(fmt::format("expected '%' before {}", what));
    ++pos_;
    size_t start = pos_;
    while (!AtEnd() && IsNameChar(text_[pos_])) ++pos_;
    if (pos_ == start) return ErrorHere(fmt::format("expected {} after '%'", what));
    return std::string(text_.substr(start, pos_ - start));
  }

  StatusOr<int64_t> ParseInt(std::string_view what) {
    SkipSpace();
    size_t start = pos_;
    if (Peek() == '-') ++pos_;
    while (!AtEnd() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_;
    int64_t value = 0;
    auto [ptr, ec] = std::from_chars(text_.data() + start, text_.data() + pos_, value);
    if (ec != std::errc() || ptr != text_.data() + pos_) {
      pos_ = start;
      return ErrorHere(fmt::format("expected an integer {}", what));
    }
    return value;
  }

  // A literal value: a decimal, inf, -inf, nan, true or false.
  StatusOr<double> ParseNumber() {
    SkipSpace();
    size_t start = pos_;
    if (ConsumeWord("true")) return 1.0;
    if (ConsumeWord("false")) return 0.0;
    bool negative = Peek() == '-';
    if (negative || Peek() == '+') ++pos_;
    if (ConsumeWord("inf")) return negative ? -INFINITY : INFINITY;
    if (ConsumeWord("nan")) return NAN;
    pos_ = start;
    while (!AtEnd() && (std::isalnum(static_cast<unsigned char>(text_[pos_])) ||
                        text_[pos_] == '.' || text_[pos_] == '-' || text_[pos_] == '+')) {
      ++pos_;
    }
    double value = 0;
    const char* first = text_.data() + start;
    if (first < text_.data() + pos_ && *first == '+') ++first;
    auto [ptr, ec] = std::from_chars(first, text_.data() + pos_, value);
    if (ptr != text_.data() + pos_ || (ec != std::errc() && ec != std::errc::result_out_of_range)) {
      pos_ = start;
      return ErrorHere("expected a number");
    }
    // from_chars leaves `value` untouched when the decimal is beyond the double
    // range; strtod gives the signed infinity or zero it rounds to.
    if (ec == std::errc::result_out_of_range) {
      value = std::strtod(std::string(first, ptr).c_str(), nullptr);
    }
    return value;
  }

  StatusOr<std::vector<int64_t>> ParseIntList(std::string_view what) {
    RETURN_IF_ERROR(Expect('{', fmt::format("to open {}", what)));
    std::vector<int64_t> values;
    if (Consume('}')) return values;
    do {
      ASSIGN_OR_RETURN(int64_t v, ParseInt(fmt::format("in {}", what)));
      values.push_back(v);
    } while (Consume(','));
    RETURN_IF_ERROR(Expect('}', fmt::format("after {}", what)));
    return values;
  }

  StatusOr<Shape> ParseShape(int depth) {
    SkipSpace();
    if (Peek() == '(') {
      if (depth >= kMaxTupleDepth) return ErrorHere("tuple shape nested too deeply");
      ++pos_;
      std::vector<Shape> elements;
      if (!Consume(')')) {
        do {
          ASSIGN_OR_RETURN(Shape e, ParseShape(depth + 1));
          elements.push_back(std::move(e));
        } while (Consume(','));
        RETURN_IF_ERROR(Expect(')', "after tuple shape"));
      }
      return Shape::Tuple(std::move(elements));
    }
    size_t start = pos_;
    std::string dtype_name = ReadNameChars();
    std::optional<DType> dtype = ParseDType(dtype_name);
    if (!dtype) {
      return ErrorAt(start, dtype_name.empty() ? "expected a shape"
                                               : fmt::format("unknown dtype '{}'", dtype_name));
    }
    RETURN_IF_ERROR(Expect('[', "after dtype"));
    std::vector<int64_t> dims;
    int64_t elements = 1;
    if (!Consume(']')) {
      do {
        size_t dim_pos = pos_;
        ASSIGN_OR_RETURN(int64_t d, ParseInt("as a dimension"));
        if (d < 0) return ErrorAt(dim_pos, "dimension must not be negative");
        // Zero dims are left out of the product so that they cannot hide huge others.
        if (d > 0 && elements > kMaxElements / d) return ErrorAt(dim_pos, "shape is too large");
        if (d > 0) elements *= d;
        dims.push_back(d);
      } while (Consume(','));
      RETURN_IF_ERROR(Expect(']', "after dimensions"));
    }
    return Shape(*dtype, std::move(dims));
  }

  StatusOr<SliceSpec> ParseSliceSpec() {
    SliceSpec spec;
    RETURN_IF_ERROR(Expect('{', "to open slice ranges"));
    if (Consume('}')) return spec;
    do {
      RETURN_IF_ERROR(Expect('[', "to open a slice range"));
      ASSIGN_OR_RETURN(int64_t start, ParseInt("as slice start"));
      RETURN_IF_ERROR(Expect(':', "after slice start"));
      ASSIGN_OR_RETURN(int64_t limit, ParseInt("as slice limit"));
      int64_t stride = 1;
      if (Consume(':')) {
        ASSIGN_OR_RETURN(stride, ParseInt("as slice stride"));
      }
      RETURN_IF_ERROR(Expect(']', "after slice range"));
      spec.starts.push_back(start);
      spec.limits.push_back(limit);
      spec.strides.push_back(stride);
    } while (Consume(','));
    RETURN_IF_ERROR(Expect('}', "after slice ranges"));
    return spec;
  }

  StatusOr<std::string> ParseString() {
    SkipSpace();
    if (Peek() != '"') return ErrorHere("expected '\"' to open a string");
    ++pos_;
    std::string out;
    while (true) {
      if (AtEnd() || Peek() == '\n') return ErrorHere("unterminated string");
      char c = text_[pos_++];
      if (c == '"') break;
      if (c == '\\') {
        if (AtEnd()) return ErrorHere("unterminated string");
        char e = text_[pos_++];
        if (e == 'n') {
          out += '\n';
        } else if (e == '"' || e == '\\') {
          out += e;
        } else {
          return ErrorAt(pos_ - 2, fmt::format("unknown escape '\\{}'", e));
        }
      } else {
        out += c;
      }
    }
    return out;
  }

  // --- computations and instructions ------------------------------------
  Status ParseComputation() {
    bool is_entry = ConsumeWord("ENTRY");
    SkipSpace();  // so that errors point at the name, not at the space after ENTRY
    size_t name_pos = pos_;
    ASSIGN_OR_RETURN(std::string name, ParsePercentName("a computation name"));
    if (module_->FindComputation(name) != nullptr) {
      return ErrorAt(name_pos, fmt::format("redefinition of computation %{}", name));
    }
    if (is_entry && module_->entry() != nullptr) {
      return ErrorAt(name_pos, "a module has one ENTRY computation");
    }
    RETURN_IF_ERROR(Expect('{', fmt::format("to open computation %{}", name)));
    Computation* computation = module_->AddComputation(std::make_unique<Computation>(name));
    if (is_entry) module_->set_entry(computation);
    while (!Consume('}')) {
      if (AtEnd()) return ErrorHere(fmt::format("expected '}}' to close computation %{}", name));
      RETURN_IF_ERROR(ParseInstruction(computation));
    }
    if (computation->root() == nullptr) {
      return ErrorAt(pos_ - 1, fmt::format("computation %{} has no ROOT instruction", name));
    }
    return Status::Ok();
  }

  Status ParseInstruction(Computation* computation) {
    bool is_root = ConsumeWord("ROOT");
    SkipSpace();
    size_t name_pos = pos_;
    ASSIGN_OR_RETURN(std::string name, ParsePercentName("an instruction name"));
    if (computation->FindInstruction(name) != nullptr) {
      return ErrorAt(name_pos, fmt::format("redefinition of %{}", name));
    }
    if (is_root && computation->root() != nullptr) {
      return ErrorAt(name_pos, fmt::format("second ROOT in computation %{}", computation->name()));
    }
    RETURN_IF_ERROR(Expect('=', fmt::format("after %{}", name)));
    ASSIGN_OR_RETURN(Shape shape, ParseShape(0));
    SkipSpace();
    size_t opcode_pos = pos_;
    std::string opcode_name = ReadNameChars();
    std::optional<Opcode> opcode = ParseOpcode(opcode_name);
    if (!opcode) {
      return ErrorAt(opcode_pos, opcode_name.empty()
                                     ? "expected an opcode"
                                     : fmt::format("unknown opcode '{}'", opcode_name));
    }
    Attrs attrs;
    std::vector<Instruction*> operands;
    RETURN_IF_ERROR(Expect('(', fmt::format("after opcode {}", opcode_name)));
    if (*opcode == Opcode::kParameter) {
      ASSIGN_OR_RETURN(attrs.index, ParseInt("as parameter number"));
      RETURN_IF_ERROR(Expect(')', "after parameter number"));
    } else if (*opcode == Opcode::kConstant) {
      RETURN_IF_ERROR(ParseConstantValues(shape, attrs.literal));
    } else if (!Consume(')')) {
      do {
        SkipSpace();
        size_t operand_pos = pos_;
        ASSIGN_OR_RETURN(std::string operand_name, ParsePercentName("an operand"));
        Instruction* operand = computation->FindInstruction(operand_name);
        if (operand == nullptr) {
          return ErrorAt(operand_pos, fmt::format("use of undefined value %{}", operand_name));
        }
        operands.push_back(operand);
      } while (Consume(','));
      RETURN_IF_ERROR(Expect(')', "after operands"));
    }
    Origin origin;
    Computation* called = nullptr;
    RETURN_IF_ERROR(ParseAttributes(*opcode, attrs, origin, called));
    auto inst = std::make_unique<Instruction>(name, *opcode, std::move(shape),
                                              std::move(operands), std::move(attrs));
    inst->set_metadata(std::move(origin.metadata));
    inst->set_role(origin.role);
    inst->set_called_computation(called);
    auto [line, col] = LineColumn(name_pos);
    inst->set_location(line, col);
    Instruction* added = computation->AddInstruction(std::move(inst));
    if (is_root) computation->set_root(added);
    return Status::Ok();
  }

  Status ParseConstantValues(const Shape& shape, std::vector<double>& values) {
    DType dtype = shape.is_tuple() ? DType::kF32 : shape.dtype();
    // A decimal means the dtype's nearest value; one beyond the dtype's range
    // has none (it would silently become infinity).
    auto parse_value = [&]() -> Status {
      SkipSpace();
      const size_t start = pos_;
      ASSIGN_OR_RETURN(double v, ParseNumber());
      const double rounded = RoundToDType(dtype, v);
      const std::string_view text = text_.substr(start, pos_ - start);
      if (std::isinf(rounded) && text.find("inf") == std::string_view::npos) {
        return ErrorAt(start, fmt::format("constant value {} is beyond the range of {} (write "
                                          "{}inf for infinity)",
                                          text, DTypeName(dtype), rounded < 0 ? "-" : ""));
      }
      values.push_back(rounded);
      return Status::Ok();
    };
    if (Consume('{')) {
      if (!Consume('}')) {
        do {
          RETURN_IF_ERROR(parse_value());
        } while (Consume(','));
        RETURN_IF_ERROR(Expect('}', "after constant values"));
      }
    } else {
      RETURN_IF_ERROR(parse_value());
    }
    return Expect(')', "after constant");
  }

  // `{d=0, bias=2, activation=gelu, transposed=true}` (ir/gemm_epilogue.h).
  StatusOr<GemmEpilogue> ParseGemmEpilogue() {
    RETURN_IF_ERROR(Expect('{', "to open an epilogue record"));
    GemmEpilogue e;
    std::unordered_set<std::string> seen;
    while (!Consume('}')) {
      if (!seen.empty()) RETURN_IF_ERROR(Expect(',', "between epilogue fields"));
      SkipSpace();
      const size_t key_pos = pos_;
      std::string key = ReadNameChars();
      if (key.empty()) return ErrorHere("expected an epilogue field or '}'");
      if (!seen.insert(key).second) {
        return ErrorAt(key_pos, fmt::format("epilogue field '{}' given twice", key));
      }
      RETURN_IF_ERROR(Expect('=', fmt::format("after epilogue field '{}'", key)));
      SkipSpace();
      const size_t value_pos = pos_;
      int64_t* number = key == "d"               ? &e.d
                        : key == "bias"          ? &e.bias
                        : key == "residual"      ? &e.residual
                        : key == "aux_out"       ? &e.aux_out
                        : key == "aux_in"        ? &e.aux_in
                        : key == "bias_grad_out" ? &e.bias_grad_out
                        : key == "bias_grad_of"  ? &e.bias_grad_of
                                                 : nullptr;
      if (number != nullptr) {
        ASSIGN_OR_RETURN(*number, ParseInt(fmt::format("for epilogue field '{}'", key)));
      } else if (key == "activation") {
        std::string word = ReadNameChars();
        std::optional<GemmActivation> a = ParseGemmActivation(word);
        if (!a) return ErrorAt(value_pos, fmt::format("unknown gemm activation '{}'", word));
        e.activation = *a;
      } else if (key == "transposed") {
        if (ConsumeWord("true")) {
          e.transposed = true;
        } else if (!ConsumeWord("false")) {
          return ErrorAt(value_pos, "expected true or false for transposed");
        }
      } else {
        return ErrorAt(key_pos, fmt::format("unknown epilogue field '{}'", key));
      }
    }
    return e;
  }

  // The attributes every opcode takes: where the value came from.
  struct Origin {
    std::string metadata;
    Role role;
  };

  Status ParseAttributes(Opcode opcode, Attrs& attrs, Origin& origin, Computation*& called) {
    std::vector<std::string_view> allowed = AllowedAttrs(opcode);
    if (CallsComputation(opcode)) allowed.push_back("calls");
    allowed.insert(allowed.end(), {"phase", "layer", "meta"});
    std::unordered_set<std::string> seen;
    while (Consume(',')) {
      SkipSpace();
      size_t key_pos = pos_;
      std::string key = ReadNameChars();
      if (key.empty()) return ErrorHere("expected an attribute name after ','");
      if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
        return ErrorAt(key_pos, fmt::format("unknown attribute '{}' for {}", key,
                                            OpcodeName(opcode)));
      }
      if (!seen.insert(key).second) {
        return ErrorAt(key_pos, fmt::format("attribute '{}' given twice", key));
      }
      RETURN_IF_ERROR(Expect('=', fmt::format("after attribute '{}'", key)));
      if (key == "phase" || key == "layer" || key == "meta") {
        RETURN_IF_ERROR(ParseOriginValue(key, origin));
      } else {
        RETURN_IF_ERROR(ParseAttributeValue(opcode, key, attrs, called));
      }
    }
    return Status::Ok();
  }

  Status ParseAttributeValue(Opcode opcode, std::string_view key, Attrs& attrs,
                             Computation*& called) {
    SkipSpace();
    size_t value_pos = pos_;
    if (key == "iota_dimension" || key == "axis" || key == "index" || key == "replicas") {
      ASSIGN_OR_RETURN(attrs.index, ParseInt(fmt::format("for {}", key)));
    } else if (key == "bucket") {
      ASSIGN_OR_RETURN(const int64_t bucket, ParseInt("for bucket"));
      if (bucket < 0) return ErrorAt(value_pos, fmt::format("bucket must be >= 0, got {}", bucket));
      attrs.bucket = bucket;
    } else if (key == "num_classes") {
      ASSIGN_OR_RETURN(attrs.num_classes, ParseInt("for num_classes"));
    } else if (key == "dimensions") {
      ASSIGN_OR_RETURN(attrs.dimensions, ParseIntList("dimensions"));
    } else if (key == "low") {
      ASSIGN_OR_RETURN(attrs.pad_low, ParseIntList("low padding"));
    } else if (key == "high") {
      ASSIGN_OR_RETURN(attrs.pad_high, ParseIntList("high padding"));
    } else if (key == "lhs_batch") {
      ASSIGN_OR_RETURN(attrs.dot.lhs_batch, ParseIntList("lhs_batch"));
    } else if (key == "rhs_batch") {
      ASSIGN_OR_RETURN(attrs.dot.rhs_batch, ParseIntList("rhs_batch"));
    } else if (key == "lhs_contracting") {
      ASSIGN_OR_RETURN(attrs.dot.lhs_contracting, ParseIntList("lhs_contracting"));
    } else if (key == "rhs_contracting") {
      ASSIGN_OR_RETURN(attrs.dot.rhs_contracting, ParseIntList("rhs_contracting"));
    } else if (key == "slice") {
      ASSIGN_OR_RETURN(attrs.slice, ParseSliceSpec());
    } else if (key == "kind") {
      std::string word = ReadNameChars();
      if (opcode == Opcode::kFusion) {
        std::optional<FusionKind> kind = ParseFusionKind(word);
        if (!kind) return ErrorAt(value_pos, fmt::format("unknown fusion kind '{}'", word));
        attrs.fusion_kind = *kind;
      } else {
        std::optional<ReduceKind> kind = ParseReduceKind(word);
        if (!kind) return ErrorAt(value_pos, fmt::format("unknown reduce kind '{}'", word));
        attrs.reduce_kind = *kind;
      }
    } else if (key == "epilogue") {
      ASSIGN_OR_RETURN(attrs.gemm_epilogue, ParseGemmEpilogue());
    } else if (key == "direction") {
      std::string word = ReadNameChars();
      std::optional<CompareDirection> d = ParseCompareDirection(word);
      if (!d) return ErrorAt(value_pos, fmt::format("unknown comparison direction '{}'", word));
      attrs.direction = *d;
    } else if (key == "causal") {
      if (ConsumeWord("true")) {
        attrs.causal = true;
      } else if (ConsumeWord("false")) {
        attrs.causal = false;
      } else {
        return ErrorAt(value_pos, "expected true or false for causal");
      }
    } else if (key == "scale") {
      ASSIGN_OR_RETURN(attrs.scale, ParseNumber());
    } else if (key == "wrt") {
      std::string word = ReadNameChars();
      if (word.size() != 1 || std::string_view("qkv").find(word[0]) == std::string_view::npos) {
        return ErrorAt(value_pos, fmt::format("wrt must be q, k or v, got '{}'", word));
      }
      attrs.index = std::string_view("qkv").find(word[0]);
    } else if (key == "grad_dtype") {
      std::string word = ReadNameChars();
      std::optional<DType> dtype = ParseDType(word);
      if (!dtype || !IsFloat(*dtype)) {
        return ErrorAt(value_pos, fmt::format("grad_dtype must be a float dtype, got '{}'", word));
      }
      attrs.grad_dtype = *dtype;
    } else if (key == "calls") {
      ASSIGN_OR_RETURN(std::string name, ParsePercentName("a computation name"));
      called = module_->FindComputation(name);
      if (called == nullptr) {
        return ErrorAt(value_pos, fmt::format("calls undefined computation %{} (define it before "
                                              "its callers)",
                                              name));
      }
    }
    return Status::Ok();
  }

  Status ParseOriginValue(std::string_view key, Origin& origin) {
    SkipSpace();
    size_t value_pos = pos_;
    if (key == "meta") {
      ASSIGN_OR_RETURN(origin.metadata, ParseString());
    } else if (key == "phase") {
      std::string word = ReadNameChars();
      std::optional<Phase> phase = ParsePhase(word);
      if (!phase) {
        return ErrorAt(value_pos, fmt::format("unknown phase '{}' (forward, param_cast, remat, "
                                              "gradient, update or optimizer)",
                                              word));
      }
      origin.role.phase = *phase;
    } else if (key == "layer") {
      ASSIGN_OR_RETURN(int64_t layer, ParseInt("for layer"));
      if (layer < 0 || layer > kMaxLayer) {
        return ErrorAt(value_pos,
                       fmt::format("layer must be in [0, {}], got {}", kMaxLayer, layer));
      }
      origin.role.layer = static_cast<int32_t>(layer);
    }
    return Status::Ok();
  }

  std::string_view text_;
  std::string_view filename_;
  size_t pos_ = 0;
  std::vector<size_t> line_starts_;
  Module* module_ = nullptr;
};

}  // namespace

StatusOr<std::unique_ptr<Module>> ParseModule(std::string_view text, std::string_view filename) {
  return Parser(text, filename).ParseModule();
}

StatusOr<std::vector<std::unique_ptr<Module>>> ParseModules(std::string_view text,
                                                          std::string_view filename) {
  return Parser(text, filename).ParseModules();
}

StatusOr<std::unique_ptr<Module>> ParseAndVerifyModule(std::string_view text,
                                                       std::string_view filename) {
  ASSIGN_OR_RETURN(std::unique_ptr<Module> module, ParseModule(text, filename));
  RETURN_IF_ERROR(VerifyModule(*module));
  return module;
}

StatusOr<Shape> ParseShape(std::string_view text) {
  return Parser(text, "<shape>").ParseShapeOnly();
}

}  // namespace gptc::ir
