// The HTML report's data (tools/report/report_data.h) on gpt2-tiny artifacts
// against their plans, its log parser's bad inputs, the page's escaping,
// and `gptc report` / `gptrun --report` as processes. The page's script in a
// browser: tests/scripts/report_browser_test.sh.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "compiler/perf/scaling_model.h"
#include "compiler/program/plan.h"
#include "tests/testing/command.h"
#include "tools/report/report_data.h"
#include "tools/report/report_html.h"
#include "tools/report/step_scaling.h"

namespace gptc::tools::report {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::ReadAll;
using testing::RunCommand;

class ReportTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ =
        new fs::path(fs::path(::testing::TempDir()) / ("report_test_" + std::to_string(getpid())));
    fs::remove_all(*dir_);
    fs::create_directories(*dir_);
    for (const auto& [name, flags] :
         {std::pair{"tiny", "--emu"}, std::pair{"remat", "--emu --remat block:0,none:1"},
          std::pair{"nocodegen", "--no-codegen"}, std::pair{"accum", "--grad-accum 2"},
          std::pair{"auto", "--remat auto --memory-budget 76.5MiB"}}) {
      const testing::CommandResult r =
          RunCommand(std::string(GPTC_BIN) + " compile --model gpt2-tiny " + flags + " -o " +
                         (*dir_ / (std::string(name) + ".gptx")).string(),
                     *dir_);
      ASSERT_EQ(r.code, 0) << r.err;
    }
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }
  static program::Artifact Read(const std::string& name) {
    StatusOr<program::Artifact> a = program::ReadArtifact((*dir_ / (name + ".gptx")).string());
    EXPECT_TRUE(a.ok()) << a.status().message();
    return a.ok() ? std::move(a).value() : program::Artifact{};
  }
  static json Data(const program::Artifact& a, const json* profile = nullptr) {
    ReportInput in{.artifact = &a, .artifact_path = "tiny.gptx", .profile = profile};
    StatusOr<json> data = ReportData(in);
    EXPECT_TRUE(data.ok()) << data.status().message();
    return data.ok() ? *data : json();
  }
  static fs::path* dir_;
};
fs::path* ReportTest::dir_ = nullptr;

TEST_F(ReportTest, OneRowPerLaunchedThunkWithItsRoofline) {
  const program::Artifact a = Read("tiny");
  StatusOr<program::Plan> plan = program::PlanFromJson(a.plan);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  const program::EntryPlan& step = plan->entries.front();
  ASSERT_EQ(step.name(), "train_step");
  std::vector<const program::Thunk*> launched;
  for (const program::Thunk& t : step.thunks) {
    const auto* k = std::get_if<program::KernelThunk>(&t.body);
    if (t.kind() != program::ThunkKind::kConstant && !(k != nullptr && k->fallback)) {
      launched.push_back(&t);
    }
  }
  const json data = Data(a);
  const json& rows = data["artifact"]["thunks"];
  ASSERT_EQ(rows.size(), launched.size());
  double total_us = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i]["i"], launched[i]->index);
    EXPECT_EQ(rows[i]["name"], launched[i]->instruction());
    EXPECT_EQ(rows[i]["kernel"], launched[i]->name);
    if (launched[i]->kind() == program::ThunkKind::kGemm) {
      // Every gemm has its cost in the plan, and a gemm is never free.
      ASSERT_TRUE(launched[i]->cost.has_value()) << launched[i]->Describe();
      EXPECT_GT(launched[i]->cost->flops, 0);
      EXPECT_GT(rows[i]["roofline_us"].get<double>(), 0);
      EXPECT_EQ(rows[i]["fusion_kind"], "gemm");
    }
    EXPECT_TRUE(rows[i]["measured_us"].is_null());
    total_us += rows[i]["roofline_us"].get<double>();
  }
  // The groups partition the rows.
  double group_us = 0;
  int64_t group_thunks = 0;
  std::vector<std::string> names;
  for (const json& g : data["artifact"]["groups"]) {
    names.push_back(g["name"]);
    group_us += g["roofline_us"].get<double>();
    group_thunks += g["kernels"].get<int64_t>() + g["gemms"].get<int64_t>();
  }
  EXPECT_NEAR(group_us, total_us, 1e-9 * total_us);
  EXPECT_EQ(group_thunks, static_cast<int64_t>(rows.size()));
  EXPECT_EQ(names, (std::vector<std::string>{"embed", "layer 0", "parameters", "layer 1", "head",
                                             "optimizer"}));
}

