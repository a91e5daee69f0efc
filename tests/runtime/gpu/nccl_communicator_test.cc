// The NCCL side of data parallelism (runtime/gpu/nccl_communicator.h,
// Note [bucketed all-reduce] in runtime/gpu/executor.h):
//   - CPU: the library search list and its error, the NCCL ABI against
//     nccl.h, the dtype/op mapping, the plan's buckets, and the refusal of a
//     --dp N artifact without a communicator (GpuTrainer::Create reaches it
//     before opening the device);
//   - GPU: a world-size-1 NCCL communicator's all-reduces (eager, grouped,
//     captured in a CUDA graph) and reduce-scatter and all-gather (grouped),
//     and the executor's bucketed run (eager and graph) with a fake
//     world-size-2 communicator.
#include "runtime/gpu/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>

#include "runtime/gpu/backend.h"
#include "runtime/gpu/device_buffer.h"
#include "runtime/gpu/executor.h"
#include "runtime/gpu/gpu_trainer.h"
#include "runtime/gpu/host_values.h"
#include "runtime/program_loader.h"
#include "tests/runtime/gpu/gpu_test_util.h"

#if __has_include(<nccl.h>)
#include <nccl.h>
// The ABI nccl_communicator.h declares by hand.
static_assert(gptc::rt::gpu::nccl::kSuccess == ncclSuccess);
static_assert(gptc::rt::gpu::nccl::kInProgress == ncclInProgress);
static_assert(gptc::rt::gpu::nccl::kFloat16 == ncclFloat16);
static_assert(gptc::rt::gpu::nccl::kFloat32 == ncclFloat32);
static_assert(gptc::rt::gpu::nccl::kBfloat16 == ncclBfloat16);
static_assert(gptc::rt::gpu::nccl::kSum == ncclSum);
static_assert(gptc::rt::gpu::nccl::kMax == ncclMax);
static_assert(sizeof(gptc::rt::gpu::nccl::UniqueId) == sizeof(ncclUniqueId));
#endif

