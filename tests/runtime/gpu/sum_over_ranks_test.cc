// Trainer::SumOverRanks on the GPU device (skipped without a GPU) and the
// emulated one: the values go to the device, through the communicator's
// all-reduce on the trainer's stream, and back. A test communicator of world
// size 1 (so that the tiny --dp 1 artifact loads) stands in for a second
// rank by adding that rank's values on the host. Two ranks in one process
// are not possible on the emulated device (one EmuDevice at a time);
// gptrun's --dp 2 tests run its ranks as processes.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "runtime/communicator.h"
#include "runtime/emu/emu_device.h"
#include "runtime/emu/emu_trainer.h"
#include "runtime/gpu/backend.h"
#include "runtime/gpu/communicator.h"
#include "runtime/gpu/gpu_trainer.h"
#include "tests/runtime/gpu/gpu_test_util.h"

namespace gptc::rt::gpu::testing {
namespace {

class SumOverRanksTest : public ::testing::TestWithParam<TestBackend> {};

// An all-reduce over this rank and a stand-in peer whose values are `peer`:
// it reads `in` back to the host, adds the peer's and writes `out`.
class PeerCommunicator : public Communicator {
 public:
  explicit PeerCommunicator(const RuntimeApi& cuda) : cuda_(cuda) {}
  int world_size() const override { return 1; }
  int rank() const override { return 0; }
  Status AllReduce(const void* in, void* out, int64_t count, ir::DType dtype, ReduceOp op,
                   void* stream) override {
    ++all_reduces;
    if (dtype != ir::DType::kF32 || op != ReduceOp::kSum || count > std::ssize(peer)) {
      return Error("peer: expected a sum of at most {} f32, got {} {}", peer.size(), count,
                   ir::DTypeName(dtype));
    }
    auto s = static_cast<cudaStream_t>(stream);
    std::vector<float> v(count);
    const size_t bytes = count * sizeof(float);
    RETURN_IF_ERROR(
        cuda_.Check(cuda_.MemcpyAsync(v.data(), in, bytes, cudaMemcpyDeviceToHost, s), "peer in"));
    RETURN_IF_ERROR(cuda_.Check(cuda_.StreamSynchronize(s), "peer in"));
    for (int64_t i = 0; i < count; ++i) v[i] += peer[i];
    RETURN_IF_ERROR(cuda_.Check(cuda_.MemcpyAsync(out, v.data(), bytes, cudaMemcpyHostToDevice, s),
                                "peer out"));
    return cuda_.Check(cuda_.StreamSynchronize(s), "peer out");  // v goes away
  }
  std::vector<float> peer;
  int all_reduces = 0;

