// The iteration-level batching policy, on a simulated clock.
#include <gtest/gtest.h>

#include "lm/batch_policy.hpp"

namespace swarmflow::lm {
namespace {

constexpr std::int64_t kMs = 1'000'000;

BatchRequest req(std::uint64_t id, int prompt, int max_tokens, std::int64_t at_ns = 0) {
  return BatchRequest{id, prompt, max_tokens, at_ns};
}

const StepSlot* slot(const StepPlan& p, std::uint64_t id) {
  for (const auto& s : p.slots) {
    if (s.id == id) return &s;
  }
  return nullptr;
}

TEST(LmBatchPolicy, ANewRequestJoinsTheRunningBatchAtTheNextStep) {
  BatchSettings s;
  s.max_size = 4;
  BatchPolicy p(s);
  ASSERT_EQ(p.submit(req(1, 3, 10)), "");
  StepPlan a = p.plan(0);
  ASSERT_EQ(a.slots.size(), 1u);
  EXPECT_EQ(a.slots[0].count, 3);  // the whole prompt
  EXPECT_TRUE(a.slots[0].samples);
  ASSERT_EQ(p.submit(req(2, 2, 10, 1)), "");
  StepPlan b = p.plan(1);
  EXPECT_EQ(b.joined, std::vector<std::uint64_t>{2});
  ASSERT_EQ(b.slots.size(), 2u);
  EXPECT_EQ(slot(b, 1)->count, 1);  // decoding
  EXPECT_EQ(slot(b, 1)->first, 3);
  EXPECT_EQ(slot(b, 2)->count, 2);  // its prefill, in the same step
}

TEST(LmBatchPolicy, ALoneRequestWaitsAtMostMaxWaitForCompany) {
  BatchSettings s;
  s.max_size = 3;
  s.max_wait_ns = 5 * kMs;
  BatchPolicy p(s);
  ASSERT_EQ(p.submit(req(1, 2, 4, 10 * kMs)), "");
  StepPlan a = p.plan(11 * kMs);
  EXPECT_TRUE(a.slots.empty());
  EXPECT_EQ(a.wake_ns, 15 * kMs);
  ASSERT_EQ(p.submit(req(2, 2, 4, 12 * kMs)), "");
  EXPECT_TRUE(p.plan(13 * kMs).slots.empty());
  ASSERT_EQ(p.submit(req(3, 2, 4, 13 * kMs)), "");
  // max_size reached: no more waiting.
  EXPECT_EQ(p.plan(13 * kMs).slots.size(), 3u);

  BatchPolicy q(s);
  ASSERT_EQ(q.submit(req(1, 2, 4, 0)), "");
  EXPECT_EQ(q.plan(5 * kMs).slots.size(), 1u);  // the wait is over
}

TEST(LmBatchPolicy, TheBatchNeverPassesMaxSize) {
  BatchSettings s;
  s.max_size = 2;
  BatchPolicy p(s);
  for (std::uint64_t i = 1; i <= 5; ++i) ASSERT_EQ(p.submit(req(i, 1, 3)), "");
  StepPlan a = p.plan(0);
  EXPECT_EQ(a.slots.size(), 2u);
  EXPECT_EQ(p.queued(), 3u);
  p.finish(1);
  StepPlan b = p.plan(1);
  EXPECT_EQ(b.joined, std::vector<std::uint64_t>{3});
  EXPECT_EQ(b.slots.size(), 2u);
}

TEST(LmBatchPolicy, AdmissionKeepsReservationsWithinTheKvBudget) {
  BatchSettings s;
  s.max_size = 8;
  s.kv_budget_tokens = 100;
  BatchPolicy p(s);
  // Never fits: refused with the reason.
  const std::string why = p.submit(req(9, 80, 30));
  EXPECT_NE(why.find("needs 110 tokens"), std::string::npos) << why;
  EXPECT_NE(why.find("budget of 100"), std::string::npos) << why;
  ASSERT_EQ(p.submit(req(1, 30, 30)), "");
  ASSERT_EQ(p.submit(req(2, 20, 20)), "");
  ASSERT_EQ(p.submit(req(3, 10, 10)), "");  // fits on its own, but waits its turn
  StepPlan a = p.plan(0);
  EXPECT_EQ(a.joined, (std::vector<std::uint64_t>{1, 2}));
  EXPECT_EQ(p.reserved_tokens(), 100);
  EXPECT_EQ(p.queued(), 1u);
  p.finish(2);
  EXPECT_EQ(p.reserved_tokens(), 60);
  StepPlan b = p.plan(1);
  EXPECT_EQ(b.joined, std::vector<std::uint64_t>{3});
  EXPECT_EQ(p.reserved_tokens(), 80);
}

TEST(LmBatchPolicy, AFullQueueRefuses) {
  BatchSettings s;
  s.max_queue = 2;
  BatchPolicy p(s);
  ASSERT_EQ(p.submit(req(1, 1, 1)), "");
  ASSERT_EQ(p.submit(req(2, 1, 1)), "");
  EXPECT_NE(p.submit(req(3, 1, 1)).find("queue full"), std::string::npos);
  EXPECT_NE(p.submit(req(4, 0, 1)).find("empty prompt"), std::string::npos);
}

TEST(LmBatchPolicy, ALongPromptIsPrefilledInChunksWhileOthersDecode) {
  BatchSettings s;
  s.prefill_chunk = 8;
  BatchPolicy p(s);
  ASSERT_EQ(p.submit(req(1, 2, 50)), "");
  p.plan(0);  // request 1's prompt
  ASSERT_EQ(p.submit(req(2, 20, 5)), "");
  int fed = 0;
  for (int step = 1; step <= 3; ++step) {
    StepPlan plan = p.plan(step);
    ASSERT_NE(slot(plan, 1), nullptr) << step;  // decodes every step
    EXPECT_EQ(slot(plan, 1)->count, 1);
    const StepSlot* long_prompt = slot(plan, 2);
    ASSERT_NE(long_prompt, nullptr);
    EXPECT_EQ(long_prompt->first, fed);
    EXPECT_LE(long_prompt->count, 8);
    fed += long_prompt->count;
    EXPECT_EQ(long_prompt->samples, fed == 20);
  }
  EXPECT_EQ(fed, 20);
  StepPlan after = p.plan(4);
  EXPECT_EQ(slot(after, 2)->count, 1);
}

TEST(LmBatchPolicy, PrefillTokensPerStepAreSharedOldestFirst) {
  BatchSettings s;
  s.prefill_chunk = 6;
  BatchPolicy p(s);
  ASSERT_EQ(p.submit(req(1, 4, 5)), "");
  ASSERT_EQ(p.submit(req(2, 4, 5)), "");
  StepPlan a = p.plan(0);
  EXPECT_EQ(slot(a, 1)->count, 4);
  EXPECT_EQ(slot(a, 2)->count, 2);
  EXPECT_FALSE(slot(a, 2)->samples);
  StepPlan b = p.plan(1);
  EXPECT_EQ(slot(b, 1)->count, 1);
  EXPECT_EQ(slot(b, 2)->count, 2);
  EXPECT_TRUE(slot(b, 2)->samples);
}

}  // namespace
}  // namespace swarmflow::lm
