// Continuous batching must not change what a request generates.
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "lm/engine.hpp"

namespace swarmflow::lm {
namespace {

const std::string kModel = std::string(SWARMFLOW_SOURCE_DIR) + "/models/devil-1m.sflm";

const std::vector<std::string> kPrompts = {
    "ABSURDITY, n.", "BORE, n.  A person who talks", "The", "CYNIC, n.  A blackguard whose",
    "LOVE, n.  A temporary insanity curable by", "Q",
};

class LmEngine : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = new Model;
    const Status s = Model::load(kModel, *model_);
    ASSERT_TRUE(s.ok()) << s.message();
  }
  static void TearDownTestSuite() { delete model_; }

  GenerateRequest request(std::uint64_t id, const std::string& prompt, SamplingParams sampling = {}) const {
    const Tokenizer tok(model_->pieces(), model_->config().bos);
    GenerateRequest r;
    r.id = id;
    r.prompt = tok.encode(prompt, true);
    r.max_tokens = 24;
    r.sampling = sampling;
    return r;
  }

  /// Runs `requests`, the i-th submitted before step `arrive_at[i]`; returns
  /// the tokens of each request and checks positions and the final flag.
  std::map<std::uint64_t, std::vector<int>> run(const std::vector<GenerateRequest>& requests,
                                                const std::vector<int>& arrive_at, BatchSettings settings) const {
    Engine engine(*model_, settings);
    std::map<std::uint64_t, std::vector<int>> out;
    std::map<std::uint64_t, bool> done;
    std::size_t next = 0;
    std::vector<TokenEvent> events;
    for (int step = 0; step < 10'000; ++step) {
      while (next < requests.size() && arrive_at[next] <= step) {
        EXPECT_EQ(engine.submit(requests[next], step), "");
        ++next;
      }
      if (next == requests.size() && engine.idle()) break;
      events.clear();
      engine.step(step, events);
      EXPECT_LE(engine.policy().reserved_tokens(), settings.kv_budget_tokens);
      for (const TokenEvent& e : events) {
        EXPECT_FALSE(done[e.request]);
        EXPECT_EQ(e.position, static_cast<int>(out[e.request].size()));
        out[e.request].push_back(e.token);
        done[e.request] = e.final;
      }
    }
    for (const auto& r : requests) EXPECT_TRUE(done[r.id]) << r.id;
    return out;
  }

  static Model* model_;
};
Model* LmEngine::model_ = nullptr;

TEST_F(LmEngine, GreedyBatchedOutputEqualsEachRequestAlone) {
  std::vector<GenerateRequest> requests;
  for (std::size_t i = 0; i < kPrompts.size(); ++i) requests.push_back(request(i + 1, kPrompts[i]));
  BatchSettings batched;
  batched.max_size = 4;
  batched.prefill_chunk = 5;  // prompts spread over several steps
  batched.kv_budget_tokens = 4 * 64;
  const auto together = run(requests, {0, 0, 1, 3, 7, 20}, batched);

  BatchSettings alone;
  alone.max_size = 1;
  for (const auto& r : requests) {
    const auto single = run({r}, {0}, alone);
    EXPECT_EQ(together.at(r.id), single.at(r.id)) << "request " << r.id;
    EXPECT_EQ(single.at(r.id).size(), 24u);
  }
}

TEST_F(LmEngine, TheStepCapLearnsFromStepTimesAndChangesNoResult) {
  // A simulated clock charges each step 100 us + 10 us per token fed, so
  // with max_step_factor 2 the engine settles at 11 tokens per step (12
  // fit within 2 one-token steps; 11 give within 5 % of their tokens/s).
  BatchSettings capped;
  capped.max_size = 16;
  capped.kv_budget_tokens = 100'000;
  capped.max_step_factor = 2;
  Engine engine(*model_, capped);
  std::int64_t now = 0;
  engine.set_clock([&] { return now + 100'000 + 10'000 * engine.step_tokens(); });
  std::vector<GenerateRequest> requests;
  for (std::uint64_t i = 0; i < 20; ++i) requests.push_back(request(i + 1, kPrompts[i % kPrompts.size()]));
  for (const auto& r : requests) ASSERT_EQ(engine.submit(r, 0), "");
  std::map<std::uint64_t, std::vector<int>> out;
  std::vector<TokenEvent> events;
  int capped_steps = 0;
  for (int step = 0; step < 2000 && !engine.idle(); ++step) {
    const int cap = engine.policy().step_token_cap();
    events.clear();
    ASSERT_EQ(engine.step(now, events), 0);
    if (cap > 0) {
      ++capped_steps;
      EXPECT_LE(engine.step_tokens(), cap);
    }
    now += 100'000 + 10'000 * engine.step_tokens();
    for (const TokenEvent& e : events) out[e.request].push_back(e.token);
  }
  EXPECT_TRUE(engine.idle());
  EXPECT_EQ(engine.policy().step_token_cap(), 11);
  EXPECT_GT(capped_steps, 20);
  BatchSettings alone;
  alone.max_size = 1;
  for (std::size_t i = 0; i < kPrompts.size(); ++i) {
    EXPECT_EQ(out.at(requests[i].id), run({requests[i]}, {0}, alone).at(requests[i].id)) << kPrompts[i];
  }
}

