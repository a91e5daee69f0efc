// Status's kind (StatusCode): set by the error helpers, kept through
// WithPrefix and ASSIGN_OR_RETURN/RETURN_IF_ERROR, so callers branch on
// code() and never on a message's text.
#include "compiler/support/status.h"

#include <gtest/gtest.h>

#include <string>

namespace gptc {
namespace {

TEST(StatusTest, HelpersSetTheirKindAndErrorLeavesItUnknown) {
  EXPECT_EQ(Status::Ok().code(), StatusCode::kOk);
  EXPECT_TRUE(Status::Ok().ok());
  EXPECT_EQ(Error("x {}", 1).code(), StatusCode::kUnknown);
  EXPECT_EQ(Error("x {}", 1).message(), "x 1");
  EXPECT_EQ(UsageError("--steps {}", 0).code(), StatusCode::kUsage);
  EXPECT_EQ(UsageError("--steps {}", 0).message(), "--steps 0");
  EXPECT_EQ(NotFoundError("f").code(), StatusCode::kNotFound);
  EXPECT_EQ(CorruptError("f").code(), StatusCode::kCorrupt);
  EXPECT_EQ(ResourceError("f").code(), StatusCode::kResource);
  EXPECT_EQ(UnavailableError("f").code(), StatusCode::kUnavailable);
  EXPECT_EQ(TimedOutError("f").code(), StatusCode::kTimedOut);
  EXPECT_EQ(InternalError("f").code(), StatusCode::kInternal);
  EXPECT_FALSE(UsageError("f").ok());
  // kOk is no error: an error asked to be "ok" is still one, of no known kind.
  Status odd = Status::Error("e", StatusCode::kOk);
  EXPECT_FALSE(odd.ok());
  EXPECT_EQ(odd.code(), StatusCode::kUnknown);
}

TEST(StatusTest, WithPrefixKeepsTheKind) {
  Status s = TimedOutError("timed out").WithPrefix("barrier: rank 0 awaiting rank 1");
  EXPECT_EQ(s.code(), StatusCode::kTimedOut);
  EXPECT_EQ(s.message(), "barrier: rank 0 awaiting rank 1: timed out");
  EXPECT_TRUE(Status::Ok().WithPrefix("x").ok());
}

TEST(StatusTest, WithCodeReclassifiesAnErrorButNotOk) {
  Status s = Error("--model gpt2: gptc: bad flag").WithCode(StatusCode::kUsage);
  EXPECT_EQ(s.code(), StatusCode::kUsage);
  EXPECT_EQ(s.message(), "--model gpt2: gptc: bad flag");
  EXPECT_TRUE(Status::Ok().WithCode(StatusCode::kUsage).ok());
}

StatusOr<int> Parse(bool fail) {
  if (fail) return CorruptError("shard.bin: bad magic");
  return 7;
}

Status Twice(bool fail, int* out) {
  ASSIGN_OR_RETURN(int v, Parse(fail));
  *out = 2 * v;
  return Status::Ok();
}

Status Outer(bool fail) {
  int v = 0;
  RETURN_IF_ERROR(Twice(fail, &v).WithPrefix("--train"));
  return Status::Ok();
}

TEST(StatusTest, AssignOrReturnAndReturnIfErrorKeepTheKind) {
  int v = 0;
  Status s = Twice(true, &v);
  EXPECT_EQ(s.code(), StatusCode::kCorrupt);
  EXPECT_EQ(s.message(), "shard.bin: bad magic");
  EXPECT_TRUE(Twice(false, &v).ok());
  EXPECT_EQ(v, 14);
  Status outer = Outer(true);
  EXPECT_EQ(outer.code(), StatusCode::kCorrupt);
  EXPECT_EQ(outer.message(), "--train: shard.bin: bad magic");
  StatusOr<int> failed = Parse(true);
  EXPECT_EQ(failed.status().code(), StatusCode::kCorrupt);
}

TEST(StatusTest, EveryKindHasAName) {
  EXPECT_EQ(StatusCodeName(StatusCode::kUsage), "usage");
  EXPECT_EQ(StatusCodeName(StatusCode::kTimedOut), "timed out");
  for (int c = 0; c <= static_cast<int>(StatusCode::kInternal); ++c) {
    EXPECT_NE(StatusCodeName(static_cast<StatusCode>(c)), "invalid") << c;
  }
}

}  // namespace
}  // namespace gptc