TEST_F(ReportTest, TheH100ModelTimesEveryLaunchAndTheStep) {
  const program::Artifact a = Read("tiny");
  StatusOr<ModelTimes> model = ModelTimesOf(a);
  ASSERT_TRUE(model.ok()) << model.status().message();
  ReportInput in{.artifact = &a, .artifact_path = "tiny.gptx", .model = &*model};
  StatusOr<json> data = ReportData(in);
  ASSERT_TRUE(data.ok()) << data.status().message();
  double sum = 0;
  for (const json& row : (*data)["artifact"]["thunks"]) {
    if (row["kind"] != "kernel" && row["kind"] != "gemm") continue;
    ASSERT_TRUE(row["model_us"].is_number()) << row["name"];
    // No launch is faster than its launch gap or its FLOPs at peak.
    EXPECT_GE(row["model_us"].get<double>(), 2.0) << row["name"];
    EXPECT_GE(row["model_us"].get<double>(), row["flops"].get<double>() / 989e6) << row["name"];
    sum += row["model_us"].get<double>();
  }
  const json& m = (*data)["artifact"]["h100_model"];
  EXPECT_NEAR(m["step_us"].get<double>(), sum, 1e-6 * sum);
  EXPECT_NEAR(m["tokens_per_second"].get<double>(),
              a.manifest.flags.batch * a.manifest.flags.seq / (sum * 1e-6), 1.0);
  // Without the model the rows have no model time and the page no model.
  EXPECT_TRUE(Data(a)["artifact"]["h100_model"].is_null());
  // --no-codegen: nothing to time.
  EXPECT_FALSE(ModelTimesOf(Read("nocodegen")).ok());
}