TEST_F(LmEngine, CalibrationTimesEveryStepSizeOnTheClockAndLeavesNoTrace) {
  // A simulated clock: each read is later by what a step of the tokens
  // being fed costs (so a step's second read is that much after its
  // first), a knee at 6 tokens (flat before, 110 us a token after).
  auto cost_ns = [](int tokens) -> std::int64_t {
    if (tokens == 0) return 0;
    return tokens <= 6 ? 460'000 + 36'000 * (tokens - 1) : 640'000 + 110'000 * (tokens - 6);
  };
  BatchSettings s;
  s.max_size = 12;
  s.prefill_chunk = 4;
  s.kv_budget_tokens = 16 * 25;  // just room for the scratch caches
  s.max_step_factor = 2.5;
  Engine engine(*model_, s);
  std::int64_t now = 0;
  int reads = 0;
  auto clock = [&] {
    ++reads;
    now += cost_ns(engine.step_tokens());
    return now;
  };
  // 16 tokens (1740 us) are over 1.5 x the budget (1725 us): timed in the
  // first three rounds only; 1 to 15 in all twelve.
  EXPECT_EQ(engine.calibrate(clock), 16);
  EXPECT_EQ(reads, 1 + 2 * (3 * 16 + 9 * 15));
  const StepCost& c = engine.policy().step_cost();
  ASSERT_EQ(c.fastest_ns.size(), 17u);
  for (int t = 1; t <= 16; ++t) EXPECT_EQ(c.fastest_ns[static_cast<std::size_t>(t)], cost_ns(t)) << t;
  // Within 2.5 x 460 us: up to 10 tokens; 6 give the most tokens/s.
  EXPECT_EQ(engine.policy().step_token_cap(), 6);
  EXPECT_TRUE(engine.idle());
  EXPECT_EQ(engine.policy().reserved_tokens(), 0);
  EXPECT_EQ(engine.step_tokens(), 0);

  // What it then generates is what an engine never calibrated generates.
  std::vector<GenerateRequest> requests;
  for (std::uint64_t i = 0; i < 4; ++i) requests.push_back(request(i + 1, kPrompts[i]));
  for (const auto& r : requests) ASSERT_EQ(engine.submit(r, 0), "");
  std::map<std::uint64_t, std::vector<int>> out;
  std::vector<TokenEvent> events;
  for (int step = 0; step < 1000 && !engine.idle(); ++step) {
    events.clear();
    engine.step(step, events);
    for (const TokenEvent& e : events) out[e.request].push_back(e.token);
  }
  BatchSettings alone;
  alone.max_size = 1;
  for (const auto& r : requests) EXPECT_EQ(out.at(r.id), run({r}, {0}, alone).at(r.id));

  // Scratch caches that would not fit in the KV budget: nothing is timed.
  s.kv_budget_tokens = 16 * 25 - 1;
  Engine small(*model_, s);
  EXPECT_EQ(small.calibrate(clock), 0);
  EXPECT_EQ(small.policy().step_token_cap(), 0);
  EXPECT_EQ(small.calibrate(nullptr), 0);
  // Nor when the requests held leave too little of it.
  s.kv_budget_tokens = 16 * 25 + 10;
  Engine busy(*model_, s);
  ASSERT_EQ(busy.submit(request(9, kPrompts[0]), 0), "");
  std::vector<TokenEvent> first;
  ASSERT_EQ(busy.step(0, first), 0);  // running: its cache reserved
  EXPECT_GT(busy.policy().reserved_tokens(), 10);
  EXPECT_EQ(busy.calibrate(clock), 0);
  EXPECT_TRUE(busy.holds(9));

  // Times taken from another engine on the same model and settings give the
  // same cap without a step timed.
  Engine restarted(*model_, engine.policy().settings());
  const int before = reads;
  restarted.take_step_times(engine.policy().step_cost().fastest_ns);
  EXPECT_EQ(reads, before);
  EXPECT_EQ(restarted.policy().step_token_cap(), 6);
}

