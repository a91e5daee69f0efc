// compiler/perf/issue_order.h: loads move up as ptxas would move them, not
// across fences, and not past the registers ptxas allocated (Note [issue
// order]).
#include "compiler/perf/issue_order.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

namespace gptc::perf {
namespace {

PtxKernel Parse(const std::string& body) {
  auto parsed = ParsePtx(
      ".visible .entry k(\n\t.param .u64 k_param_0\n)\n{\n\t.reg .pred %p<4>;\n"
      "\t.reg .b32 %r<64>;\n\t.reg .f32 %f<64>;\n\t.reg .b64 %rd<8>;\n"
      "\tld.param.u64 %rd1, [k_param_0];\n" +
      body + "\tret;\n}\n");
  EXPECT_TRUE(parsed.ok()) << parsed.status().message();
  return std::move((*parsed)[0]);
}

// Where instruction `index` of block 0 issues.
int Place(const std::vector<int32_t>& order, int index) {
  return static_cast<int>(std::find(order.begin(), order.end(), index) - order.begin());
}

// Eight independent adds, then a global load and its use.
constexpr char kAddsThenLoad[] =
    "\tadd.rn.f32 %f10, %f1, %f2;\n\tadd.rn.f32 %f11, %f1, %f2;\n\tadd.rn.f32 %f12, %f1, %f2;\n"
    "\tadd.rn.f32 %f13, %f1, %f2;\n\tadd.rn.f32 %f14, %f1, %f2;\n\tadd.rn.f32 %f15, %f1, %f2;\n"
    "\tadd.rn.f32 %f16, %f1, %f2;\n\tadd.rn.f32 %f17, %f1, %f2;\n"
    "\tld.global.f32 %f3, [%rd1];\n\tadd.rn.f32 %f4, %f3, %f3;\n";

TEST(IssueOrderTest, LoadsGoFirst) {
  PtxKernel k = Parse(kAddsThenLoad);
  std::vector<int32_t> order = IssueOrders(k, H100(), 0)[0];
  ASSERT_EQ(order.size(), k.blocks[0].insts.size());
  EXPECT_EQ(Place(order, 9), 1);    // the load, right after the parameter
  EXPECT_EQ(Place(order, 10), 10);  // its use stays last but the ret
  // The same instructions, each once.
  std::vector<int32_t> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) EXPECT_EQ(sorted[i], static_cast<int32_t>(i));
}

TEST(IssueOrderTest, NothingCrossesABarrier) {
  std::string body = kAddsThenLoad;
  body.insert(body.find("\tld.global"), "\tbar.sync 0;\n");
  PtxKernel k = Parse(body);
  std::vector<int32_t> order = IssueOrders(k, H100(), 0)[0];
  EXPECT_EQ(Place(order, 9), 9);    // the barrier stays where it was
  EXPECT_EQ(Place(order, 10), 10);  // the load right after it
}

TEST(IssueOrderTest, StoresStayInOrderWithLoadsOfTheirSpace) {
  // A shared load passes a global store (it has the longer way to go); a
  // global load cannot, however long its way.
  PtxKernel k = Parse("\tst.global.f32 [%rd1], %f1;\n\tld.shared.f32 %f5, [%rd1];\n");
  std::vector<int32_t> order = IssueOrders(k, H100(), 0)[0];
  EXPECT_LT(Place(order, 2), Place(order, 1));
  PtxKernel later = Parse("\tst.global.f32 [%rd1], %f1;\n\tld.global.f32 %f3, [%rd1+4];\n");
  std::vector<int32_t> kept = IssueOrders(later, H100(), 0)[0];
  EXPECT_LT(Place(kept, 1), Place(kept, 2));
}

TEST(IssueOrderTest, LoadsWaitWhileTheRegistersAreFull) {
  // Thirty loads whose values are summed at the end: hoisting them all
  // keeps thirty values live; at two registers more than the text order
  // needs, they stay near their uses.
  std::string body;
  for (int i = 0; i < 30; ++i) {
    body += "\tld.global.f32 %f" + std::to_string(i + 10) + ", [%rd1+" + std::to_string(4 * i) +
            "];\n\tadd.rn.f32 %f1, %f1, %f" + std::to_string(i + 10) + ";\n";
  }
  PtxKernel k = Parse(body);
  std::vector<int32_t> free_order = IssueOrders(k, H100(), 0)[0];
  EXPECT_LT(Place(free_order, 59), Place(free_order, 4));  // the last load before the second add
  std::vector<int32_t> tight = IssueOrders(k, H100(), 4)[0];
  EXPECT_GT(Place(tight, 59), Place(tight, 4));
}

}  // namespace
}  // namespace gptc::perf