namespace gptc::rt::gpu::testing {
namespace {

using nlohmann::json;

bool Contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

TEST(NcclLibraryTest, SearchListStartsWithTheOverrideAndTheLoaderPath) {
  setenv("GPTC_NCCL", "/my/libnccl.so.2", 1);
  std::vector<std::string> c = NcclCandidates();
  unsetenv("GPTC_NCCL");
  ASSERT_GE(c.size(), 3u);
  EXPECT_EQ(c[0], "/my/libnccl.so.2");
  EXPECT_EQ(c[1], "libnccl.so.2");
  EXPECT_EQ(c[2], "/usr/local/cuda/lib64/libnccl.so.2");
  for (size_t i = 3; i < c.size(); ++i) {
    EXPECT_NE(c[i].find("/nvidia/nccl/lib/libnccl.so.2"), std::string::npos) << c[i];
  }
  EXPECT_FALSE(Contains(NcclCandidates(), "/my/libnccl.so.2"));
}

TEST(NcclLibraryTest, NotFoundIsOneLineListingEveryPath) {
  StatusOr<NcclApi> api = LoadNccl({"/nowhere/libnccl.so.2", "/nor/here/libnccl.so.2"});
  ASSERT_FALSE(api.ok());
  EXPECT_EQ(api.status().message(),
            "NCCL not found: libnccl.so.2 could not be loaded from /nowhere/libnccl.so.2, "
            "/nor/here/libnccl.so.2 (install pip's nvidia-nccl-cu13 or the NCCL package, or set "
            "GPTC_NCCL=/path/to/libnccl.so.2)");
}

TEST(NcclLibraryTest, ALibraryWithoutTheSymbolsIsNamed) {
  StatusOr<NcclApi> api = LoadNccl({"libc.so.6"});
  ASSERT_FALSE(api.ok());
  EXPECT_EQ(api.status().message(),
            "libc.so.6 has no symbol ncclGetUniqueId (expected NCCL 2.10 or later)");
}

TEST(NcclLibraryTest, LoadsWhereInstalled) {
  StatusOr<const NcclApi*> api = GetNccl();
  if (!api.ok()) GTEST_SKIP() << api.status().message();
  EXPECT_FALSE((*api)->path.empty());
  // Needs no GPU: the error strings.
  EXPECT_NE((*api)->ErrorText(nccl::kSuccess).find("(ncclResult 0;"), std::string::npos);
}

TEST(NcclMappingTest, DTypesAndOps) {
  EXPECT_EQ(*NcclDataType(ir::DType::kF32), nccl::kFloat32);
  EXPECT_EQ(*NcclDataType(ir::DType::kBF16), nccl::kBfloat16);
  EXPECT_EQ(*NcclDataType(ir::DType::kF16), nccl::kFloat16);
  StatusOr<nccl::DataType> s32 = NcclDataType(ir::DType::kS32);
  ASSERT_FALSE(s32.ok());
  EXPECT_EQ(s32.status().message(),
            "NCCL collective: dtype s32 is not supported (f32, bf16, f16 are)");
  EXPECT_EQ(*NcclRedOp(ReduceOp::kSum), nccl::kSum);
  EXPECT_EQ(*NcclRedOp(ReduceOp::kMax), nccl::kMax);
}

// Copies in to out (the sum over one replica) while claiming `world` ranks,
// and counts the groups.
class FakeCommunicator : public Communicator {
 public:
  explicit FakeCommunicator(int world) : world_(world) {}
  int world_size() const override { return world_; }
  int rank() const override { return 0; }
  Status AllReduce(const void* in, void* out, int64_t count, ir::DType dtype, ReduceOp,
                   void* stream) override {
    if (!in_group_) return Error("all-reduce outside a group");
    ++all_reduces;
    if (in == out) return Status::Ok();
    return Cuda().Check(
        Cuda().MemcpyAsync(out, in, count * ir::DTypeBytes(dtype), cudaMemcpyDeviceToDevice,
                           static_cast<cudaStream_t>(stream)),
        "fake all-reduce");
  }
  Status GroupStart() override {
    in_group_ = true;
    ++groups;
    return Status::Ok();
  }
  Status GroupEnd() override {
    in_group_ = false;
    return Status::Ok();
  }
  int groups = 0, all_reduces = 0;

 private:
  int world_;
  bool in_group_ = false;
};

TEST(CommunicatorWorldTest, RefusesDataParallelArtifactsWithoutACommunicator) {
  EXPECT_TRUE(CheckCommunicatorWorld(1, nullptr, "a.gptx").ok());
  Status s = CheckCommunicatorWorld(4, nullptr, "a.gptx");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(),
            "a.gptx: compiled for --dp 4: run 4 ranks (mpirun/torchrun env) so that the GPU "
            "device gets an NCCL communicator, or recompile without --dp; alone, its "
            "all-reduces would be identities and it would train on gradients divided by 4");
  FakeCommunicator two(2);
  EXPECT_TRUE(CheckCommunicatorWorld(2, &two, "a.gptx").ok());
  s = CheckCommunicatorWorld(4, &two, "a.gptx");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "a.gptx: compiled for --dp 4, but the communicator has 2 ranks");
}