TEST_F(ReportTest, ScalingRowsAreTheModelsOnTheSameStep) {
  const program::Artifact a = Read("tiny");
  StatusOr<ModelTimes> model = ModelTimesOf(a);
  ASSERT_TRUE(model.ok()) << model.status().message();
  ReportInput in{.artifact = &a, .artifact_path = "tiny.gptx", .model = &*model};
  StatusOr<json> data = ReportData(in);
  ASSERT_TRUE(data.ok()) << data.status().message();
  const json& s = (*data)["artifact"]["scaling"];
  ASSERT_TRUE(s.is_object()) << (*data)["artifact"]["scaling_note"];
  EXPECT_EQ(s["times"], "H100 model");
  // The step gptc simulate reads, through the same functions.
  StatusOr<program::Plan> plan = program::PlanFromJson(a.plan);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  StatusOr<const program::EntryPlan*> entry = TrainStepEntry(*plan, a, "tiny.gptx");
  ASSERT_TRUE(entry.ok()) << entry.status().message();
  StatusOr<perf::StepTimeline> step =
      TrainStepTimeline(a, "tiny.gptx", **entry, TimesFromModel(*model, **entry));
  ASSERT_TRUE(step.ok()) << step.status().message();
  EXPECT_DOUBLE_EQ(s["one_gpu"]["step_ms"].get<double>(), step->compute_us() / 1e3);
  EXPECT_DOUBLE_EQ(s["one_gpu"]["forward_ms"].get<double>() +
                       s["one_gpu"]["backward_ms"].get<double>() +
                       s["one_gpu"]["optimizer_ms"].get<double>(),
                   s["one_gpu"]["step_ms"].get<double>());
  EXPECT_EQ(s["link"]["gpus_per_node"], perf::LinkModel{}.gpus_per_node);
  const int64_t tokens = a.manifest.flags.batch * a.manifest.flags.seq;
  EXPECT_EQ(s["tokens"], tokens);
  ASSERT_EQ(s["tables"].size(), 2u);
  for (int zero : {0, 1}) {
    const json& rows = s["tables"][zero]["rows"];
    EXPECT_EQ(s["tables"][zero]["zero"], zero);
    ASSERT_EQ(rows.size(), std::size(perf::kScalingGpuCounts));
    for (size_t i = 0; i < rows.size(); ++i) {
      const int64_t n = perf::kScalingGpuCounts[i];
      const perf::ScalingRow want =
          perf::SimulateStep(*step, perf::LinkModel{}, {.gpus = n, .zero = zero});
      EXPECT_EQ(rows[i]["gpus"], n);
      EXPECT_DOUBLE_EQ(rows[i]["step_ms"].get<double>(), want.step_us / 1e3) << n;
      EXPECT_DOUBLE_EQ(rows[i]["exposed_ms"].get<double>(), want.exposed_us / 1e3) << n;
      EXPECT_DOUBLE_EQ(rows[i]["efficiency"].get<double>(), want.efficiency) << n;
      EXPECT_NEAR(rows[i]["tokens_per_second"].get<double>(),
                  static_cast<double>(n * tokens) / (want.step_us * 1e-6),
                  1e-9 * want.tokens_per_second)
          << n;
    }
  }
  EXPECT_DOUBLE_EQ(s["tables"][0]["rows"][0]["efficiency"].get<double>(), 1.0);
  // gptc simulate prints the same rows for the artifact.
  const testing::CommandResult r = RunCommand(
      std::string(GPTC_BIN) + " simulate " + (*dir_ / "tiny.gptx").string() + " --json", *dir_);
  ASSERT_EQ(r.code, 0) << r.err;
  const json simulated = json::parse(r.out);
  ASSERT_EQ(simulated["tables"].size(), 2u);
  for (int zero : {0, 1}) {
    EXPECT_EQ(simulated["tables"][zero]["rows"], s["tables"][zero]["rows"]) << zero;
  }
  EXPECT_EQ(simulated["link"], s["link"]);
  // Without times there is no prediction, and the data says why.
  const json none = Data(a)["artifact"];
  EXPECT_TRUE(none["scaling"].is_null());
  EXPECT_NE(none["scaling_note"].get<std::string>().find("no profile"), std::string::npos);
}

TEST_F(ReportTest, NoScalingForAStepItCannotTime) {
  const json nocodegen = Data(Read("nocodegen"))["artifact"];
  EXPECT_TRUE(nocodegen["scaling"].is_null());
  EXPECT_EQ(nocodegen["scaling_note"], "compiled with --no-codegen: no kernels to time");
  const json accum = Data(Read("accum"))["artifact"];
  EXPECT_TRUE(accum["scaling"].is_null());
  EXPECT_NE(accum["scaling_note"].get<std::string>().find("--grad-accum 2: no train_step entry"),
            std::string::npos)
      << accum["scaling_note"];
}

TEST_F(ReportTest, ArenaPeakHoldsTheParametersAndFitsTheArena) {
  const json data = Data(Read("tiny"));
  const json& arena = data["artifact"]["arena"];
  ASSERT_TRUE(arena.is_object());
  const int64_t size = arena["size"];
  const json& peak = arena["peak"];
  ASSERT_EQ(arena["live"].size(), arena["positions"].size());
  int64_t at_peak = 0, params = 0, largest = 0;
  for (int64_t b : arena["live"][peak["position"].get<size_t>()]) at_peak += b;
  EXPECT_EQ(at_peak, peak["bytes"].get<int64_t>());
  EXPECT_LE(at_peak, size);
  for (const json& live : arena["live"]) {
    int64_t total = 0;
    for (int64_t b : live) total += b;
    largest = std::max(largest, total);
  }
  EXPECT_EQ(largest, at_peak);
  int64_t listed = 0;
  for (const json& b : peak["buffers"]) {
    listed += b["bytes"].get<int64_t>();
    if (b["category"] == "parameters") params += b["bytes"].get<int64_t>();
    EXPECT_FALSE(b["shape"].get<std::string>().empty()) << b.dump();
  }
  EXPECT_EQ(listed, at_peak);
  // wte alone is 50304 x 64 f32.
  EXPECT_GE(params, 50304 * 64 * 4);
}

