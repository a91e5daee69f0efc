// A computation's name index (NameIndex) and the moves the fusion pass
// makes: ReleaseInstructions, AddReleased and ReplaceUsesIn keep operands,
// users, names and roots consistent, as the verifier checks.
#include "compiler/ir/computation.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "compiler/ir/module.h"
#include "compiler/ir/name_index.h"
#include "compiler/ir/verifier.h"

namespace gptc::ir {
namespace {

std::unique_ptr<Instruction> Op(std::string name, Opcode opcode,
                                std::vector<Instruction*> operands = {}) {
  Attrs attrs;
  if (opcode == Opcode::kParameter) attrs.index = 0;
  return std::make_unique<Instruction>(std::move(name), opcode, Shape(DType::kF32, {4}),
                                       std::move(operands), attrs);
}

// "x<i>" (gcc 12 warns, wrongly, about `"x" + std::to_string(i)`).
std::string XName(int i) { return fmt::format("x{}", i); }

TEST(NameIndexTest, FindsWhatIsLeftAfterErasuresAndGrowth) {
  // Enough names to rehash several times, half of them erased: the rest
  // stay reachable past the tombstones on their probe chains.
  std::vector<std::unique_ptr<Instruction>> insts;
  NameIndex index;
  for (int i = 0; i < 1000; ++i) {
    insts.push_back(Op(XName(i), Opcode::kNeg));
    index.Insert(insts.back().get());
  }
  for (int i = 0; i < 1000; i += 2) index.Erase(XName(i));
  index.Erase("never-there");
  for (int i = 0; i < 1000; ++i) {
    Instruction* found = index.Find(XName(i));
    EXPECT_EQ(found, i % 2 == 0 ? nullptr : insts[i].get()) << "x" << i;
  }
  // An erased name can be taken again, by another instruction.
  auto again = Op("x10", Opcode::kExp);
  index.Insert(again.get());
  EXPECT_EQ(index.Find("x10"), again.get());
  EXPECT_FALSE(index.Contains("x1000"));
}

TEST(ComputationTest, ReleasedInstructionsMoveWithTheirNamesAndUses) {
  // main: p -> a = neg(p) -> b = exp(a) -> c = add(b, p) (root).
  // Move a and b into `fused` (reading its parameter q), and point main's
  // users of b at a stand-in s = copy(p), as the fusion pass does.
  Module module("m");
  Computation* main = module.AddComputation("main");
  module.set_entry(main);
  Instruction* p = main->AddInstruction(Op("p", Opcode::kParameter));
  Instruction* a = main->AddInstruction(Op("a", Opcode::kNeg, {p}));
  Instruction* b = main->AddInstruction(Op("b", Opcode::kExp, {a}));
  Instruction* c = main->AddInstruction(Op("c", Opcode::kAdd, {b, p}));
  main->set_root(c);

  std::vector<std::unique_ptr<Instruction>> released = main->ReleaseInstructions({a, b});
  ASSERT_EQ(released.size(), 2u);
  EXPECT_EQ(released[0].get(), a);
  EXPECT_EQ(main->instruction_count(), 2);
  EXPECT_EQ(main->FindInstruction("a"), nullptr);
  EXPECT_EQ(p->users(), std::vector<Instruction*>{c});  // a no longer reads p
  EXPECT_EQ(b->users(), std::vector<Instruction*>{c});  // main's user stays for the caller
  EXPECT_EQ(a->users(), std::vector<Instruction*>{b});  // released together: kept

  auto fused = std::make_unique<Computation>("fused");
  Instruction* q = fused->AddInstruction(Op("q", Opcode::kParameter));
  fused->AddReleased(std::move(released[0]))->ReplaceOperandWith(0, q);
  fused->AddReleased(std::move(released[1]));  // reads a, moved along
  fused->set_root(b);
  EXPECT_EQ(a->parent(), fused.get());
  EXPECT_EQ(a->operands(), std::vector<Instruction*>{q});
  EXPECT_EQ(q->users(), std::vector<Instruction*>{a});
  EXPECT_EQ(a->users(), std::vector<Instruction*>{b});  // once, not added again
  EXPECT_EQ(fused->FindInstruction("b"), b);

  Instruction* s = main->InsertInstructionBefore(Op("s", Opcode::kCopy, {p}), c);
  b->ReplaceUsesIn(main, s);
  EXPECT_EQ(c->operand(0), s);
  EXPECT_TRUE(b->users().empty());  // a user of it in `fused` would have stayed
  EXPECT_EQ(fused->root(), b);
  EXPECT_EQ(main->root(), c);
  EXPECT_TRUE(VerifyModule(module).ok()) << VerifyModule(module).message();
}

TEST(ComputationTest, ReleaseOutOfOrderReturnsTheInstructionsInTheOrderGiven) {
  // In the computation's order the release is one pass comparing pointers;
  // out of order (c before a) it falls back to a second pass, and still
  // returns them as given and leaves the rest (p, b) in order.
  Module module("m");
  Computation* main = module.AddComputation("main");
  module.set_entry(main);
  Instruction* p = main->AddInstruction(Op("p", Opcode::kParameter));
  Instruction* a = main->AddInstruction(Op("a", Opcode::kNeg, {p}));
  Instruction* b = main->AddInstruction(Op("b", Opcode::kExp, {p}));
  Instruction* c = main->AddInstruction(Op("c", Opcode::kCopy, {p}));
  main->set_root(b);
  std::vector<std::unique_ptr<Instruction>> released = main->ReleaseInstructions({c, a});
  ASSERT_EQ(released.size(), 2u);
  EXPECT_EQ(released[0].get(), c);
  EXPECT_EQ(released[1].get(), a);
  ASSERT_EQ(main->instruction_count(), 2);
  EXPECT_EQ(main->instructions()[0].get(), p);
  EXPECT_EQ(main->instructions()[1].get(), b);
  EXPECT_EQ(p->users(), std::vector<Instruction*>{b});
  EXPECT_EQ(main->FindInstruction("c"), nullptr);
  EXPECT_EQ(main->FindInstruction("b"), b);
  EXPECT_TRUE(VerifyModule(module).ok()) << VerifyModule(module).message();
}

// main: p, a = neg(p), b = exp(a), and the root c = copy(p).
struct ExpChain {
  ExpChain() {
    Computation* main = module.AddComputation("main");
    module.set_entry(main);
    Instruction* p = main->AddInstruction(Op("p", Opcode::kParameter));
    Instruction* a = main->AddInstruction(Op("a", Opcode::kNeg, {p}));
    Instruction* b = main->AddInstruction(Op("b", Opcode::kExp, {a}));
    Instruction* c = main->AddInstruction(Op("c", Opcode::kCopy, {p}));
    main->set_root(c);
    insts = {main, p, a, b, c};
  }
  Module module{"m"};
  std::tuple<Computation*, Instruction*, Instruction*, Instruction*, Instruction*> insts;
};

TEST(ComputationTest, ReleasedOutOfOrderKeepTheEdgesAmongThem) {
  // b = exp(a) given before a: the edge a -> b stays, as in order.
  ExpChain m;
  auto [main, p, a, b, c] = m.insts;
  std::vector<std::unique_ptr<Instruction>> released = main->ReleaseInstructions({b, a});
  EXPECT_EQ(a->users(), std::vector<Instruction*>{b});
  EXPECT_EQ(p->users(), std::vector<Instruction*>{c});
  Computation* fused = m.module.AddComputation("fused");
  Instruction* q = fused->AddInstruction(Op("q", Opcode::kParameter));
  fused->AddReleased(std::move(released[1]))->ReplaceOperandWith(0, q);
  fused->AddReleased(std::move(released[0]));
  fused->set_root(b);
  EXPECT_EQ(a->users(), std::vector<Instruction*>{b});
  EXPECT_TRUE(VerifyModule(m.module).ok()) << VerifyModule(m.module).message();
}

TEST(ComputationTest, ReleasedTogetherInTwoComputationsDropTheEdgeBetween) {
  // a and b = exp(a) leave main together, into two computations: b reads a
  // parameter of its own instead, and a no longer lists b as a user.
  ExpChain m;
  auto [main, p, a, b, c] = m.insts;
  std::vector<std::unique_ptr<Instruction>> released = main->ReleaseInstructions({a, b});
  Computation* first = m.module.AddComputation("first");
  Computation* second = m.module.AddComputation("second");
  Instruction* q = first->AddInstruction(Op("q", Opcode::kParameter));
  Instruction* r = second->AddInstruction(Op("r", Opcode::kParameter));
  second->AddReleased(std::move(released[1]))->ReplaceOperandWith(0, r);
  first->AddReleased(std::move(released[0]))->ReplaceOperandWith(0, q);
  first->set_root(a);
  second->set_root(b);
  EXPECT_TRUE(a->users().empty());
  EXPECT_EQ(r->users(), std::vector<Instruction*>{b});
  EXPECT_EQ(p->users(), std::vector<Instruction*>{c});
  EXPECT_TRUE(VerifyModule(m.module).ok()) << VerifyModule(m.module).message();
}

// Names are indexed on the first lookup, and kept up to date from then on.
TEST(ComputationTest, NamesAreFoundBeforeAndAfterTheIndexIsBuilt) {
  Module module("m");
  Computation* main = module.AddComputation("main");
  module.set_entry(main);
  Instruction* p = main->AddInstruction(Op("p", Opcode::kParameter));
  Instruction* a = main->AddInstruction(Op("a", Opcode::kNeg, {p}));
  EXPECT_EQ(main->FindInstruction("a"), a);  // indexes p and a
  Instruction* b = main->AddInstruction(Op("b", Opcode::kExp, {a}));
  EXPECT_EQ(main->FindInstruction("b"), b);
  EXPECT_EQ(main->UniqueName("b"), "b.1");
  main->set_root(a);
  main->RemoveInstruction(b);
  EXPECT_EQ(main->FindInstruction("b"), nullptr);
  EXPECT_EQ(main->UniqueName("b"), "b");
}

TEST(ComputationTest, ReplaceUsesInMovesTheRoot) {
  Module module("m");
  Computation* main = module.AddComputation("main");
  module.set_entry(main);
  Instruction* p = main->AddInstruction(Op("p", Opcode::kParameter));
  Instruction* a = main->AddInstruction(Op("a", Opcode::kNeg, {p}));
  main->set_root(a);
  std::vector<std::unique_ptr<Instruction>> released = main->ReleaseInstructions({a});
  Instruction* s = main->AddInstruction(Op("s", Opcode::kCopy, {p}));
  a->ReplaceUsesIn(main, s);
  EXPECT_EQ(main->root(), s);
  EXPECT_TRUE(VerifyModule(module).ok()) << VerifyModule(module).message();
}

}  // namespace
}  // namespace gptc::ir