// GpuTrainer::Create checks the world size before touching the device, so
// this runs without a GPU.
TEST(CommunicatorWorldTest, GpuTrainerRefusesBeforeOpeningTheDevice) {
  std::string why;
  const Tiny* tiny = LoadTiny(&why);
  if (tiny == nullptr) GTEST_SKIP() << why;
  if (!tiny->artifact.manifest.complete) GTEST_SKIP() << "incomplete artifact";
  StatusOr<LoadedProgram> loaded = LoadProgram(tiny->artifact, tiny->path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  loaded->program.world_size = 2;  // as if compiled with --dp 2
  auto trainer = GpuTrainer::Create(tiny->artifact, tiny->path, &loaded->program, 0, {});
  ASSERT_FALSE(trainer.ok());
  EXPECT_EQ(trainer.status().message().rfind(tiny->path + ": compiled for --dp 2: run 2 ranks", 0),
            0u)
      << trainer.status().message();
}

json Slice(int64_t offset, int64_t size) { return {{"offset", offset}, {"size", size}}; }

// in0, in1 <- constants; out0, out1 <- all-reduces in one bucket; copy out0
// -> res (the first reader: wait_before 4). Slices of 256 bytes.
json BucketEntry() {
  json thunks = json::array();
  thunks.push_back({{"kind", "constant"},
                    {"name", "c0"},
                    {"dtype", "f32"},
                    {"values", {1, 2, 3, 4}},
                    {"dst", Slice(0, 16)}});
  thunks.push_back({{"kind", "constant"},
                    {"name", "c1"},
                    {"dtype", "bf16"},
                    {"values", {0.5, 1.5, -2, 8}},
                    {"dst", Slice(256, 8)}});
  thunks.push_back({{"kind", "all_reduce"},
                    {"name", "ar0"},
                    {"reduce", "sum"},
                    {"dtype", "f32"},
                    {"count", 4},
                    {"in", Slice(0, 16)},
                    {"out", Slice(512, 16)},
                    {"bucket", 0}});
  thunks.push_back({{"kind", "all_reduce"},
                    {"name", "ar1"},
                    {"reduce", "sum"},
                    {"dtype", "bf16"},
                    {"count", 4},
                    {"in", Slice(256, 8)},
                    {"out", Slice(256, 8)},
                    {"bucket", 0}});
  thunks.push_back({{"kind", "copy"},
                    {"name", "use"},
                    {"src", Slice(512, 16)},
                    {"dst", Slice(768, 16)},
                    {"bytes", 16}});
  json buckets = json::array(
      {{{"id", 0}, {"members", {2, 3}}, {"issue_after", 3}, {"wait_before", 4}, {"bytes", 24}}});
  return {{"name", "train_step"},     {"arena_size", 1024}, {"inputs", json::array()},
          {"outputs", json::array()}, {"thunks", thunks},   {"buckets", buckets}};
}

TEST(BucketPlanTest, ReadsBucketsAndRejectsInconsistentOnes) {
  StatusOr<EntryPlan> p = ReadEntryPlan(BucketEntry());
  ASSERT_TRUE(p.ok()) << p.status().message();
  ASSERT_EQ(p->buckets.size(), 1u);
  EXPECT_EQ(p->buckets[0].members, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(p->buckets[0].wait_before, 4);
  EXPECT_EQ(std::get<AllReduceThunk>(p->thunks[3].body).bucket, 0);
  json bad = BucketEntry();
  bad["buckets"][0]["issue_after"] = 2;
  p = ReadEntryPlan(bad);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().message(),
            "plan entry train_step bucket 0: members [2,3], issue_after 2, wait_before 4 are "
            "inconsistent (5 thunks)");
  bad = BucketEntry();
  bad["buckets"][0]["members"] = {1, 3};
  bad["buckets"][0]["issue_after"] = 3;
  p = ReadEntryPlan(bad);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().message(),
            "plan entry train_step bucket 0: member 1 is not an all_reduce thunk of this bucket");
  bad = BucketEntry();
  bad["buckets"] = json::array();
  p = ReadEntryPlan(bad);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().message(),
            "plan entry train_step: thunk 2 (all_reduce %ar0) names bucket 0, the entry has 0");
}