TEST_F(ReportTest, RematPerLayerFromThePlanPerBlock) {
  const json data = Data(Read("remat"));
  const json& layers = data["artifact"]["remat"]["layers"];
  ASSERT_EQ(layers.size(), 2u);
  EXPECT_EQ(layers[0]["policy"], "block");
  EXPECT_EQ(layers[1]["policy"], "none");
  EXPECT_GT(layers[0]["recomputed"].get<int64_t>(), 0);
  EXPECT_EQ(layers[1]["recomputed"].get<int64_t>(), 0);
  EXPECT_EQ(layers[0]["recomputed_names"].size(), layers[0]["recomputed"].get<size_t>());
  // Under none a layer keeps its activations for the backward; under block
  // it recomputes them from its input instead.
  EXPECT_GT(layers[1]["kept_bytes"].get<int64_t>(), layers[0]["kept_bytes"].get<int64_t>());
  int64_t listed = 0;
  for (const json& k : layers[1]["kept"]) listed += k["bytes"].get<int64_t>();
  EXPECT_EQ(listed, layers[1]["kept_bytes"].get<int64_t>());
}

TEST_F(ReportTest, RematPerLayerFromThePlanAutoChose) {
  const json data = Data(Read("auto"));
  const json& remat = data["artifact"]["remat"];
  EXPECT_EQ(remat["plan"], "auto: wide:0,none:1");
  ASSERT_EQ(remat["layers"].size(), 2u);
  EXPECT_EQ(remat["layers"][0]["policy"], "wide");
  EXPECT_EQ(remat["layers"][1]["policy"], "none");
}

// The page reads the plan's typed roles and the manifest's remat record
// (Note [plan roles]); an artifact written before them still gets its page,
// with "unknown" where they would be.
TEST_F(ReportTest, OlderArtifactWithoutRolesShowsUnknown) {
  program::Artifact a = Read("remat");
  for (json& e : a.plan["entries"]) {
    for (json& t : e["thunks"]) t.erase("role");
    for (json& b : e["buffers"]) b.erase("category");
  }
  a.manifest.flags.remat_layers.clear();
  const json data = Data(a);
  const json& rows = data["artifact"]["thunks"];
  ASSERT_FALSE(rows.empty());
  for (const json& r : rows) {
    EXPECT_EQ(r["group"], "unknown") << r;
    EXPECT_EQ(r["phase"], "unknown") << r;
    EXPECT_EQ(r["layer"], -1) << r;
  }
  ASSERT_EQ(data["artifact"]["groups"].size(), 1u);
  for (const json& b : data["artifact"]["arena"]["peak"]["buffers"]) {
    EXPECT_EQ(b["category"], "unknown") << b;
  }
  const json& layers = data["artifact"]["remat"]["layers"];
  ASSERT_EQ(layers.size(), 2u);
  EXPECT_EQ(layers[0]["policy"], "unknown");
  EXPECT_EQ(data["artifact"]["remat"]["plan"], "block:0,none:1");
}

TEST_F(ReportTest, NoCodegenArtifactHasNoPlanButAPage) {
  const json data = Data(Read("nocodegen"));
  EXPECT_FALSE(data["artifact"]["has_plan"].get<bool>());
  EXPECT_TRUE(data["artifact"]["thunks"].empty());
  EXPECT_EQ(data["artifact"]["remat"]["layers"].size(), 2u);  // the policies, without kernels
  EXPECT_NE(data["artifact"]["note"].get<std::string>().find("--no-codegen"), std::string::npos);
}

