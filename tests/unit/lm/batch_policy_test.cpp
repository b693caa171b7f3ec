// The iteration-level batching policy, on a simulated clock.
#include <map>

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

// A simulated machine: a step costs `fixed` plus `per_token` per token fed.
std::int64_t step_ns(int tokens, std::int64_t fixed, std::int64_t per_token) { return fixed + per_token * tokens; }

TEST(LmBatchPolicy, TheStepCostIsFittedToMeasuredStepsAndSetsTheCap) {
  BatchSettings s;
  s.max_step_factor = 2;
  BatchPolicy p(s);
  EXPECT_EQ(p.step_token_cap(), 0);  // nothing measured: no cap yet
  for (int i = 0; i < 40; ++i) {
    const int tokens = 1 + (i * 7) % 16;
    p.observe_step(tokens, step_ns(tokens, 100'000, 10'000));
  }
  EXPECT_NEAR(p.step_cost().fixed_ns, 100'000, 1);
  EXPECT_NEAR(p.step_cost().per_token_ns, 10'000, 0.01);
  // 100 + 10 T <= 2 x (100 + 10): T <= 12.
  EXPECT_EQ(p.step_token_cap(), 12);

  // The machine gets slower per token: the cap follows.
  for (int i = 0; i < 400; ++i) {
    const int tokens = 1 + (i * 5) % 9;
    p.observe_step(tokens, step_ns(tokens, 20'000, 40'000));
  }
  EXPECT_NEAR(p.step_cost().per_token_ns, 40'000, 400);
  EXPECT_EQ(p.step_token_cap(), 2);  // 20 + 40 T <= 2 x 60

  // A step held up by the machine moves the fit little.
  p.observe_step(5, 50 * kMs);
  EXPECT_EQ(p.step_token_cap(), 2);

  BatchSettings off;
  BatchPolicy q(off);
  for (int i = 0; i < 40; ++i) q.observe_step(1 + i % 4, step_ns(1 + i % 4, 100'000, 10'000));
  EXPECT_GT(q.step_cost().per_token_ns, 0);
  EXPECT_EQ(q.step_token_cap(), 0);  // max_step_factor 0: measured, not capped
}

TEST(LmBatchPolicy, StepsStayWithinTheCapAndEveryRequestAdvances) {
  BatchSettings s;
  s.max_size = 16;
  s.prefill_chunk = 64;
  s.kv_budget_tokens = 100'000;
  s.max_step_factor = 2;
  BatchPolicy p(s);
  // Requests of different prompt lengths keep arriving; the simulated clock
  // charges each step by the tokens it feeds.
  std::int64_t now = 0;
  std::uint64_t next_id = 1;
  std::map<std::uint64_t, int> left;  // tokens still to generate
  std::map<std::uint64_t, int> prompt;
  int capped_steps = 0;
  for (int step = 0; step < 600; ++step) {
    if (next_id <= 120) {  // one a step: more than 12 tokens a step can serve
      const int n = 2 + static_cast<int>(next_id % 9);
      ASSERT_EQ(p.submit(req(next_id, n, 20, now)), "");
      left[next_id] = 20;
      prompt[next_id] = n;
      ++next_id;
    }
    const int cap = p.step_token_cap();
    StepPlan plan = p.plan(now);
    if (plan.slots.empty()) continue;
    int tokens = 0;
    for (const StepSlot& slot : plan.slots) tokens += slot.count;
    if (cap > 0) {
      ++capped_steps;
      EXPECT_EQ(cap, 12);
      EXPECT_LE(tokens, cap) << "step " << step;
      // Requests join only while the batch is under the cap.
      if (!plan.joined.empty()) {
        EXPECT_LE(p.running(), static_cast<std::size_t>(cap)) << "step " << step;
      }
    }
    const std::int64_t took = step_ns(tokens, 100'000, 10'000);
    p.observe_step(tokens, took);
    now += took;
    for (const StepSlot& slot : plan.slots) {
      if (!slot.samples) continue;
      if (--left[slot.id] == 0) p.finish(slot.id);
    }
  }
  EXPECT_GT(capped_steps, 200);
  // Every request ran to its end.
  for (const auto& [id, n] : left) EXPECT_EQ(n, 0) << "request " << id;
}

}  // namespace
}  // namespace swarmflow::lm