TEST(BucketExecutorTest, IssuesEachBucketAsOneGroupEagerAndInAGraph) {
  GPTC_SKIP_WITHOUT_GPU();
  StatusOr<EntryPlan> plan = ReadEntryPlan(BucketEntry());
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  DeviceBuffer arena;
  ASSERT_EQ(arena.Allocate(Cuda(), 1024), cudaSuccess);
  FakeCommunicator comm(2);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(Cuda().StreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  auto e = EntryExecutor::Create({.communicator = &comm}, *plan, static_cast<char*>(arena.ptr));
  ASSERT_TRUE(e.ok()) << e.status().message();
  ASSERT_TRUE((*e)->bucketed());
  auto check = [&](const char* what) {
    ASSERT_EQ(Cuda().StreamSynchronize(stream), cudaSuccess) << what;
    std::vector<char> host(1024);
    ASSERT_EQ(Cuda().Memcpy(host.data(), arena.ptr, 1024, cudaMemcpyDeviceToHost), cudaSuccess);
    float res[4];
    std::memcpy(res, host.data() + 768, 16);
    EXPECT_EQ(res[0], 1);
    EXPECT_EQ(res[3], 4) << what;
    EXPECT_EQ(std::string(host.data() + 256, 8),
              EncodeValues(ir::DType::kBF16, std::vector<double>{0.5, 1.5, -2, 8}))
        << what;
    ASSERT_EQ(Cuda().Memset(arena.ptr, 0, 1024), cudaSuccess);
  };
  ASSERT_TRUE((*e)->Run(stream).ok());
  check("eager");
  EXPECT_EQ(comm.groups, 1);
  EXPECT_EQ(comm.all_reduces, 2);
  Status captured = (*e)->Capture(stream);
  ASSERT_TRUE(captured.ok()) << captured.message();
  ASSERT_TRUE((*e)->Launch(stream).ok());
  check("graph");
  ASSERT_TRUE((*e)->Launch(stream).ok());
  check("graph, again");
  e->reset();
  Cuda().StreamDestroy(stream);
}

TEST(NcclCommunicatorTest, WorldSizeOneAllReducesEagerGroupedAndCaptured) {
  GPTC_SKIP_WITHOUT_GPU();
  StatusOr<const NcclApi*> api = GetNccl();
  if (!api.ok()) GTEST_SKIP() << api.status().message();
  // As gptrun makes it: the unique id over a (one-rank) rendezvous, init on GPU 0.
  StatusOr<std::unique_ptr<Rendezvous>> rdv = Rendezvous::Join(RendezvousOptions{});
  ASSERT_TRUE(rdv.ok()) << rdv.status().message();
  auto comm = CreateNcclCommunicator(**rdv, 0, 1, 0);
  ASSERT_TRUE(comm.ok()) << comm.status().message();
  cudaStream_t stream = nullptr;
  ASSERT_EQ(Cuda().StreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  std::vector<float> x = {1, -2, 3.5, 1e6};
  const std::string bf = EncodeValues(ir::DType::kBF16, std::vector<double>{0.5, 1.5, -2, 8});
  DeviceBuffer a, b, c;
  ASSERT_EQ(a.Allocate(Cuda(), 16), cudaSuccess);
  ASSERT_EQ(b.Allocate(Cuda(), 16), cudaSuccess);
  ASSERT_EQ(c.Allocate(Cuda(), 8), cudaSuccess);
  auto run = [&](bool capture) {
    ASSERT_EQ(Cuda().Memcpy(a.ptr, x.data(), 16, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(Cuda().Memset(b.ptr, 0, 16), cudaSuccess);
    ASSERT_EQ(Cuda().Memcpy(c.ptr, bf.data(), 8, cudaMemcpyHostToDevice), cudaSuccess);
    cudaGraph_t graph = nullptr;
    if (capture) {
      ASSERT_EQ(Cuda().StreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    }
    ASSERT_TRUE((*comm)->GroupStart().ok());
    Status s1 = (*comm)->AllReduce(a.ptr, b.ptr, 4, ir::DType::kF32, ReduceOp::kSum, stream);
    Status s2 = (*comm)->AllReduce(c.ptr, c.ptr, 4, ir::DType::kBF16, ReduceOp::kSum, stream);
    Status s3 = (*comm)->GroupEnd();
    ASSERT_TRUE(s1.ok()) << s1.message();
    ASSERT_TRUE(s2.ok()) << s2.message();
    ASSERT_TRUE(s3.ok()) << s3.message();
    if (capture) {
      ASSERT_EQ(Cuda().StreamEndCapture(stream, &graph), cudaSuccess);
      cudaGraphExec_t exec = nullptr;
      ASSERT_EQ(Cuda().GraphInstantiate(&exec, graph, 0), cudaSuccess);
      ASSERT_EQ(Cuda().GraphLaunch(exec, stream), cudaSuccess);
      ASSERT_EQ(Cuda().StreamSynchronize(stream), cudaSuccess);
      Cuda().GraphExecDestroy(exec);
      Cuda().GraphDestroy(graph);
    }
    ASSERT_EQ(Cuda().StreamSynchronize(stream), cudaSuccess);
    std::vector<float> got(4);
    std::string got_bf(8, '\0');
    ASSERT_EQ(Cuda().Memcpy(got.data(), b.ptr, 16, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(Cuda().Memcpy(got_bf.data(), c.ptr, 8, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(got, x);
    EXPECT_EQ(got_bf, bf);
  };
  run(false);
  run(true);
  EXPECT_TRUE((*comm)->AsyncError().ok());
  Status bad = (*comm)->AllReduce(a.ptr, b.ptr, 4, ir::DType::kS32, ReduceOp::kSum, stream);
  EXPECT_FALSE(bad.ok());
  comm->reset();
  Cuda().StreamDestroy(stream);
}

// ZeRO-1's collectives through NCCL with one rank (each the identity: the
// shard of a sum over one rank is the values, so is the gather), grouped as
// a bucket, eager: the symbols bind and the calls take their documented
// arguments (recvcount, sendcount).
TEST(NcclCommunicatorTest, WorldSizeOneReduceScatterAndAllGather) {
  GPTC_SKIP_WITHOUT_GPU();
  StatusOr<const NcclApi*> api = GetNccl();
  if (!api.ok()) GTEST_SKIP() << api.status().message();
  StatusOr<std::unique_ptr<Rendezvous>> rdv = Rendezvous::Join(RendezvousOptions{});
  ASSERT_TRUE(rdv.ok()) << rdv.status().message();
  auto comm = CreateNcclCommunicator(**rdv, 0, 1, 0);
  ASSERT_TRUE(comm.ok()) << comm.status().message();
  cudaStream_t stream = nullptr;
  ASSERT_EQ(Cuda().StreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  const std::vector<float> x = {1, -2, 3.5, 1e6};
  const std::string bf = EncodeValues(ir::DType::kBF16, std::vector<double>{0.5, 1.5, -2, 8});
  DeviceBuffer a, b, c, d;
  for (DeviceBuffer* buf : {&a, &b, &c, &d}) ASSERT_EQ(buf->Allocate(Cuda(), 16), cudaSuccess);
  ASSERT_EQ(Cuda().Memcpy(a.ptr, x.data(), 16, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(Cuda().Memcpy(c.ptr, bf.data(), 8, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_TRUE((*comm)->GroupStart().ok());
  Status s1 = (*comm)->ReduceScatter(a.ptr, b.ptr, 4, ir::DType::kF32, ReduceOp::kSum, stream);
  Status s2 = (*comm)->AllGather(c.ptr, d.ptr, 4, ir::DType::kBF16, stream);
  Status s3 = (*comm)->GroupEnd();
  ASSERT_TRUE(s1.ok()) << s1.message();
  ASSERT_TRUE(s2.ok()) << s2.message();
  ASSERT_TRUE(s3.ok()) << s3.message();
  ASSERT_EQ(Cuda().StreamSynchronize(stream), cudaSuccess);
  std::vector<float> got(4);
  std::string got_bf(8, '\0');
  ASSERT_EQ(Cuda().Memcpy(got.data(), b.ptr, 16, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(Cuda().Memcpy(got_bf.data(), d.ptr, 8, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(got, x);
  EXPECT_EQ(got_bf, bf);
  EXPECT_TRUE((*comm)->AsyncError().ok());
  comm->reset();
  Cuda().StreamDestroy(stream);
}

}  // namespace
}  // namespace gptc::rt::gpu::testing
