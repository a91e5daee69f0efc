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
  const json manifest{{"kernels", {ToJson(ptx_only), ToJson(assembled)}}};
  StatusOr<std::vector<KernelRecord>> back = KernelIndexFromJson(json::parse(manifest.dump()));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(*back, (std::vector<KernelRecord>{ptx_only, assembled}));

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
  StatusOr<std::vector<HostKernelRecord>> hosts =
      HostKernelIndexFromJson(json{{"kernels", {ToJson(host)}}}, "x.gptx");
  ASSERT_TRUE(hosts.ok()) << hosts.status().message();
  EXPECT_EQ(*hosts, std::vector<HostKernelRecord>{host});
}

TEST(KernelIndexTest, ErrorsNameTheRecordAndTheField) {
  EXPECT_EQ(KernelIndexFromJson(json::object()).status().message(),
            "manifest has no 'kernels' array");
  json k = ToJson(KernelRecord{.entry = "e", .name = "k", .ptx_offset = 0, .ptx_size = 1});
  k["ptx_size"] = "1";
  EXPECT_EQ(KernelIndexFromJson(json{{"kernels", {k}}}).status().message(),
            "manifest kernels[0].ptx_size has the wrong type (\"1\")");
  EXPECT_EQ(HostKernelIndexFromJson(json::object(), "x.gptx").status().message(),
            "x.gptx: manifest emu has no 'kernels'");
  json h = ToJson(HostKernelRecord{.entry = "e", .name = "k", .symbol = "s"});
  h.erase("accesses");
  EXPECT_EQ(HostKernelIndexFromJson(json{{"kernels", {h}}}, "x.gptx").status().message(),
            "x.gptx: manifest emu kernels[0] has no 'accesses'");
}

}  // namespace
}  // namespace gptc::program
