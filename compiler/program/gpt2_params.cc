#include "compiler/program/gpt2_params.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace gptc::program {
namespace {

// The blocks' rows are one run, which Gpt2Params repeats once per block.
constexpr bool BlockRowsAreOneRun() {
  int runs = 0;
  bool previous = false;
  for (const Gpt2ParamKind& k : kGpt2ParamTable) {
    runs += k.per_block && !previous;
    previous = k.per_block;
  }
  return runs == 1;
}
static_assert(BlockRowsAreOneRun());

// GPT-2's init scale (Radford et al. 2019; GPT2Config.initializer_range).
constexpr double kInitStd = 0.02;

int64_t SizeOf(Gpt2Size size, const ModelConfig& model) {
  switch (size) {
    case Gpt2Size::kWidth:
      return model.width;
    case Gpt2Size::kPositions:
      return model.positions;
    case Gpt2Size::kPaddedVocab:
      return model.padded_vocab;
  }
  return 0;
}

Gpt2Param Expand(const Gpt2ParamKind& kind, int64_t layer, const ModelConfig& model) {
  Gpt2Param p{
      .kind = &kind,
      .layer = layer,
      .name = layer >= 0 ? Gpt2BlockName(layer, kind.name) : std::string(kind.name),
      .hf_name = layer >= 0 ? Gpt2BlockName(layer, kind.hf_name) : std::string(kind.hf_name)};
  for (int d = 0; d < kind.rank; ++d) {
    p.shape.push_back(kind.dims[d].times * SizeOf(kind.dims[d].size, model));
  }
  return p;
}

}  // namespace

std::string Gpt2BlockName(int64_t layer, std::string_view name) {
  return fmt::format("h.{}.{}", layer, name);
}

const Gpt2ParamKind& Gpt2TokenTable() {
  static const Gpt2ParamKind* const row =
      std::ranges::find_if(kGpt2ParamTable, &Gpt2ParamKind::padded_rows);
  return *row;
}

std::vector<Gpt2Param> Gpt2Params(const ModelConfig& model) {
  std::vector<Gpt2Param> out;
  const auto first_block = std::ranges::find_if(kGpt2ParamTable, &Gpt2ParamKind::per_block);
  const auto after_block = std::ranges::find_if_not(first_block, std::ranges::end(kGpt2ParamTable),
                                                    &Gpt2ParamKind::per_block);
  for (auto it = std::ranges::begin(kGpt2ParamTable); it != first_block; ++it) {
    out.push_back(Expand(*it, -1, model));
  }
  for (int64_t l = 0; l < model.layers; ++l) {
    for (auto it = first_block; it != after_block; ++it) out.push_back(Expand(*it, l, model));
  }
  for (auto it = after_block; it != std::ranges::end(kGpt2ParamTable); ++it) {
    out.push_back(Expand(*it, -1, model));
  }
  return out;
}

int64_t Gpt2ParamCount(const ModelConfig& model) {
  const auto per_block = std::ranges::count_if(kGpt2ParamTable, &Gpt2ParamKind::per_block);
  const auto global = std::ranges::ssize(kGpt2ParamTable) - per_block;
  return global + per_block * model.layers;
}

InitRule Gpt2InitRule(Gpt2Init init, int64_t layers) {
  switch (init) {
    case Gpt2Init::kNormal:
      return InitRule::Normal(kInitStd);
    // Each block adds two projections into the residual stream, so their
    // init is scaled down by the square root of their count.
    case Gpt2Init::kResidualNormal:
      return InitRule::Normal(kInitStd / std::sqrt(2.0 * static_cast<double>(layers)));
    case Gpt2Init::kZeros:
      return InitRule::Zeros();
    case Gpt2Init::kOnes:
      return InitRule::Ones();
  }
  return InitRule::Zeros();
}

std::vector<ParamSpec> Gpt2ParamSpecs(const ModelConfig& model) {
  std::vector<ParamSpec> out;
  for (const Gpt2Param& p : Gpt2Params(model)) {
    out.push_back({.name = p.name,
                   .shape = ir::Shape(ir::DType::kF32, p.shape),
                   .init = Gpt2InitRule(p.kind->init, model.layers)});
  }
  return out;
}

}  // namespace gptc::program