 private:
  const RuntimeApi& cuda_;
};

// The tiny artifact (a test failure when it is missing); null with `why`
// when it is incomplete (the trainer cannot load it).
const Tiny* CompleteTinyOrSkip(std::string* why) {
  const Tiny* tiny = LoadTiny(why);
  EXPECT_NE(tiny, nullptr) << *why;
  if (tiny != nullptr && !tiny->artifact.manifest.complete) {
    *why = tiny->path + " is incomplete";
    return nullptr;
  }
  return tiny;
}

TEST_P(SumOverRanksTest, OneRankLeavesTheValues) {
  std::string why;
  const Tiny* tiny = CompleteTinyOrSkip(&why);
  if (tiny == nullptr) GTEST_SKIP() << why;
  GPTC_OPEN_TEST_DEVICE(device, {tiny});
  GpuOptions options;
  options.backend = &device->cuda_backend();
  StatusOr<std::unique_ptr<GpuTrainer>> trainer =
      GpuTrainer::Create(tiny->artifact, tiny->path, &tiny->loaded.program, 0, options);
  ASSERT_TRUE(trainer.ok()) << trainer.status().message();
  std::vector<double> values = {1, 2.5, 7};
  Status s = (*trainer)->SumOverRanks(values);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(values, (std::vector<double>{1, 2.5, 7}));
}

TEST_P(SumOverRanksTest, AddsThePeersValuesThroughTheCommunicator) {
  std::string why;
  const Tiny* tiny = CompleteTinyOrSkip(&why);
  if (tiny == nullptr) GTEST_SKIP() << why;
  GPTC_OPEN_TEST_DEVICE(device, {tiny});
  PeerCommunicator comm(*device->cuda_backend().runtime);
  GpuOptions options;
  options.backend = &device->cuda_backend();
  options.communicator = &comm;
  StatusOr<std::unique_ptr<GpuTrainer>> trainer =
      GpuTrainer::Create(tiny->artifact, tiny->path, &tiny->loaded.program, 0, options);
  ASSERT_TRUE(trainer.ok()) << trainer.status().message();
  comm.peer = {10, 20, 30};
  std::vector<double> values = {1, 2.5, 7};
  Status s = (*trainer)->SumOverRanks(values);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(values, (std::vector<double>{11, 22.5, 37}));
  EXPECT_EQ(comm.all_reduces, 1);
  // Longer than the first sum's buffer: it grows.
  std::vector<double> counts(1000), expected(1000);
  comm.peer.resize(1000);
  for (int i = 0; i < 1000; ++i) {
    counts[i] = i;
    comm.peer[i] = static_cast<float>(3 * i);
    expected[i] = 4 * i;
  }
  s = (*trainer)->SumOverRanks(counts);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(counts, expected);
  EXPECT_EQ(comm.all_reduces, 2);
}

INSTANTIATE_TEST_SUITE_P(Devices, SumOverRanksTest,
                         ::testing::Values(TestBackend::kEmu, TestBackend::kGpu),
                         [](const auto& info) { return TestBackendName(info.param); });

// gptrun --device emu's trainer, alone: no communicator, nothing to add.
TEST(EmuSumOverRanksTest, OneRankLeavesTheValues) {
  std::string why;
  const Tiny* tiny = CompleteTinyOrSkip(&why);
  if (tiny == nullptr) GTEST_SKIP() << why;
  StatusOr<std::unique_ptr<emu::EmuTrainer>> trainer =
      emu::EmuTrainer::Create(tiny->artifact, tiny->path, &tiny->loaded.program, 0, {});
  ASSERT_TRUE(trainer.ok()) << trainer.status().message();
  std::vector<double> values = {1, 2.5, 7};
  Status s = (*trainer)->SumOverRanks(values);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(values, (std::vector<double>{1, 2.5, 7}));
}

// Through the emulated device's own communicator (an NCCL stand-in over a
// host rank; here a group of one): the all-reduce runs outside any plan and
// its result lands before the copy back reads it (Note [in-flight
// all-reduces]); what lands is the values (a read before the landing would
// see the 0xff fill, NaN).
TEST(EmuSumOverRanksTest, GoesThroughTheEmulatedAllReduce) {
  std::string why;
  const Tiny* tiny = CompleteTinyOrSkip(&why);
  if (tiny == nullptr) GTEST_SKIP() << why;
  StatusOr<std::unique_ptr<emu::EmuDevice>> device =
      emu::EmuDevice::Create(tiny->artifact, tiny->path, {});
  ASSERT_TRUE(device.ok()) << device.status().message();
  ThreadGroup group(1);
  std::unique_ptr<Communicator> comm = (*device)->MakeCommunicator(&group.rank(0));
  GpuOptions options;
  options.backend = &(*device)->backend();
  options.communicator = comm.get();
  StatusOr<std::unique_ptr<GpuTrainer>> trainer =
      GpuTrainer::Create(tiny->artifact, tiny->path, &tiny->loaded.program, 0, options);
  ASSERT_TRUE(trainer.ok()) << trainer.status().message();
  const int64_t before = (*device)->stats().collectives;
  std::vector<double> values = {1, 2.5, 7};
  Status s = (*trainer)->SumOverRanks(values);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(values, (std::vector<double>{1, 2.5, 7}));
  EXPECT_EQ((*device)->stats().collectives, before + 1);
}

}  // namespace
}  // namespace gptc::rt::gpu::testing
