// GPT-2's parameters as one table: what each is called here and in Hugging
// Face's files, its shape as a function of the config, how it starts, and
// whether it is a matmul operand. models/gpt2.cc traces them in this order
// (tests/models/gpt2_params_test.cc holds the two together), and the readers
// of a GPT-2's parameters read them here: the program loader's check of an
// artifact's params, the checkpoint's token table, the Hugging Face export
// and import, and gptrun's FLOP count.
//
// Note [GPT-2 parameter table]
// The table lives in the compiler/runtime contract, beside ModelConfig, and
// not in models/: the runtime reads it (an artifact's params section must be
// "the GPT-2 of manifest.model", Note [manifest against program] in
// runtime/program_loader.cc), and the runtime and gptrun include no model
// (tests/layering). models/gpt2.cc, which writes the trace, reads the init
// rules from here, so each fact has one owner: the table decides the
// parameters, the trace declares them as the table says.
#ifndef GPTC_COMPILER_PROGRAM_GPT2_PARAMS_H_
#define GPTC_COMPILER_PROGRAM_GPT2_PARAMS_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/program/model_config.h"
#include "compiler/program/param.h"

namespace gptc::program {

// The config size a parameter dimension is a multiple of.
enum class Gpt2Size { kWidth, kPositions, kPaddedVocab };

// One dimension: `times` x a config size ("3C" is {kWidth, 3}).
struct Gpt2Dim {
  Gpt2Size size = Gpt2Size::kWidth;
  int64_t times = 1;
};

// How GPT-2 initializes a parameter (Gpt2InitRule gives the numbers).
enum class Gpt2Init {
  kNormal,          // normal(0, 0.02): embeddings and matrices
  kResidualNormal,  // normal(0, 0.02 / sqrt(2 * layers)): projections into the residual stream
  kZeros,           // biases
  kOnes,            // layer-norm gains
};

// One row of the table: a parameter, or one per transformer block.
struct Gpt2ParamKind {
  std::string_view name;     // ours, without "h.N." for a block's ("attn.c_attn.weight")
  std::string_view hf_name;  // GPT2Model's, likewise (GPT2LMHeadModel's with kHfPrefix)
  bool per_block = false;    // one in every block, named "h.N." + name
  int rank = 1;
  std::array<Gpt2Dim, 2> dims{};  // the first `rank`
  Gpt2Init init = Gpt2Init::kZeros;
  // A matmul operand: each element costs 6 FLOPs a token over forward and
  // backward (wte is the logits' weight; wpe is added, not multiplied).
  bool matmul = false;
  // HF stores the transpose of ours. No row is: GPT-2's projections are
  // Conv1D, y = x @ W + b with W (in, out), as frontend::Linear's.
  bool hf_transposed = false;
  // Rows padded to padded_vocab here; HF keeps the real `vocab` rows
  // (Note [padded wte] in runtime/checkpoint.h).
  bool padded_rows = false;
};

// Row makers and dimensions, so that the table reads a row a line.
namespace gpt2_table {
inline constexpr Gpt2Dim kC{Gpt2Size::kWidth, 1}, k3C{Gpt2Size::kWidth, 3},
    k4C{Gpt2Size::kWidth, 4}, kP{Gpt2Size::kPositions, 1}, kV{Gpt2Size::kPaddedVocab, 1};
inline constexpr Gpt2ParamKind Vector(std::string_view name, Gpt2Dim d, Gpt2Init init) {
  return {.name = name, .hf_name = name, .per_block = true, .rank = 1, .dims = {d}, .init = init};
}
inline constexpr Gpt2ParamKind Matrix(std::string_view name, Gpt2Dim in, Gpt2Dim out,
                                      Gpt2Init init) {
  return {.name = name,
          .hf_name = name,
          .per_block = true,
          .rank = 2,
          .dims = {in, out},
          .init = init,
          .matmul = true};
}
inline constexpr Gpt2ParamKind Global(Gpt2ParamKind k) {
  k.per_block = false;
  return k;
}
}  // namespace gpt2_table

// Every parameter kind in trace order, which is also GPT2LMHeadModel's
// state-dict order: the rows before the blocks, the block's rows once per
// block, the rows after.
inline constexpr Gpt2ParamKind kGpt2ParamTable[] = {
    {.name = "wte.weight",
     .hf_name = "wte.weight",
     .rank = 2,
     .dims = {gpt2_table::kV, gpt2_table::kC},
     .init = Gpt2Init::kNormal,
     .matmul = true,
     .padded_rows = true},
    {.name = "wpe.weight",
     .hf_name = "wpe.weight",
     .rank = 2,
     .dims = {gpt2_table::kP, gpt2_table::kC},
     .init = Gpt2Init::kNormal},
    gpt2_table::Vector("ln_1.weight", gpt2_table::kC, Gpt2Init::kOnes),
    gpt2_table::Vector("ln_1.bias", gpt2_table::kC, Gpt2Init::kZeros),
    gpt2_table::Matrix("attn.c_attn.weight", gpt2_table::kC, gpt2_table::k3C, Gpt2Init::kNormal),
    gpt2_table::Vector("attn.c_attn.bias", gpt2_table::k3C, Gpt2Init::kZeros),
    gpt2_table::Matrix("attn.c_proj.weight", gpt2_table::kC, gpt2_table::kC,
                       Gpt2Init::kResidualNormal),
    gpt2_table::Vector("attn.c_proj.bias", gpt2_table::kC, Gpt2Init::kZeros),
    gpt2_table::Vector("ln_2.weight", gpt2_table::kC, Gpt2Init::kOnes),
    gpt2_table::Vector("ln_2.bias", gpt2_table::kC, Gpt2Init::kZeros),
    gpt2_table::Matrix("mlp.c_fc.weight", gpt2_table::kC, gpt2_table::k4C, Gpt2Init::kNormal),
    gpt2_table::Vector("mlp.c_fc.bias", gpt2_table::k4C, Gpt2Init::kZeros),
    gpt2_table::Matrix("mlp.c_proj.weight", gpt2_table::k4C, gpt2_table::kC,
                       Gpt2Init::kResidualNormal),
    gpt2_table::Vector("mlp.c_proj.bias", gpt2_table::kC, Gpt2Init::kZeros),
    gpt2_table::Global(gpt2_table::Vector("ln_f.weight", gpt2_table::kC, Gpt2Init::kOnes)),
    gpt2_table::Global(gpt2_table::Vector("ln_f.bias", gpt2_table::kC, Gpt2Init::kZeros)),
};

// What HF's files hold beside the parameters. GPT2LMHeadModel holds
// GPT2Model as `transformer`: its names are GPT2Model's after this prefix.
inline constexpr std::string_view kHfPrefix = "transformer.";
// GPT2LMHeadModel's output projection, tied to the token table (our logits
// reuse wte): save_pretrained leaves it out, older files hold a copy.
inline constexpr std::string_view kHfLmHead = "lm_head.weight";
// GPT2Attention's causal-mask buffers, in each block (after "h.N."), which
// older transformers saved with the weights; they are not parameters.
inline constexpr std::string_view kHfBlockBuffers[] = {"attn.bias", "attn.masked_bias"};

// The full name of a block's parameter or buffer: "h.3." + name, as both
// we and GPT2Model name them.
std::string Gpt2BlockName(int64_t layer, std::string_view name);

// The token table's row (the one with padded_rows).
const Gpt2ParamKind& Gpt2TokenTable();

// One parameter of a config's GPT-2: its row, its block (-1 outside the
// blocks), its names in full ("h.0.attn.c_attn.weight"; HF's without
// kHfPrefix) and its shape.
struct Gpt2Param {
  const Gpt2ParamKind* kind = nullptr;
  int64_t layer = -1;
  std::string name;
  std::string hf_name;
  std::vector<int64_t> shape;
};

// Every parameter of `model`'s GPT-2, in trace order.
std::vector<Gpt2Param> Gpt2Params(const ModelConfig& model);
// How many there are (without listing them: a hostile manifest may claim
// millions of layers).
int64_t Gpt2ParamCount(const ModelConfig& model);

// The rule that initializes a parameter of `init` in a GPT-2 of `layers` blocks.
InitRule Gpt2InitRule(Gpt2Init init, int64_t layers);

// Gpt2Params as the params section holds them: f32, with their init rules;
// what models/gpt2.cc's trace declares.
std::vector<ParamSpec> Gpt2ParamSpecs(const ModelConfig& model);

}  // namespace gptc::program

#endif  // GPTC_COMPILER_PROGRAM_GPT2_PARAMS_H_
