#include "compiler/program/param.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace gptc::program {
namespace {

using nlohmann::json;

std::string ErrorOf(const json& section) {
  StatusOr<std::vector<ParamSpec>> r = ParamsSectionFromJson(section);
  return r.ok() ? "ok" : r.status().message();
}

TEST(ParamsSectionTest, RoundTripsEveryInitRule) {
  const std::vector<ParamSpec> params = {
      {"wte.weight", ir::Shape(ir::DType::kF32, {50304, 768}), InitRule::Normal(0.02)},
      {"h.0.ln_1.weight", ir::Shape(ir::DType::kF32, {768}), InitRule::Ones()},
      {"h.0.ln_1.bias", ir::Shape(ir::DType::kF32, {768}), InitRule::Zeros()},
  };
  const json section = ParamsSectionJson(params);
  EXPECT_EQ(section["params"][0]["init"], json({{"kind", "normal"}, {"std", 0.02}}));
  EXPECT_EQ(section["params"][1]["dtype"], "f32");
  StatusOr<std::vector<ParamSpec>> back = ParamsSectionFromJson(section);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(*back, params);
  // Through the text the container stores, too.
  back = ParamsSectionFromJson(json::parse(section.dump(1)));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(*back, params);
}

TEST(ParamsSectionTest, ErrorsNameTheParameterAndTheField) {
  const json good = ParamsSectionJson({{"b", ir::Shape(ir::DType::kF32, {4}), InitRule::Zeros()}});
  EXPECT_EQ(ErrorOf(json::object()), "section 'params' has no 'params' array");
  json j = good;
  j["params"][0].erase("shape");
  EXPECT_EQ(ErrorOf(j), "params[0] has no 'shape'");
  j = good;
  j["params"][0]["dtype"] = "bf16";
  EXPECT_EQ(ErrorOf(j), "param b: dtype bf16, expected f32");
  j = good;
  j["params"][0].erase("init");
  EXPECT_EQ(ErrorOf(j), "param b has no init rule");
  j = good;
  j["params"][0]["init"] = {{"kind", "uniform"}};
  EXPECT_EQ(ErrorOf(j), "param b init: unknown init kind 'uniform'");
  j = good;
  j["params"][0]["init"] = {{"kind", "normal"}};
  EXPECT_EQ(ErrorOf(j), "param b init has no 'std'");
}

}  // namespace
}  // namespace gptc::program
