// Note [ZeRO-1 state on the GPU] (runtime/gpu/gpu_trainer_state.cc): the
// trainer's refusal of a plan whose state slots are not ZeRO-1's. (The shard
// arithmetic: tests/compiler/program/rank_state_test.cc.)
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "runtime/communicator.h"
#include "runtime/emu/emu_device.h"
#include "runtime/gpu/gpu_trainer.h"
#include "runtime/program_loader.h"
#include "tests/runtime/gpu/gpu_test_util.h"

namespace gptc::rt::gpu::testing {
namespace {

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