TEST_F(LmEngine, CalibrationStopsAtTheClocksSecond) {
  BatchSettings s;
  s.max_size = 64;
  s.prefill_chunk = 64;
  s.kv_budget_tokens = 128 * 25;
  Engine engine(*model_, s);  // no factor: every size is a candidate
  std::int64_t now = 0;
  auto clock = [&] {
    now += 5'000'000;  // each read 5 ms later: a step takes 5 ms
    return now;
  };
  // One read to start, two a step, and the first step ending more than
  // 1 s after the start stops it: 101 steps, all in the first round.
  EXPECT_EQ(engine.calibrate(clock), 101);
  EXPECT_EQ(now, 5'000'000LL * (1 + 2 * 101));
  EXPECT_EQ(engine.policy().step_cost().fastest_ns[101], 5'000'000);
  EXPECT_EQ(engine.policy().step_cost().fastest_ns[102], 0);
}

TEST_F(LmEngine, SeededSamplingIsTheSameBatchedOrAlone) {
  SamplingParams s;
  s.temperature = 0.9;
  s.top_k = 40;
  s.top_p = 0.95;
  std::vector<GenerateRequest> requests;
  for (std::size_t i = 0; i < 4; ++i) {
    s.seed = 100 + i;
    requests.push_back(request(i + 1, kPrompts[i], s));
  }
  BatchSettings batched;
  batched.max_size = 3;
  const auto together = run(requests, {0, 0, 0, 2}, batched);
  BatchSettings alone;
  alone.max_size = 1;
  for (const auto& r : requests) EXPECT_EQ(together.at(r.id), run({r}, {0}, alone).at(r.id));
  // A different seed gives a different text.
  GenerateRequest other = requests[0];
  other.sampling.seed = 7;
  EXPECT_NE(run({other}, {0}, alone).at(other.id), together.at(requests[0].id));
}

TEST_F(LmEngine, TemperatureZeroIsDeterministic) {
  BatchSettings settings;
  const auto a = run({request(1, "DOG, n.")}, {0}, settings);
  const auto b = run({request(1, "DOG, n.")}, {0}, settings);
  EXPECT_EQ(a, b);
}

TEST_F(LmEngine, StopsAtAStopString) {
  Engine engine(*model_, BatchSettings{});
  GenerateRequest r = request(1, "DOG, n.");
  r.max_tokens = 200;
  // The greedy continuation, cut at its first space after a few tokens.
  const auto full = run({r}, {0}, BatchSettings{});
  const Tokenizer tok(model_->pieces(), model_->config().bos);
  const std::string text = tok.decode(full.at(1));
  ASSERT_NE(text.find(' '), std::string::npos) << text;
  r.stop = {" "};
  r.max_tokens = 200;
  ASSERT_EQ(engine.submit(r, 0), "");
  std::vector<TokenEvent> events;
  for (int i = 0; i < 300 && !engine.idle(); ++i) engine.step(i, events);
  ASSERT_FALSE(events.empty());
  EXPECT_TRUE(events.back().final);
  EXPECT_EQ(events.back().finish_reason, "stop");
  std::string got;
  for (const auto& e : events) got += e.piece;
  EXPECT_EQ(got, text.substr(0, text.find(' ') + 1));
}

TEST_F(LmEngine, RefusesWhatCanNeverFitAndFreesTheCacheOnCancel) {
  BatchSettings settings;
  settings.kv_budget_tokens = 40;
  Engine engine(*model_, settings);
  GenerateRequest big = request(1, "LAWYER, n.  One skilled in the circumvention of the law.");
  big.max_tokens = 10;
  const std::string why = engine.submit(big, 0);
  EXPECT_NE(why.find("more than the budget of 40"), std::string::npos) << why;

  GenerateRequest small = request(2, "CAT");
  small.max_tokens = 30;
  ASSERT_EQ(engine.submit(small, 0), "");
  std::vector<TokenEvent> events;
  engine.step(0, events);
  EXPECT_EQ(engine.policy().reserved_tokens(), 34);
  engine.cancel(2);
  EXPECT_EQ(engine.policy().reserved_tokens(), 0);
  EXPECT_TRUE(engine.idle());
}

