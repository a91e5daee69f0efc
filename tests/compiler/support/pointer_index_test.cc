#include "compiler/support/pointer_index.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

namespace gptc {
namespace {

TEST(PointerIndexTest, NumbersPointersInInsertionOrderAcrossRehashes) {
  // Heap objects, as the IR's instructions are: aligned addresses close
  // together, the case a hash of the low bits crowds.
  std::vector<std::unique_ptr<int64_t>> objects;
  for (int i = 0; i < 5000; ++i) objects.push_back(std::make_unique<int64_t>(i));
  PointerIndex index;  // no Reserve: grows through several rehashes
  for (const auto& o : objects) index.Insert(o.get());
  ASSERT_EQ(index.size(), objects.size());
  for (size_t i = 0; i < objects.size(); ++i) EXPECT_EQ(index.Find(objects[i].get()), i);
  // Inserting again keeps the first number.
  EXPECT_EQ(index.Insert(objects[42].get()), 42);
  EXPECT_EQ(index.size(), objects.size());
}

TEST(PointerIndexTest, AnUnknownPointerIsMinusOne) {
  PointerIndex empty;
  int64_t x = 0, y = 0;
  EXPECT_EQ(empty.Find(&x), -1);
  PointerIndex index(1);
  EXPECT_EQ(index.Insert(&x), 0);
  EXPECT_EQ(index.Find(&y), -1);
  EXPECT_EQ(index.Find(&x), 0);
}

}  // namespace
}  // namespace gptc
