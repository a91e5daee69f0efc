// Note [ZeRO-1 state on the GPU] (runtime/gpu/gpu_trainer_state.cc): the
// shards the GPU trainer uploads and the whole values it rebuilds, and its
// refusal of a plan whose state slots are not ZeRO-1's.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "runtime/communicator.h"
#include "runtime/emu/emu_device.h"
#include "runtime/gpu/gpu_trainer.h"
#include "runtime/gpu/zero_shards.h"
#include "runtime/program_loader.h"
#include "tests/runtime/gpu/gpu_test_util.h"

namespace gptc::rt::gpu::testing {
namespace {

// Note [ZeRO-1 shards]: n = 5 over 2 ranks is s = 3, rank 1's last element
// the padding; over 4 ranks s = 2 and rank 3 holds padding only.
TEST(ZeroShardsTest, CutsContiguousZeroPaddedShards) {
  const std::vector<float> v = {1, 2, 3, 4, 5};
  EXPECT_EQ(ShardOf(v, 0, 2), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(ShardOf(v, 1, 2), (std::vector<float>{4, 5, 0}));
  EXPECT_EQ(ShardOf(v, 2, 4), (std::vector<float>{5, 0}));
  EXPECT_EQ(ShardOf(v, 3, 4), (std::vector<float>{0, 0}));
  EXPECT_EQ(ShardOf(v, 0, 1), v);
}

TEST(ZeroShardsTest, TheGatheredShardsLessThePaddingAreTheValues) {
  const std::vector<float> v = {1, 2, 3, 4, 5, 6, 7};
  for (int64_t world : {1, 2, 3, 4, 8}) {
    std::vector<float> gathered;
    for (int64_t r = 0; r < world; ++r) {
      const std::vector<float> shard = ShardOf(v, r, world);
      gathered.insert(gathered.end(), shard.begin(), shard.end());
    }
    EXPECT_EQ(Unshard(gathered, 7), v) << world;
  }
}

// The tiny artifact's whole adam_m slots, read as if compiled with --zero 1
// for two ranks: the trainer names the slot and the shard it needs.
TEST(ZeroStateTest, APlanWithoutShardedSlotsIsRefusedNamingTheSlot) {
  std::string why;
  const Tiny* tiny = LoadTiny(&why);
  if (tiny == nullptr) GTEST_SKIP() << why;
  if (!tiny->artifact.manifest.complete) GTEST_SKIP() << "incomplete artifact";
  StatusOr<LoadedProgram> loaded = LoadProgram(tiny->artifact, tiny->path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  loaded->program.world_size = 2;
  loaded->program.zero_stage = 1;
  StatusOr<std::unique_ptr<emu::EmuDevice>> device =
      emu::EmuDevice::Create(tiny->artifact, tiny->path, {});
  ASSERT_TRUE(device.ok()) << device.status().message();
  ThreadGroup group(2);  // never called: the trainer refuses before any collective
  std::unique_ptr<Communicator> comm = (*device)->MakeCommunicator(&group.rank(0));
  GpuOptions options;
  options.backend = &(*device)->backend();
  options.communicator = comm.get();
  auto trainer = GpuTrainer::Create(tiny->artifact, tiny->path, &loaded->program, 0, options);
  ASSERT_FALSE(trainer.ok());
  const program::ParamSpec& first = loaded->program.params[0];
  const int64_t s = (first.shape.num_elements() + 1) / 2;
  EXPECT_EQ(trainer.status().message(),
            fmt::format("{}: input adam_m of {} is {}, the state needs f32[{}]", tiny->path,
                        first.name, first.shape.ToString(), s));
}

}  // namespace
}  // namespace gptc::rt::gpu::testing
