// Note [bound API functions] and Note [CUDA backends]: a table entry calls a
// plain C function or one bound to its context, and one backend at a time
// is installed. None of these needs a GPU.
#include "runtime/gpu/backend.h"

#include <gtest/gtest.h>

#include "runtime/gpu/api_fn.h"

namespace gptc::rt::gpu {
namespace {

int Add(int a, int b) { return a + b; }

struct Counter {
  int base = 0;
  int calls = 0;
};

int AddFrom(Counter& c, int a, int b) {
  ++c.calls;
  return c.base + a + b;
}

TEST(ApiFnTest, PlainAndBoundFunctionsOfOneSignature) {
  ApiFn<decltype(Add)> empty;
  EXPECT_FALSE(empty);
  ApiFn<decltype(Add)> plain = &Add;
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain(2, 3), 5);
  ApiFn<decltype(Add)> null_plain = static_cast<int (*)(int, int)>(nullptr);
  EXPECT_FALSE(null_plain);

  // Two contexts, two tables: each call reaches its own state.
  Counter one{.base = 100}, two{.base = 200};
  ApiFn<decltype(Add)> on_one = BindApiFn<&AddFrom>(&one);
  ApiFn<decltype(Add)> on_two = BindApiFn<&AddFrom>(&two);
  EXPECT_EQ(on_one(1, 2), 103);
  EXPECT_EQ(on_two(1, 2), 203);
  EXPECT_EQ(on_two(0, 0), 200);
  EXPECT_EQ(one.calls, 1);
  EXPECT_EQ(two.calls, 2);
}

TEST(BackendTest, OneInstalledAtATime) {
  const Backend& nvidia = ActiveBackend();
  EXPECT_EQ(nvidia.name, "cuda");
  EXPECT_FALSE(nvidia.stand_in_clock);
  RuntimeApi runtime;
  Backend a{.name = "a", .runtime = &runtime}, b{.name = "b", .runtime = &runtime};
  ASSERT_TRUE(InstallBackend(a).ok());
  EXPECT_EQ(&ActiveBackend(), &a);
  Status second = InstallBackend(b);
  EXPECT_EQ(second.message(),
            "the a backend is installed already (one device at a time per process)");
  UninstallBackend(b);  // not the installed one: nothing changes
  EXPECT_EQ(&ActiveBackend(), &a);
  UninstallBackend(a);
  EXPECT_EQ(&ActiveBackend(), &nvidia);
  ASSERT_TRUE(InstallBackend(b).ok());
  UninstallBackend(b);
}

}  // namespace
}  // namespace gptc::rt::gpu
