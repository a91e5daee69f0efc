// ZeRO-1's collectives on the emulated device (Note [in-flight all-reduces]
// in runtime/emu/emu_ops.cc, Note [bucketed all-reduce] in
// runtime/gpu/executor.h): a plan of reduce-scatters and all-gathers (f32
// and bf16), each in a bucket of its own on the communication stream, run
// by the executor on two emulated ranks (two processes, one emulated device
// each, over TCP) equals the CPU evaluator's result bit for bit; and plans
// with a seeded defect (a bucket's wait after a reader of its result, a
// write into an operand in flight) are caught in one line naming the thunk.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "compiler/eval/evaluator.h"
#include "compiler/ir/parser.h"
#include "runtime/communicator.h"
#include "runtime/emu/emu_device.h"
#include "runtime/gpu/backend.h"
#include "runtime/gpu/executor.h"
#include "runtime/gpu/host_values.h"
#include "runtime/gpu/plan_reader.h"
#include "runtime/rendezvous.h"
#include "tests/runtime/gpu/gpu_test_util.h"

namespace gptc::rt::gpu::testing {
namespace {

using json = nlohmann::json;

// The program: its collectives bucketed as the combiner does (one opcode a
// bucket, numbered in order), each reader a copy (no kernels needed).
constexpr char kProgram[] = R"(module zero_collectives
ENTRY %main {
  %x = f32[8] parameter(0)
  %y = bf16[4] parameter(1)
  %s = f32[4] reduce-scatter(%x), kind=sum, replicas=2, bucket=0
  %c = f32[4] copy(%s)
  %g = f32[8] all-gather(%c), replicas=2, bucket=1
  %d = f32[8] copy(%g)
  %sb = bf16[2] reduce-scatter(%y), kind=sum, replicas=2, bucket=2
  %gb = bf16[4] all-gather(%sb), replicas=2, bucket=3
  ROOT %out = (f32[4], f32[8], bf16[2], bf16[4]) tuple(%c, %d, %sb, %gb)
}
)";

// Where each value of kProgram lives in the arena (256-byte aligned).
constexpr int64_t kX = 0, kY = 256, kS = 512, kC = 768, kG = 1024, kD = 1280, kSb = 1536,
                  kGb = 1792, kArena = 2048;

json Slice(int64_t offset, int64_t size) { return {{"offset", offset}, {"size", size}}; }

json Collective(const char* name, const char* op, const char* dtype, int64_t count, json in,
                json out, int64_t bucket) {
  return {{"kind", "all_reduce"}, {"collective", op}, {"name", name}, {"reduce", "sum"},
          {"dtype", dtype},       {"count", count},   {"in", in},     {"out", out},
          {"bucket", bucket}};
}

json Copy(const char* name, json src, json dst, int64_t bytes) {
  return {{"kind", "copy"}, {"name", name}, {"src", src}, {"dst", dst}, {"bytes", bytes}};
}

json Bucket(int64_t id, int64_t member, int64_t wait_before, int64_t bytes) {
  return {{"id", id},
          {"members", {member}},
          {"issue_after", member},
          {"wait_before", wait_before},
          {"bytes", bytes}};
}

json SlotJson(const char* name, const char* shape, json slice) {
  slice["role"] = "data";
  slice["index"] = -1;
  slice["name"] = name;
  slice["shape"] = shape;
  return slice;
}

// kProgram's plan as compiler/artifact/plan.cc lays it out (thunks in
// schedule order; each bucket waited for before the first thunk reading a
// member's result: tests/compiler/artifact/bucket_plan_test.cc).
json Plan() {
  json thunks = json::array({
      Collective("s", "reduce_scatter", "f32", 4, Slice(kX, 32), Slice(kS, 16), 0),
      Copy("c", Slice(kS, 16), Slice(kC, 16), 16),
      Collective("g", "all_gather", "f32", 4, Slice(kC, 16), Slice(kG, 32), 1),
      Copy("d", Slice(kG, 32), Slice(kD, 32), 32),
      Collective("sb", "reduce_scatter", "bf16", 2, Slice(kY, 8), Slice(kSb, 4), 2),
      Collective("gb", "all_gather", "bf16", 2, Slice(kSb, 4), Slice(kGb, 8), 3),
  });
  json buckets = json::array(
      {Bucket(0, 0, 1, 32), Bucket(1, 2, 3, 16), Bucket(2, 4, 5, 8), Bucket(3, 5, 6, 4)});
  json inputs =
      json::array({SlotJson("x", "f32[8]", Slice(kX, 32)), SlotJson("y", "bf16[4]", Slice(kY, 8))});
  json outputs = json::array(
      {SlotJson("c", "f32[4]", Slice(kC, 16)), SlotJson("d", "f32[8]", Slice(kD, 32)),
       SlotJson("sb", "bf16[2]", Slice(kSb, 4)), SlotJson("gb", "bf16[4]", Slice(kGb, 8))});
  return {{"name", "train_step"}, {"arena_size", kArena}, {"inputs", inputs},
          {"outputs", outputs},   {"thunks", thunks},     {"buckets", buckets}};
}

// Rank r's inputs: values whose rank-order sums round in bf16.
std::vector<eval::Literal> Inputs(int64_t rank) {
  std::vector<double> x(8), y(4);
  for (int i = 0; i < 8; ++i) x[i] = 0.1 * (i + 1) * (rank + 1) + 1e-3 * rank;
  for (int i = 0; i < 4; ++i) y[i] = 1.0 / (3 + i + rank);
  std::vector<double> yb = DecodeValues(ir::DType::kBF16, EncodeValues(ir::DType::kBF16, y));
  return {eval::Literal{ir::Shape(ir::DType::kF32, {8}), x, {}},
          eval::Literal{ir::Shape(ir::DType::kBF16, {4}), yb, {}}};
}

// Each output's bytes, as the evaluator computes them for rank `comm.rank()`.
StatusOr<std::vector<std::string>> Reference(rt::Communicator& comm) {
  ASSIGN_OR_RETURN(std::unique_ptr<ir::Module> module,
                   ir::ParseAndVerifyModule(kProgram, "<test>"));
  const std::vector<eval::Literal> args = Inputs(comm.rank());
  ASSIGN_OR_RETURN(eval::Literal out, eval::Evaluate(*module, args, {.collective = &comm}));
  std::vector<std::string> bytes;
  for (const eval::Literal& e : out.elements) {
    bytes.push_back(EncodeValues(e.shape.dtype(), e.values));
  }
  return bytes;
}

// Runs `plan` on a fresh emulated device as rank `host.rank()` of `host`'s
// group; each output's bytes.
StatusOr<std::vector<std::string>> RunEmulated(const Tiny& tiny, const json& plan_json,
                                               rt::Communicator& host) {
  ASSIGN_OR_RETURN(EntryPlan plan, ReadEntryPlan(plan_json));
  ASSIGN_OR_RETURN(std::unique_ptr<emu::EmuDevice> device,
                   emu::EmuDevice::Create(tiny.artifact, tiny.path, {}));
  std::unique_ptr<gpu::Communicator> comm = device->MakeCommunicator(&host);
  const RuntimeApi& cuda = *device->backend().runtime;
  void* arena = nullptr;
  RETURN_IF_ERROR(cuda.Check(cuda.Malloc(&arena, kArena), "cudaMalloc"));
  cudaStream_t stream = nullptr;
  RETURN_IF_ERROR(cuda.Check(cuda.StreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream"));
  std::vector<std::string> outputs;
  Status run = [&]() -> Status {
    ASSIGN_OR_RETURN(
        std::unique_ptr<EntryExecutor> e,
        EntryExecutor::Create(
            {.backend = &device->backend(), .stream = stream, .communicator = comm.get()}, plan,
            static_cast<char*>(arena)));
    if (!e->bucketed()) return Error("the executor issues no buckets");
    const std::vector<eval::Literal> args = Inputs(host.rank());
    for (size_t i = 0; i < args.size(); ++i) {
      const std::string bytes = EncodeValues(args[i].shape.dtype(), args[i].values);
      char* at = static_cast<char*>(arena) + plan.inputs[i].slice.offset;
      RETURN_IF_ERROR(cuda.Check(
          cuda.MemcpyAsync(at, bytes.data(), bytes.size(), cudaMemcpyHostToDevice, stream),
          "upload"));
    }
    RETURN_IF_ERROR(e->Run(stream));
    RETURN_IF_ERROR(cuda.Check(cuda.StreamSynchronize(stream), "cudaStreamSynchronize"));
    for (const PlanSlot& o : plan.outputs) {
      std::string bytes(o.slice.size, '\0');
      RETURN_IF_ERROR(
          cuda.Check(cuda.MemcpyAsync(bytes.data(), static_cast<char*>(arena) + o.slice.offset,
                                      bytes.size(), cudaMemcpyDeviceToHost, stream),
                     "download"));
      RETURN_IF_ERROR(cuda.Check(cuda.StreamSynchronize(stream), "cudaStreamSynchronize"));
      outputs.push_back(std::move(bytes));
    }
    return Status::Ok();
  }();
  cuda.StreamDestroy(stream);
  cuda.Free(arena);
  if (!run.ok()) {
    host.Abort(run);
    return run;
  }
  return outputs;
}

const Tiny* TinyOrSkip(std::string* why) {
  const Tiny* tiny = LoadTiny(why);
  if (tiny != nullptr && !tiny->artifact.manifest.complete) {
    *why = tiny->path + " is incomplete";
    return nullptr;
  }
  return tiny;
}

// Rank 1 in a child process (its own emulated device), rank 0 here, over
// the rendezvous' TCP connections; the child reports its outputs through a
// pipe as one line of JSON, or an error.
TEST(EmuCollectivesTest, TwoEmulatedRanksEqualTheEvaluatorBitForBit) {
  std::string why;
  const Tiny* tiny = TinyOrSkip(&why);
  if (tiny == nullptr) GTEST_SKIP() << why;
  // The evaluator's two ranks, as threads.
  std::vector<std::vector<std::string>> reference(2);
  ThreadGroup group(2);
  std::vector<Status> evaluated =
      RunRanksAsThreads(group, [&](int64_t rank, rt::Communicator& comm) {
        ASSIGN_OR_RETURN(reference[rank], Reference(comm));
        return Status::Ok();
      });
  for (const Status& s : evaluated) ASSERT_TRUE(s.ok()) << s.message();

  RendezvousOptions options{.master_port = 20000 + static_cast<int>(getpid() % 20000),
                            .world_size = 2,
                            .timeout = std::chrono::seconds(60),
                            .progress_interval = std::chrono::milliseconds(0)};
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  const int64_t rank = child == 0 ? 1 : 0;
  options.rank = rank;
  auto run = [&]() -> StatusOr<std::vector<std::string>> {
    ASSIGN_OR_RETURN(std::unique_ptr<Rendezvous> rdv, Rendezvous::Join(options));
    std::unique_ptr<rt::Communicator> host = MakeTcpCommunicator(std::move(rdv));
    return RunEmulated(*tiny, Plan(), *host);
  };
  StatusOr<std::vector<std::string>> got = run();
  if (child == 0) {
    close(pipe_fds[0]);
    json report = got.ok() ? json{{"outputs", json::array()}}
                           : json{{"error", std::string(got.status().message())}};
    if (got.ok()) {
      for (const std::string& b : *got) {
        report["outputs"].push_back(std::vector<uint8_t>(b.begin(), b.end()));
      }
    }
    const std::string line = report.dump() + "\n";
    const bool written = write(pipe_fds[1], line.data(), line.size()) == std::ssize(line);
    close(pipe_fds[1]);
    _exit(written ? 0 : 1);
  }
  close(pipe_fds[1]);
  std::string line;
  char buf[4096];
  for (ssize_t n; (n = read(pipe_fds[0], buf, sizeof(buf))) > 0;) line.append(buf, n);
  close(pipe_fds[0]);
  int wstatus = 0;
  ASSERT_EQ(waitpid(child, &wstatus, 0), child);
  EXPECT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0);
  ASSERT_TRUE(got.ok()) << "rank 0: " << got.status().message();
  const json report = json::parse(line, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(report.is_object()) << "rank 1 reported: " << line;
  ASSERT_FALSE(report.contains("error")) << "rank 1: " << report["error"].get<std::string>();
  std::vector<std::string> rank1;
  for (const json& b : report["outputs"]) {
    const auto v = b.get<std::vector<uint8_t>>();
    rank1.emplace_back(v.begin(), v.end());
  }
  EXPECT_EQ(*got, reference[0]);
  EXPECT_EQ(rank1, reference[1]);
  // Not the inputs passed through: rank 0's shard of x sums both ranks.
  const std::vector<double> x = Inputs(0)[0].values;
  EXPECT_NE((*got)[0],
            EncodeValues(ir::DType::kF32, std::vector<double>(x.begin(), x.begin() + 4)));
}

// A stand-in peer for one emulated rank: rank 0 of two whose peer holds
// the same values (sums double, gathers repeat).
class MirrorPeer : public rt::Communicator {
 public:
  int64_t rank() const override { return 0; }
  int64_t world_size() const override { return 2; }
  Status Barrier() override { return Status::Ok(); }
  void Abort(const Status&) override {}
  Status AllReduce(ir::ReduceKind, std::span<float> data) override { return Twice(data); }
  Status AllReduce(ir::ReduceKind, std::span<double> data) override { return Twice(data); }
  Status ReduceScatter(ir::ReduceKind, std::span<const float> in, std::span<float> out) override {
    return Shard(in, out);
  }
  Status ReduceScatter(ir::ReduceKind, std::span<const double> in, std::span<double> out) override {
    return Shard(in, out);
  }
  Status AllGather(std::span<const float> in, std::span<float> out) override {
    return Repeat(in, out);
  }
  Status AllGather(std::span<const double> in, std::span<double> out) override {
    return Repeat(in, out);
  }

 private:
  template <typename T>
  static Status Twice(std::span<T> data) {
    for (T& v : data) v += v;
    return Status::Ok();
  }
  template <typename T>
  static Status Shard(std::span<const T> in, std::span<T> out) {
    for (size_t i = 0; i < out.size(); ++i) out[i] = in[i] + in[i];
    return Status::Ok();
  }
  template <typename T>
  static Status Repeat(std::span<const T> in, std::span<T> out) {
    for (size_t i = 0; i < out.size(); ++i) out[i] = in[i % in.size()];
    return Status::Ok();
  }
};

struct Defect {
  const char* name;
  std::function<void(json&)> seed;
  const char* expected;  // a part of the one-line finding
};

// Each seeded defect fails the run with one line naming the thunk whose
// buffers were in flight.
TEST(EmuCollectivesTest, SeededDefectsAreCaughtInOneLine) {
  std::string why;
  const Tiny* tiny = TinyOrSkip(&why);
  if (tiny == nullptr) GTEST_SKIP() << why;
  const std::vector<Defect> defects = {
      {"the reduce-scatter's wait after its reader",
       [](json& p) { p["buckets"][0]["wait_before"] = 6; },
       "while entry train_step thunk 0 (reduce_scatter %s) is in flight"},
      {"the all-gather's wait after its reader",
       [](json& p) { p["buckets"][1]["wait_before"] = 6; },
       "while entry train_step thunk 2 (all_gather %g) is in flight"},
      {"a write into the reduce-scatter's operand before its wait",
       [](json& p) {
         p["thunks"][1] = Copy("c", Slice(kY, 8), Slice(kX, 8), 8);
         p["buckets"][0]["wait_before"] = 2;
       },
       "while entry train_step thunk 0 (reduce_scatter %s) is in flight"},
  };
  for (const Defect& d : defects) {
    json plan = Plan();
    d.seed(plan);
    MirrorPeer peer;
    StatusOr<std::vector<std::string>> got = RunEmulated(*tiny, plan, peer);
    ASSERT_FALSE(got.ok()) << d.name;
    const std::string message(got.status().message());
    EXPECT_NE(message.find(d.expected), std::string::npos) << d.name << ": " << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << d.name << ": " << message;
  }
  // The plan as written runs, and its values are the mirror's.
  MirrorPeer peer;
  StatusOr<std::vector<std::string>> got = RunEmulated(*tiny, Plan(), peer);
  ASSERT_TRUE(got.ok()) << got.status().message();
  std::vector<double> x = Inputs(0)[0].values;
  std::vector<double> shard = {2 * x[0], 2 * x[1], 2 * x[2], 2 * x[3]};
  EXPECT_EQ((*got)[0], EncodeValues(ir::DType::kF32, shard));
}

// The plan reader takes the collective thunks and refuses malformed ones
// in one line; the executor checks the sharded side against the world size.
TEST(EmuCollectivesTest, MalformedCollectivePlansAreRefusedInOneLine) {
  StatusOr<EntryPlan> p = ReadEntryPlan(Plan());
  ASSERT_TRUE(p.ok()) << p.status().message();
  const auto& s = std::get<AllReduceThunk>(p->thunks[0].body);
  EXPECT_EQ(s.collective, program::CollectiveOp::kReduceScatter);
  EXPECT_EQ(std::get<AllReduceThunk>(p->thunks[2].body).collective,
            program::CollectiveOp::kAllGather);
  struct Case {
    std::function<void(json&)> seed;
    const char* expected;
  };
  const std::vector<Case> cases = {
      {[](json& j) { j["thunks"][0]["in"] = Slice(kX, 28); },
       "plan entry train_step: thunk 0 (reduce_scatter %s): its in slice of 28 bytes is not a "
       "whole number of 4 f32 elements"},
      {[](json& j) { j["thunks"][0]["out"] = Slice(kX + 16, 16); },
       "plan entry train_step: thunk 0 (reduce_scatter %s): in [0, +32) and out [16, +16) "
       "overlap"},
      {[](json& j) { j["thunks"][0]["collective"] = "broadcast"; },
       "plan entry train_step thunk 0.collective: 'broadcast' is not a value this reader knows"},
      {[](json& j) {
         j["thunks"][2]["bucket"] = 0;
         j["buckets"][0] = {
             {"id", 0}, {"members", {0, 2}}, {"issue_after", 2}, {"wait_before", 3}, {"bytes", 48}};
         j["buckets"].erase(1);
         j["buckets"][1]["id"] = 1;
         j["buckets"][2]["id"] = 2;
         j["thunks"][4]["bucket"] = 1;
         j["thunks"][5]["bucket"] = 2;
       },
       "plan entry train_step bucket 0: member 2 (all_gather) and member 0 (reduce_scatter) "
       "differ: a bucket holds one collective"},
  };
  for (const Case& c : cases) {
    json bad = Plan();
    c.seed(bad);
    p = ReadEntryPlan(bad);
    ASSERT_FALSE(p.ok()) << c.expected;
    EXPECT_EQ(p.status().message(), c.expected);
  }
  // Whole, but three ranks' worth for a world of two.
  std::string why;
  const Tiny* tiny = TinyOrSkip(&why);
  if (tiny == nullptr) GTEST_SKIP() << why;
  json three = Plan();
  three["thunks"][0]["in"] = Slice(kX, 48);
  MirrorPeer peer;
  StatusOr<std::vector<std::string>> got = RunEmulated(*tiny, three, peer);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().message(),
            "thunk 0 (reduce_scatter %s): its in slice holds 48 bytes, not 4 elements x 2 ranks "
            "of f32");
}

}  // namespace
}  // namespace gptc::rt::gpu::testing
