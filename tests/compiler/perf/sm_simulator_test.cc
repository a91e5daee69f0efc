// compiler/perf/sm_simulator.h: latency, throughput and their overlap on
// one multiprocessor (Note [simulated multiprocessor]), on kernels whose
// clocks follow from Note [H100 machine model] by hand.
#include "compiler/perf/sm_simulator.h"

#include <gtest/gtest.h>

#include <string>

namespace gptc::perf {
namespace {

// A kernel of `body` (PTX statements) with enough registers declared.
std::string Kernel(const std::string& body) {
  return ".visible .entry k(\n\t.param .u64 k_param_0\n)\n{\n\t.reg .pred %p<4>;\n"
         "\t.reg .b32 %r<300>;\n\t.reg .f32 %f<300>;\n\t.reg .b64 %rd<8>;\n" +
         body + "\tret;\n}\n";
}

// `count` statements from `make(i)`.
template <typename F>
std::string Repeat(int count, F make) {
  std::string s;
  for (int i = 0; i < count; ++i) s += make(i);
  return s;
}

struct Simulated {
  PtxKernel kernel;
  SimResult result;
};

// Runs `blocks` resident blocks of `threads` threads of kernel `ptx`.
Simulated Simulate(const std::string& ptx, int64_t threads, int64_t blocks = 1) {
  auto parsed = ParsePtx(ptx);
  EXPECT_TRUE(parsed.ok()) << parsed.status().message();
  Simulated run{std::move((*parsed)[0]), {}};
  LaunchShape launch;
  launch.grid = {blocks, 1, 1};
  launch.block = {threads, 1, 1};
  launch.param_bytes = {1 << 20};
  const WalkPlan plan = PlanWalk(run.kernel);
  std::vector<BlockWalk> walks;
  for (int64_t b = 0; b < blocks; ++b) walks.push_back(WalkBlock(run.kernel, plan, launch, b));
  std::vector<std::vector<RequestCost>> costs((threads + 31) / 32);
  std::vector<SimBlock> sim;
  for (const BlockWalk& w : walks) sim.push_back(SimBlock{&w, &costs, 0});
  const SimKernel k = PrepareSimKernel(run.kernel, H100(), 0);
  run.result = SimulateSm(k, sim, H100(), H100().sms);
  return run;
}

std::string DependentAdds(int n) {
  return Repeat(n, [](int) { return std::string("\tadd.rn.f32 %f1, %f1, %f2;\n"); });
}

TEST(SmSimulatorTest, ADependentChainWaitsOutEveryLatency) {
  Simulated r = Simulate(Kernel(DependentAdds(100)), 32);
  // 100 adds, each 4 clocks after the last.
  EXPECT_NEAR(r.result.clocks, 400, 8);
  EXPECT_EQ(r.result.warp_instructions, 101);  // and the ret
  EXPECT_NEAR(r.result.stalls[static_cast<int>(Stall::kFixed)], 300, 8);
}

TEST(SmSimulatorTest, IndependentWorkIssuesEveryClock) {
  std::string body = Repeat(
      100, [](int i) { return "\tadd.rn.f32 %f" + std::to_string(i + 10) + ", %f1, %f2;\n"; });
  Simulated r = Simulate(Kernel(body), 32);
  EXPECT_NEAR(r.result.clocks, 101, 3);
}

TEST(SmSimulatorTest, WarpsOnOneSchedulerHideEachOthersLatency) {
  // Four warps on each scheduler, each a chain of 4-clock adds: together
  // they issue every clock, in the time one chain takes alone.
  Simulated r = Simulate(Kernel(DependentAdds(100)), 512);
  EXPECT_NEAR(r.result.clocks, 404, 12);
  EXPECT_EQ(r.result.warp_instructions, 16 * 101);
}

TEST(SmSimulatorTest, TheTensorPipeLimitsIndependentMma) {
  std::string body = Repeat(64, [](int i) {
    const std::string d = std::to_string(4 * i + 20);
    return "\tmma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%f" + d + ", %f" + d + ", %f" +
           d + ", %f" + d + "}, {%r1, %r2, %r3, %r4}, {%r5, %r6}, {%f1, %f2, %f3, %f4};\n";
  });
  Simulated r = Simulate(Kernel(body), 32);
  // 6 clocks of the pipe each (H100().mma_clocks), the last result 33 after it starts.
  EXPECT_NEAR(r.result.clocks, 63 * 6 + 1, 4);
  EXPECT_EQ(r.result.pipe_busy[static_cast<int>(Pipe::kTensor)], 64 * 6);
}

TEST(SmSimulatorTest, ABarrierWaitsForTheSlowestWarp) {
  // Warp 1 (threads 32-63) runs a 100-add chain before the barrier; warp 0
  // waits there for it, then both run 10 more dependent adds.
  std::string body =
      "\tmov.u32 %r1, %tid.x;\n\tsetp.lt.u32 %p1, %r1, 32;\n\t@%p1 bra $L__BB0_2;\n" +
      DependentAdds(100) + "$L__BB0_2:\n\tbar.sync 0;\n" + DependentAdds(10);
  Simulated r = Simulate(Kernel(body), 64);
  EXPECT_NEAR(r.result.clocks, 400 + 20 + 40, 20);
  EXPECT_GT(r.result.stalls[static_cast<int>(Stall::kBarrier)], 350);
}

TEST(SmSimulatorTest, TheSpecialFunctionUnitIsAQuarterPipe) {
  std::string body = Repeat(
      32, [](int i) { return "\tex2.approx.ftz.f32 %f" + std::to_string(i + 10) + ", %f1;\n"; });
  Simulated r = Simulate(Kernel(body), 32);
  // 8 clocks of the unit each; nothing waits for the last result.
  EXPECT_NEAR(r.result.clocks, 31 * 8 + 2, 3);
  EXPECT_EQ(r.result.pipe_busy[static_cast<int>(Pipe::kMufu)], 32 * 8);
}

}  // namespace
}  // namespace gptc::perf