TEST_F(ReportTest, ProfileOfAnotherArtifactIsRefused) {
  const program::Artifact a = Read("tiny");
  json profile{{"format", "gptc-profile-1"},
               {"artifact", "other.gptx"},
               {"artifact_checksum", "0123456789abcdef"},
               {"rows", json::array()}};
  Status s = CheckProfile(profile, a, "p.json", "tiny.gptx");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("p.json: measured on another artifact (other.gptx"), std::string::npos)
      << s.message();
  EXPECT_FALSE(CheckProfile(json{{"format", "x"}}, a, "p.json", "tiny.gptx").ok());
  profile["artifact_checksum"] = fmt::format("{:016x}", a.checksum);
  EXPECT_TRUE(CheckProfile(profile, a, "p.json", "tiny.gptx").ok());
}

TEST_F(ReportTest, ProfileTimesGoToTheirThunks) {
  const program::Artifact a = Read("tiny");
  const json first = Data(a)["artifact"]["thunks"][0];
  json profile{{"format", "gptc-profile-1"},
               {"artifact_checksum", fmt::format("{:016x}", a.checksum)},
               {"steps", 3},
               {"emulated", true},
               {"rows",
                {{{"kind", first["kind"]},
                  {"name", first["kernel"]},
                  {"ms_per_step", 0.5},
                  {"calls_per_step", 2.0}}}}};
  const json data = Data(a, &profile);
  EXPECT_DOUBLE_EQ(data["artifact"]["thunks"][0]["measured_us"].get<double>(), 250.0);
  EXPECT_TRUE(data["artifact"]["profile"]["emulated"].get<bool>());
  // The scaling view times the step by the profile; its other thunks have no row.
  const std::string times = data["artifact"]["scaling"]["times"];
  EXPECT_EQ(times.rfind("measured (this run, 3 steps on ?); ", 0), 0u) << times;
  EXPECT_NE(times.find("thunks unmeasured, timed 0"), std::string::npos) << times;
}

TEST(RunLogTest, StepsAndValidationsNonFiniteAsNull) {
  std::vector<std::string> warnings;
  StatusOr<RunLog> log = ParseRunLog(
      "{\"event\":\"step\",\"step\":1,\"loss\":10.5,\"lr\":0.001,\"norm\":2,\"ms\":5,"
      "\"tok_s\":100,\"mfu\":null}\n"
      "{\"event\":\"sample\",\"step\":1,\"text\":\"hi\"}\n"
      "{\"event\":\"step\",\"step\":2,\"loss\":null}\n"
      "{\"event\":\"val\",\"step\":2,\"val_loss\":9.5}\n",
      "run.jsonl", warnings);
  ASSERT_TRUE(log.ok()) << log.status().message();
  EXPECT_TRUE(warnings.empty());
  ASSERT_EQ(log->steps.size(), 2u);
  EXPECT_EQ(log->steps[0]["loss"], 10.5);
  EXPECT_TRUE(log->steps[0]["mfu"].is_null());
  EXPECT_TRUE(log->steps[1]["loss"].is_null());
  ASSERT_EQ(log->val.size(), 1u);
  EXPECT_EQ(log->val[0]["val_loss"], 9.5);
}

TEST(RunLogTest, HellaSwagEventsBecomeTheRunsAccuracies) {
  std::vector<std::string> warnings;
  StatusOr<RunLog> log = ParseRunLog(
      "{\"event\":\"hellaswag\",\"step\":100,\"acc\":0.25,\"acc_norm\":0.3,"
      "\"examples\":48,\"acc_interval\":[0.1,0.4]}\n"
      "{\"event\":\"hellaswag\",\"step\":200,\"acc\":0.5,\"acc_norm\":null,"
      "\"examples\":48}\n",
      "run.jsonl", warnings);
  ASSERT_TRUE(log.ok()) << log.status().message();
  ASSERT_EQ(log->hellaswag.size(), 2u);
  EXPECT_EQ(log->hellaswag[0],
            (json{{"step", 100}, {"acc", 0.25}, {"acc_norm", 0.3}, {"examples", 48}}));
  EXPECT_TRUE(log->hellaswag[1]["acc_norm"].is_null());
  EXPECT_TRUE(log->steps.empty() && log->val.empty());
}

