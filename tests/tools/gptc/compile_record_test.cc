// Note [compile record] (tools/common/compile_record.h): what gptc writes,
// gptrun reads back field for field; a record of another format, or one
// missing a field, is an error naming it.
#include "tools/common/compile_record.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace gptc::tools {
namespace {

CompileRecord Sample() {
  CompileRecord r;
  r.artifact = "/cache/gptc/0123.gptx";
  r.cache = CacheUse::kStored;
  r.temporary = false;
  r.output = "out.gptx";
  r.target = "sm_90a";
  r.flags = {.batch = 8,
             .seq = 64,
             .grad_accum = 8,
             .world_size = 2,
             .precision = "bf16",
             .remat = "auto: none:0-1",
             .codegen = false,
             .attention_mma = "wgmma"};
  r.summary = "compiled gpt2-tiny train step (2 layers, ...)";
  r.note = "note: --no-codegen: no kernels";
  r.seconds = 1.25;
  r.warnings = {"not cached: compile cache /x: denied"};
  return r;
}

TEST(CompileRecordTest, ReadsBackWhatItWrites) {
  const CompileRecord r = Sample();
  const std::string text = FormatCompileRecord(r);
  EXPECT_EQ(text.find('\n'), std::string::npos) << text;
  StatusOr<CompileRecord> back = ParseCompileRecord(text);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->artifact, r.artifact);
  EXPECT_EQ(back->cache, CacheUse::kStored);
  EXPECT_EQ(back->temporary, r.temporary);
  EXPECT_EQ(back->output, r.output);
  EXPECT_EQ(back->target, r.target);
  EXPECT_EQ(back->flags, r.flags);
  EXPECT_EQ(back->summary, r.summary);
  EXPECT_EQ(back->note, r.note);
  EXPECT_EQ(back->seconds, r.seconds);
  EXPECT_EQ(back->warnings, r.warnings);
  EXPECT_EQ(nlohmann::json::parse(text)["format"], "gptc-compile-1");
}

TEST(CompileRecordTest, EveryCacheUseRoundTrips) {
  for (CacheUse use : {CacheUse::kReused, CacheUse::kStored, CacheUse::kNone}) {
    EXPECT_EQ(ParseCacheUse(CacheUseName(use)), use);
  }
  EXPECT_EQ(ParseCacheUse("hit"), std::nullopt);
}

TEST(CompileRecordTest, ErrorsNameTheField) {
  nlohmann::json j = nlohmann::json::parse(FormatCompileRecord(Sample()));
  EXPECT_EQ(ParseCompileRecord("compiled gpt2-tiny").status().message(),
            "gptc compile record: not JSON");
  nlohmann::json other = j;
  other["format"] = "gptc-compile-0";
  EXPECT_EQ(ParseCompileRecord(other.dump()).status().message(),
            "gptc compile record: format 'gptc-compile-0', expected 'gptc-compile-1'");
  nlohmann::json missing = j;
  missing.erase("artifact");
  EXPECT_EQ(ParseCompileRecord(missing.dump()).status().message(),
            "gptc compile record has no 'artifact'");
  nlohmann::json cache = j;
  cache["cache"] = "hit";
  EXPECT_EQ(ParseCompileRecord(cache.dump()).status().message(),
            "gptc compile record: cache 'hit' is not reused, stored or none");
  nlohmann::json flags = j;
  flags["flags"].erase("batch");
  EXPECT_FALSE(ParseCompileRecord(flags.dump()).ok());
}

}  // namespace
}  // namespace gptc::tools
