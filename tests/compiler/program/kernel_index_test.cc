#include "compiler/program/kernel_index.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace gptc::program {
namespace {

using nlohmann::json;

TEST(KernelIndexTest, RecordsRoundTrip) {
  const KernelRecord ptx_only{.entry = "logits", .name = "k1", .ptx_offset = 10, .ptx_size = 20};
  const KernelRecord assembled{.entry = "train_step",
                               .name = "k2",
                               .ptx_offset = 30,
                               .ptx_size = 40,
                               .cubin = std::pair{int64_t{0}, int64_t{512}},
                               .registers = 44,
                               .spill_bytes = 8};
  // Without a cubin, no ptxas fields are written.
  EXPECT_FALSE(ToJson(ptx_only).contains("registers"));
  for (const KernelRecord& k : {ptx_only, assembled}) {
    StatusOr<KernelRecord> back = KernelRecordFromJson(json::parse(ToJson(k).dump()), "k");
    ASSERT_TRUE(back.ok()) << back.status().message();
    EXPECT_EQ(*back, k);
  }

  const HostKernelRecord host{.entry = "train_step",
                              .name = "k2",
                              .symbol = "gptc_k2",
                              .params = 5,
                              .uses_sync = true,
                              .host_shared_bytes = 1024,
                              .static_smem = 2048,
                              .registers = 44,
                              .barriers = 3,
                              .shuffles = 10,
                              .mmas = 0,
                              .ldmatrices = 0,
                              .atomics = 1,
                              .accesses = 12};
  StatusOr<HostKernelRecord> back = HostKernelRecordFromJson(ToJson(host), "h");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(*back, host);
}

// (The arrays are the manifest's: ManifestTest checks how their elements are named.)
TEST(KernelIndexTest, ErrorsNameTheRecordAndTheField) {
  json k = ToJson(KernelRecord{.entry = "e", .name = "k", .ptx_offset = 0, .ptx_size = 1});
  k["ptx_size"] = "1";
  EXPECT_EQ(KernelRecordFromJson(k, "manifest kernels[0]").status().message(),
            "manifest kernels[0].ptx_size has the wrong type (\"1\")");
  json h = ToJson(HostKernelRecord{.entry = "e", .name = "k", .symbol = "s"});
  h.erase("accesses");
  EXPECT_EQ(HostKernelRecordFromJson(h, "manifest.emu kernels[0]").status().message(),
            "manifest.emu kernels[0] has no 'accesses'");
}

}  // namespace
}  // namespace gptc::program