/// Steps until idle; the last token emitted at each position, per request.
std::map<std::uint64_t, std::vector<int>> latest(Engine& e, std::vector<TokenEvent>* all = nullptr) {
  std::map<std::uint64_t, std::vector<int>> r;
  std::vector<TokenEvent> ev;
  for (int guard = 0; !e.idle() && guard < 10000; ++guard) {
    ev.clear();
    e.step(0, ev);
    for (const auto& t : ev) {
      auto& v = r[t.request];
      if (static_cast<int>(v.size()) <= t.position) v.resize(static_cast<std::size_t>(t.position) + 1, -1);
      v[static_cast<std::size_t>(t.position)] = t.token;
      if (all) all->push_back(t);
    }
  }
  return r;
}

TEST_F(LmEngine, AReplicaThatLiesDivergesAndAgreedTokensFedBackBringItBack) {
  BatchSettings b;
  Engine honest(*model_, b);
  ASSERT_EQ(honest.submit(request(1, kPrompts[0]), 0), "");
  const auto truth = latest(honest);
  ASSERT_EQ(truth.at(1).size(), 24u);

  // Every 5th token it samples is another one, and it goes on from it.
  int lies = 0;
  auto liar_engine = [&] {
    auto e = std::make_unique<Engine>(*model_, b);
    e->set_tamper([&lies, n = 0](std::uint64_t, int, int& token, double& logprob) mutable {
      if (++n % 5 == 0) {
        token = (token + 3) % 257;
        logprob = std::log(0.99);
        ++lies;
      }
    });
    return e;
  };
  auto alone = liar_engine();
  ASSERT_EQ(alone->submit(request(1, kPrompts[0]), 0), "");
  EXPECT_NE(latest(*alone).at(1), truth.at(1));  // left alone it ends elsewhere
  EXPECT_GT(lies, 0);

  // Fed each agreed token as the honest replica makes it, a step behind, it
  // replaces what it got wrong and ends with the agreed text.
  auto liar = liar_engine();
  Engine reference(*model_, b);
  ASSERT_EQ(liar->submit(request(1, kPrompts[0]), 0), "");
  ASSERT_EQ(reference.submit(request(1, kPrompts[0]), 0), "");
  std::map<std::uint64_t, std::vector<int>> got;
  std::vector<TokenEvent> ev;
  int replaced = 0;
  for (int guard = 0; !liar->idle() && guard < 10000; ++guard) {
    ev.clear();
    liar->step(0, ev);
    for (const auto& t : ev) {
      auto& v = got[t.request];
      if (static_cast<int>(v.size()) <= t.position) v.resize(static_cast<std::size_t>(t.position) + 1, -1);
      v[static_cast<std::size_t>(t.position)] = t.token;
    }
    ev.clear();
    reference.step(0, ev);
    for (const auto& t : ev) {
      if (liar->resync(t.request, t.position, t.token)) {
        ++replaced;
        got[t.request][static_cast<std::size_t>(t.position)] = t.token;  // the decision stands there
      }
    }
  }
  EXPECT_EQ(got.at(1), truth.at(1));
  EXPECT_GT(replaced, 0);
}

TEST_F(LmEngine, AnAgreedTokenAheadOfAReplicaIsTakenWhenItGetsThere) {
  BatchSettings b;
  Engine e(*model_, b);
  ASSERT_EQ(e.submit(request(1, kPrompts[1]), 0), "");
  EXPECT_FALSE(e.resync(1, 3, 'Z'));  // not there yet
  EXPECT_FALSE(e.resync(2, 0, 'Z'));  // no such request
  std::vector<TokenEvent> all;
  const auto tokens = latest(e, &all);
  EXPECT_EQ(tokens.at(1)[3], 'Z');
  for (const auto& t : all) {
    if (t.position == 3) {
      EXPECT_LT(t.logprob, 0.0);  // its probability under the model, not 1
    }
  }
}
}  // namespace
}  // namespace swarmflow::lm