TEST(RunLogTest, LastLineCutShortIsSkippedWithAWarning) {
  std::vector<std::string> warnings;
  StatusOr<RunLog> log =
      ParseRunLog("{\"event\":\"step\",\"step\":1,\"loss\":10.5}\n{\"event\":\"step\",\"st",
                  "run.jsonl", warnings);
  ASSERT_TRUE(log.ok()) << log.status().message();
  EXPECT_EQ(log->steps.size(), 1u);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0], "run.jsonl:2: last line cut short (a run still writing?): skipped");
}

TEST(RunLogTest, MalformedLineBeforeTheLastIsAnError) {
  std::vector<std::string> warnings;
  StatusOr<RunLog> log =
      ParseRunLog("{\"event\":\"step\",\"step\":1}\nnot json\n{}\n", "run.jsonl", warnings);
  ASSERT_FALSE(log.ok());
  EXPECT_EQ(log.status().message(), "run.jsonl:2: not a JSON object (is it a gptrun --log file?)");
}

TEST(RunLogTest, EmptyLogWarns) {
  std::vector<std::string> warnings;
  StatusOr<RunLog> log = ParseRunLog("", "empty.jsonl", warnings);
  ASSERT_TRUE(log.ok());
  EXPECT_TRUE(log->steps.empty());
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0], "empty.jsonl: empty log: no steps to draw");
}

TEST(ReportHtmlTest, DataCannotEndItsScriptElement) {
  const std::string html = RenderReportHtml(json{{"title", "<b>&"},
                                                 {"notes", {"</script><script>alert(1)</script>"}},
                                                 {"runs", json::array()}});
  EXPECT_NE(html.find("<title>&lt;b&gt;&amp;</title>"), std::string::npos);
  EXPECT_EQ(html.find("</script><script>alert"), std::string::npos);
  EXPECT_NE(html.find("\\u003c/script>"), std::string::npos);
  for (const char* external : {"http", "src=", "href=", "url(", "@import"}) {
    EXPECT_EQ(html.find(external), std::string::npos) << external;
  }
}

TEST_F(ReportTest, GptcReportWritesThePageAndRefusesBadInput) {
  const std::string gptc = GPTC_BIN;
  const std::string page = (*dir_ / "report.html").string();
  testing::CommandResult r =
      RunCommand(gptc + " report " + (*dir_ / "tiny.gptx").string() + " -o " + page, *dir_);
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string html = ReadAll(page);
  EXPECT_NE(html.find("\"format\":\"gptc-report-1\""), std::string::npos);
  EXPECT_LT(html.size(), 3u << 20);

  r = RunCommand(gptc + " report -o " + page, *dir_);
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "gptc: report: give an artifact, a --log, or both\n");
  r = RunCommand(gptc + " report --log /nonexistent.jsonl -o " + page, *dir_);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("/nonexistent.jsonl"), std::string::npos) << r.err;
  r = RunCommand(gptc + " report " + (*dir_ / "tiny.gptx").string() + " --gpu v100 -o " + page,
                 *dir_);
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "gptc: --gpu must be h100, h200 or a100, got 'v100'\n");
}

TEST_F(ReportTest, GptrunReportHoldsTheRunsSteps) {
  const std::string page = (*dir_ / "run.html").string();
  const testing::CommandResult r =
      RunCommand(std::string(GPTRUN_BIN) + " " + (*dir_ / "tiny.gptx").string() +
                     " --device cpu --bench --steps 3 --report " + page,
                 *dir_);
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string html = ReadAll(page);
  const size_t begin = html.find("type=\"application/json\">");
  ASSERT_NE(begin, std::string::npos);
  const size_t start = begin + std::string("type=\"application/json\">").size();
  const json data = json::parse(html.substr(start, html.find("</script>", start) - start));
  EXPECT_EQ(data["generated_by"], "gptrun --report");
  ASSERT_EQ(data["runs"].size(), 1u);
  EXPECT_EQ(data["runs"][0]["steps"].size(), 3u);
  EXPECT_FALSE(data["artifact"]["thunks"].empty());
}

}  // namespace
}  // namespace gptc::tools::report
