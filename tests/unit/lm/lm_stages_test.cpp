// The lm stages driven one at a time, without actors.
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <vector>
#include <string>

#include <unistd.h>

#include <gtest/gtest.h>

#include <swarmflow/report.hpp>

#include "lm/lm.hpp"
#include "lm/lm_stages.hpp"
#include "support/stage_runner.hpp"

namespace swarmflow {
namespace {

using testing::StageRunner;

const std::string kModel = std::string(SWARMFLOW_SOURCE_DIR) + "/models/devil-1m.sflm";

Envelope prompt(std::uint64_t id, const std::string& text, int max_tokens) {
  flatbuffers::FlatBufferBuilder fbb;
  const auto t = fbb.CreateString(text);
  fbb.Finish(schema::CreatePrompt(fbb, id, t, 0, max_tokens), schema::PromptIdentifier());
  EnvelopeHeader h;
  h.stream = id;
  return Envelope(h, Payload::from_builder(fbb));
}

class LmStages : public ::testing::Test {
 protected:
  void SetUp() override { register_lm_stages(registry_); }
  Registry registry_;
};

TEST_F(LmStages, GenerateEmitsOneEnvelopePerTokenWithItsVoteKeyAndProbability) {
  StageRunner gen(registry_, "lm.generate");
  ASSERT_TRUE(gen.set("model", kModel).ok());
  ASSERT_TRUE(gen.start().ok());
  ASSERT_TRUE(gen.feed("in", prompt(7, "DOG, n.", 12)).ok());
  // Tokens come in steps of its own, which it asks for.
  EXPECT_TRUE(gen.output("out").empty());
  EXPECT_GT(gen.deferred_until(), 0);
  ASSERT_TRUE(gen.run_deferred().ok());
  EXPECT_EQ(gen.deferred_until(), 0);  // nothing left in hand
  const auto& out = gen.output("out");
  ASSERT_EQ(out.size(), 12u);
  for (std::size_t i = 0; i < out.size(); ++i) {
    const auto* t = out[i].as<schema::Tokens>();
    ASSERT_NE(t, nullptr);
    ASSERT_EQ(t->ids()->size(), 1u);
    EXPECT_EQ(t->request_id(), 7u);
    EXPECT_EQ(t->position(), i);
    EXPECT_EQ(t->final(), i + 1 == out.size());
    EXPECT_EQ(out[i].header().stream, 7u);
    EXPECT_EQ(out[i].header().seq, i);
    EXPECT_EQ(out[i].header().vote_key, static_cast<std::uint64_t>(t->ids()->Get(0)));
    EXPECT_NEAR(out[i].header().confidence, std::exp(t->logprobs()->Get(0)), 1e-6);
    EXPECT_FLOAT_EQ(t->confidence()->Get(0), out[i].header().confidence);
    EXPECT_EQ(t->pieces()->Get(0)->str(), std::string(1, static_cast<char>(t->ids()->Get(0))));
  }
  EXPECT_EQ(out.back().as<schema::Tokens>()->finish_reason()->str(), "length");
  EXPECT_EQ(gen.counter_value("tokens"), 12);
  EXPECT_EQ(gen.counter_value("requests"), 1);
}

TEST_F(LmStages, GenerateRefusesARequestOverTheKvBudgetWithAReason) {
  StageRunner gen(registry_, "lm.generate");
  ASSERT_TRUE(gen.set("model", kModel).ok());
  ASSERT_TRUE(gen.set("batch.kv_budget_tokens", std::int64_t{16}).ok());
  ASSERT_TRUE(gen.start().ok());
  ASSERT_TRUE(gen.feed("in", prompt(3, "LAWYER, n.", 32)).ok());
  const auto& out = gen.output("out");
  ASSERT_EQ(out.size(), 1u);
  const auto* t = out[0].as<schema::Tokens>();
  EXPECT_TRUE(t->final());
  EXPECT_EQ(t->request_id(), 3u);
  EXPECT_NE(t->finish_reason()->str().find("refused: needs 43 tokens"), std::string::npos) << t->finish_reason()->str();
  EXPECT_EQ(gen.counter_value("refused"), 1);
}

TEST_F(LmStages, TokenizeGenerateDetokenizeGiveTheGeneratedText) {
  StageRunner tok(registry_, "lm.tokenize");
  ASSERT_TRUE(tok.set("model", kModel).ok());
  ASSERT_TRUE(tok.start().ok());
  ASSERT_TRUE(tok.feed("in", prompt(1, "CAT, n.", 10)).ok());
  ASSERT_EQ(tok.output("out").size(), 1u);
  const auto* p = tok.output("out")[0].as<schema::Prompt>();
  ASSERT_EQ(p->tokens()->size(), 8u);  // BOS and 7 bytes
  EXPECT_EQ(p->tokens()->Get(0), 256);
  EXPECT_EQ(p->max_tokens(), 10);

  StageRunner gen(registry_, "lm.generate");
  ASSERT_TRUE(gen.set("model", kModel).ok());
  ASSERT_TRUE(gen.start().ok());
  ASSERT_TRUE(gen.feed("in", tok.output("out")[0]).ok());
  ASSERT_TRUE(gen.run_deferred().ok());
  StageRunner detok(registry_, "lm.detokenize");
  ASSERT_TRUE(detok.start().ok());
  std::string expected;
  for (const auto& e : gen.output("out")) {
    expected += e.as<schema::Tokens>()->pieces()->Get(0)->str();
    ASSERT_TRUE(detok.feed("in", e).ok());
  }
  ASSERT_EQ(detok.output("out").size(), 1u);
  const auto* c = detok.output("out")[0].as<schema::Completion>();
  EXPECT_EQ(c->request_id(), 1u);
  EXPECT_EQ(c->text()->str(), expected);
  EXPECT_EQ(c->tokens(), 10u);
  EXPECT_EQ(c->finish_reason()->str(), "length");
}

Envelope cancel(std::uint64_t id) {
  flatbuffers::FlatBufferBuilder fbb;
  schema::PromptBuilder b(fbb);
  b.add_request_id(id);
  b.add_cancel(true);
  fbb.Finish(b.Finish(), schema::PromptIdentifier());
  EnvelopeHeader h;
  h.stream = id;
  h.seq = 1;
  return Envelope(h, Payload::from_builder(fbb));
}

/// Request id -> its token ids, from token envelopes.
std::map<std::uint64_t, std::vector<int>> by_request(const std::vector<Envelope>& out) {
  std::map<std::uint64_t, std::vector<int>> r;
  for (const auto& e : out) {
    const auto* t = e.as<schema::Tokens>();
    if (t->ids() != nullptr && t->ids()->size() > 0) {
      EXPECT_EQ(t->position(), r[t->request_id()].size());
      r[t->request_id()].push_back(t->ids()->Get(0));
    }
  }
  return r;
}

const std::vector<std::string> kPrompts = {"DOG, n.", "LAWYER, n. One skilled", "CAT, n.", "PEACE, n."};

TEST_F(LmStages, GenerateBatchesTheRequestsItHoldsAndGivesEachTheTokensItWouldGetAlone) {
  std::map<std::uint64_t, std::vector<int>> alone;
  for (std::size_t i = 0; i < kPrompts.size(); ++i) {
    StageRunner gen(registry_, "lm.generate");
    ASSERT_TRUE(gen.set("model", kModel).ok());
    ASSERT_TRUE(gen.start().ok());
    ASSERT_TRUE(gen.feed("in", prompt(i + 1, kPrompts[i], 16)).ok());
    ASSERT_TRUE(gen.run_deferred().ok());
    alone[i + 1] = by_request(gen.output("out"))[i + 1];
    ASSERT_EQ(alone[i + 1].size(), 16u);
  }
  StageRunner gen(registry_, "lm.generate");
  ASSERT_TRUE(gen.set("model", kModel).ok());
  ASSERT_TRUE(gen.start().ok());
  // Two arrive, then two more after a few steps: they join the running batch.
  ASSERT_TRUE(gen.feed("in", prompt(1, kPrompts[0], 16)).ok());
  ASSERT_TRUE(gen.feed("in", prompt(2, kPrompts[1], 16)).ok());
  ASSERT_TRUE(gen.run_deferred(3).ok());
  ASSERT_TRUE(gen.feed("in", prompt(3, kPrompts[2], 16)).ok());
  ASSERT_TRUE(gen.feed("in", prompt(4, kPrompts[3], 16)).ok());
  ASSERT_TRUE(gen.run_deferred().ok());
  EXPECT_EQ(by_request(gen.output("out")), alone);
  // Fewer steps than tokens: requests shared steps.
  EXPECT_EQ(gen.counter_value("tokens"), 64);
  EXPECT_LT(gen.counter_value("steps"), 40);
  // Each prompt fits one prefill chunk, whose step gives its first token:
  // every slot of every step gave a token.
  EXPECT_EQ(gen.counter_value("batch_slots"), 64);
  // TTFT, TPOT and batch sizes are histograms in the run report.
  std::int64_t ttfts = 0;
  for (int b = 0; b < 10000; ++b) ttfts += gen.counter_value("hist.ttft_ms." + std::to_string(b));
  EXPECT_EQ(ttfts, 4);
  std::int64_t batch_steps = 0;
  for (int size = 1; size <= 4; ++size) batch_steps += gen.counter_value("hist.batch_size." + std::to_string(value_buckets::bucket(size)));
  EXPECT_EQ(batch_steps, gen.counter_value("steps"));
  EXPECT_GT(gen.counter_value("hist.batch_size." + std::to_string(value_buckets::bucket(4))), 0);
}

TEST_F(LmStages, WithAStepFactorGenerateTimesItsStepSizesAtItsFirstStepAndKeepsItsStepsWithinTheCap) {
  struct Run {
    std::map<std::uint64_t, std::vector<int>> tokens;
    std::int64_t steps = 0, step_tokens = 0;
    std::map<int, std::int64_t> caps;  // cap -> steps it held
  };
  auto run = [&](double factor) {
    StageRunner gen(registry_, "lm.generate");
    EXPECT_TRUE(gen.set("model", kModel).ok());
    EXPECT_TRUE(gen.set("batch.max_size", std::int64_t{8}).ok());
    EXPECT_TRUE(gen.set("batch.prefill_chunk", std::int64_t{8}).ok());
    EXPECT_TRUE(gen.set("batch.max_step_factor", factor).ok());
    EXPECT_TRUE(gen.start().ok());
    // A clock that stands still: every step run takes 0 ns and teaches the
    // policy nothing, so a cap can only come from the sizes timed on the
    // thread's CPU time before the first step.
    gen.set_now_ns(1);
    for (std::size_t i = 0; i < 8; ++i) EXPECT_TRUE(gen.feed("in", prompt(i + 1, kPrompts[i % kPrompts.size()], 12)).ok());
    EXPECT_TRUE(gen.run_deferred().ok());
    Run r;
    r.tokens = by_request(gen.output("out"));
    r.steps = gen.counter_value("steps");
    r.step_tokens = gen.counter_value("step_tokens");
    for (int cap = 0; cap <= 16; ++cap) {
      const std::int64_t n = gen.counter_value("hist.step_token_cap." + std::to_string(value_buckets::bucket(cap)));
      if (n > 0) r.caps[cap] = n;
    }
    EXPECT_EQ(gen.counter_value("tokens"), 96);
    return r;
  };
  const Run free = run(0);
  const Run capped = run(1.5);
  EXPECT_TRUE(free.caps.empty());  // no factor: no cap
  // One cap for every step, from the timed sizes.
  ASSERT_EQ(capped.caps.size(), 1u);
  const int cap = capped.caps.begin()->first;
  EXPECT_GE(cap, 1);
  EXPECT_LE(cap, 16);
  EXPECT_EQ(capped.caps.begin()->second, capped.steps);
  EXPECT_LE(capped.step_tokens, cap * capped.steps);
  EXPECT_EQ(capped.step_tokens, free.step_tokens);  // the same prompts and tokens fed
  // The cap changes when a request's tokens come, not which they are.
  EXPECT_EQ(capped.tokens, free.tokens);
}

TEST_F(LmStages, AGenerateReplicaThatTakesOverASnapshotGoesOnWhereTheOtherWas) {
  StageRunner whole(registry_, "lm.generate");
  ASSERT_TRUE(whole.set("model", kModel).ok());
  ASSERT_TRUE(whole.start().ok());
  ASSERT_TRUE(whole.feed("in", prompt(1, kPrompts[0], 20)).ok());
  ASSERT_TRUE(whole.feed("in", prompt(2, kPrompts[1], 20)).ok());
  ASSERT_TRUE(whole.run_deferred().ok());

  StageRunner first(registry_, "lm.generate");
  ASSERT_TRUE(first.set("model", kModel).ok());
  ASSERT_TRUE(first.start().ok());
  ASSERT_TRUE(first.feed("in", prompt(1, kPrompts[0], 20)).ok());
  ASSERT_TRUE(first.feed("in", prompt(2, kPrompts[1], 20)).ok());
  ASSERT_TRUE(first.run_deferred(7).ok());
  std::string state;
  ASSERT_TRUE(first.stage().snapshot(state));
  StageRunner second(registry_, "lm.generate");
  ASSERT_TRUE(second.set("model", kModel).ok());
  ASSERT_TRUE(second.start().ok());
  ASSERT_TRUE(second.stage().restore(state).ok());
  EXPECT_GT(second.deferred_until(), 0);  // it asks to go on at once
  ASSERT_TRUE(second.run_deferred().ok());
  // What the first made, then what the second made, is the whole stream.
  std::vector<Envelope> joined = first.output("out");
  for (const auto& e : second.output("out")) joined.push_back(e);
  EXPECT_EQ(by_request(joined), by_request(whole.output("out")));
  EXPECT_EQ(by_request(joined)[1].size(), 20u);

  // A damaged snapshot is refused with a reason.
  StageRunner third(registry_, "lm.generate");
  ASSERT_TRUE(third.set("model", kModel).ok());
  ASSERT_TRUE(third.start().ok());
  EXPECT_TRUE(third.stage().restore(state.substr(0, state.size() - 3)).is_error());
}

TEST_F(LmStages, ACancelledRequestEndsAtOnceAndFreesItsCache) {
  StageRunner gen(registry_, "lm.generate");
  ASSERT_TRUE(gen.set("model", kModel).ok());
  ASSERT_TRUE(gen.set("batch.kv_budget_tokens", std::int64_t{40}).ok());
  ASSERT_TRUE(gen.start().ok());
  ASSERT_TRUE(gen.feed("in", prompt(1, kPrompts[0], 30)).ok());  // 8 + 30 of 40 tokens
  ASSERT_TRUE(gen.run_deferred(3).ok());
  ASSERT_TRUE(gen.feed("in", cancel(1)).ok());
  ASSERT_TRUE(gen.run_deferred().ok());
  const auto& out = gen.output("out");
  ASSERT_FALSE(out.empty());
  const auto* last = out.back().as<schema::Tokens>();
  EXPECT_TRUE(last->final());
  EXPECT_EQ(last->finish_reason()->str(), "cancelled");
  EXPECT_LT(out.size(), 10u);
  EXPECT_EQ(gen.counter_value("cancelled"), 1);
  // Its reservation is free: a request as large fits at once.
  ASSERT_TRUE(gen.feed("in", prompt(2, kPrompts[0], 30)).ok());
  ASSERT_TRUE(gen.run_deferred().ok());
  EXPECT_EQ(by_request(gen.output("out"))[2].size(), 30u);
  EXPECT_EQ(gen.counter_value("refused"), 0);
  // Cancelling what it does not hold (finished, or never seen) emits nothing.
  const std::size_t before = gen.output("out").size();
  ASSERT_TRUE(gen.feed("in", cancel(2)).ok());
  ASSERT_TRUE(gen.feed("in", cancel(99)).ok());
  EXPECT_EQ(gen.output("out").size(), before);
}

TEST_F(LmStages, FaultInjectionMakesTheChosenReplicaLieOrFail) {
  StageRunner honest(registry_, "lm.generate");
  ASSERT_TRUE(honest.set("model", kModel).ok());
  ASSERT_TRUE(honest.start().ok());
  ASSERT_TRUE(honest.feed("in", prompt(1, kPrompts[0], 20)).ok());
  ASSERT_TRUE(honest.run_deferred().ok());

  StageRunner liar(registry_, "lm.generate");
  ASSERT_TRUE(liar.set("model", kModel).ok());
  ASSERT_TRUE(liar.set("fault.lie_every", std::int64_t{4}).ok());
  ASSERT_TRUE(liar.start().ok());  // replica 0: fault.replica's default
  ASSERT_TRUE(liar.feed("in", prompt(1, kPrompts[0], 20)).ok());
  ASSERT_TRUE(liar.run_deferred().ok());
  EXPECT_EQ(liar.counter_value("lies"), 5);
  const auto& lies = liar.output("out");
  ASSERT_EQ(lies.size(), 20u);
  EXPECT_FLOAT_EQ(lies[3].header().confidence, 0.99F);  // the 4th token, confidently wrong
  EXPECT_NE(lies[3].header().vote_key, honest.output("out")[3].header().vote_key);
  EXPECT_EQ(lies[2].header().vote_key, honest.output("out")[2].header().vote_key);

  // Fed the honest tokens back on `agreed`, it goes on from them.
  StageRunner fixed(registry_, "lm.generate");
  ASSERT_TRUE(fixed.set("model", kModel).ok());
  ASSERT_TRUE(fixed.set("fault.lie_every", std::int64_t{4}).ok());
  ASSERT_TRUE(fixed.start().ok());
  ASSERT_TRUE(fixed.feed("in", prompt(1, kPrompts[0], 20)).ok());
  for (const auto& e : honest.output("out")) ASSERT_TRUE(fixed.feed("agreed", e).ok());
  ASSERT_TRUE(fixed.run_deferred().ok());
  EXPECT_EQ(by_request(fixed.output("out")), by_request(honest.output("out")));

  StageRunner other(registry_, "lm.generate");
  ASSERT_TRUE(other.set("model", kModel).ok());
  ASSERT_TRUE(other.set("fault.lie_every", std::int64_t{4}).ok());
  ASSERT_TRUE(other.set("fault.replica", std::int64_t{1}).ok());
  ASSERT_TRUE(other.start().ok());  // replica 0 is not the faulty one
  ASSERT_TRUE(other.feed("in", prompt(1, kPrompts[0], 20)).ok());
  ASSERT_TRUE(other.run_deferred().ok());
  EXPECT_EQ(other.counter_value("lies"), 0);

  StageRunner crashing(registry_, "lm.generate");
  ASSERT_TRUE(crashing.set("model", kModel).ok());
  ASSERT_TRUE(crashing.set("fault.crash_every", std::int64_t{3}).ok());
  ASSERT_TRUE(crashing.start().ok());
  ASSERT_TRUE(crashing.feed("in", prompt(1, kPrompts[0], 20)).ok());
  EXPECT_TRUE(crashing.run_deferred().is_error());
  EXPECT_EQ(crashing.counter_value("crashes"), 1);
}

Envelope token(std::uint64_t request, std::uint64_t position, char c, bool final) {
  flatbuffers::FlatBufferBuilder fbb;
  const auto ids = fbb.CreateVector(std::vector<int>{c});
  const auto pieces = fbb.CreateVector(std::vector<flatbuffers::Offset<flatbuffers::String>>{fbb.CreateString(std::string(1, c))});
  const auto reason = fbb.CreateString(final ? "length" : "");
  schema::TokensBuilder b(fbb);
  b.add_ids(ids);
  b.add_pieces(pieces);
  b.add_position(position);
  b.add_final(final);
  b.add_request_id(request);
  b.add_finish_reason(reason);
  fbb.Finish(b.Finish(), schema::TokensIdentifier());
  EnvelopeHeader h;
  h.stream = request;
  h.seq = position;
  return Envelope(h, Payload::from_builder(fbb));
}

TEST_F(LmStages, DetokenizePutsTokensInTheirPlaceWhateverOrderTheyComeIn) {
  // As a voter may decide them: out of order, the final one before others.
  StageRunner detok(registry_, "lm.detokenize");
  ASSERT_TRUE(detok.start().ok());
  ASSERT_TRUE(detok.feed("in", token(4, 1, 'b', false)).ok());
  ASSERT_TRUE(detok.feed("in", token(4, 3, 'd', true)).ok());
  ASSERT_TRUE(detok.feed("in", token(4, 0, 'a', false)).ok());
  EXPECT_TRUE(detok.output("out").empty());  // position 2 is missing
  // A snapshot now and a restored replica finish it the same way.
  std::string state;
  ASSERT_TRUE(detok.stage().snapshot(state));
  StageRunner other(registry_, "lm.detokenize");
  ASSERT_TRUE(other.start().ok());
  ASSERT_TRUE(other.stage().restore(state).ok());
  for (StageRunner* r : {&detok, &other}) {
    ASSERT_TRUE(r->feed("in", token(4, 2, 'c', false)).ok());
    ASSERT_EQ(r->output("out").size(), 1u);
    const auto* c = r->output("out")[0].as<schema::Completion>();
    EXPECT_EQ(c->text()->str(), "abcd");
    EXPECT_EQ(c->tokens(), 4u);
    EXPECT_EQ(c->finish_reason()->str(), "length");
  }
  EXPECT_TRUE(other.stage().restore(state.substr(0, state.size() - 1)).is_error());
}

TEST_F(LmStages, PromptsReadsTextAndJsonLines) {
  const std::string path = ::testing::TempDir() + "lm_prompts.txt";
  {
    std::ofstream f(path);
    f << "FIRST, n.\n\n{\"prompt\": \"SECOND\", \"id\": 10, \"max_tokens\": 5, \"stop\": [\"x\", \"y\"]}\nTHIRD\n";
  }
  StageRunner src(registry_, "lm.prompts");
  ASSERT_TRUE(src.set("path", path).ok());
  ASSERT_TRUE(src.set("max_tokens", std::int64_t{9}).ok());
  ASSERT_TRUE(src.start().ok());
  ASSERT_TRUE(src.pull_all().is_end_of_stream());
  const auto& out = src.output("out");
  ASSERT_EQ(out.size(), 3u);
  const auto* a = out[0].as<schema::Prompt>();
  const auto* b = out[1].as<schema::Prompt>();
  const auto* c = out[2].as<schema::Prompt>();
  EXPECT_EQ(a->text()->str(), "FIRST, n.");
  EXPECT_EQ(a->request_id(), 1u);
  EXPECT_EQ(a->max_tokens(), 9);
  EXPECT_EQ(b->request_id(), 10u);
  EXPECT_EQ(b->max_tokens(), 5);
  EXPECT_EQ(b->stop()->size(), 2u);
  EXPECT_EQ(c->request_id(), 11u);
  EXPECT_EQ(out[2].header().stream, 11u);
  EXPECT_EQ(src.counter_value("expected"), 3);

  StageRunner bad(registry_, "lm.prompts");
  ASSERT_TRUE(bad.set("path", std::string("/nonexistent/prompts.txt")).ok());
  EXPECT_TRUE(bad.start().is_error());
}

TEST_F(LmStages, StagesNamingOneModelFileShareOneLoadedModelUntilTheFileChanges) {
  namespace fs = std::filesystem;
  const fs::path copy = fs::temp_directory_path() / ("swarmflow-shared-model-" + std::to_string(::getpid()) + ".sflm");
  fs::copy_file(kModel, copy, fs::copy_options::overwrite_existing);
  std::shared_ptr<const lm::Model> a, b, c;
  ASSERT_TRUE(lm::shared_model(copy.string(), a).ok());
  ASSERT_TRUE(lm::shared_model(copy.string(), b).ok());
  EXPECT_EQ(a.get(), b.get());  // one load while one is held
  // The file written again (a newer time): loaded anew, the old one kept
  // by those that hold it.
  fs::last_write_time(copy, fs::last_write_time(copy) + std::chrono::seconds(5));
  ASSERT_TRUE(lm::shared_model(copy.string(), c).ok());
  EXPECT_NE(c.get(), a.get());
  EXPECT_EQ(c->config().vocab, a->config().vocab);
  // A file that is not there fails with its name, as Model::load does.
  std::shared_ptr<const lm::Model> none;
  const Status missing = lm::shared_model((copy.string() + ".missing"), none);
  EXPECT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find(".missing"), std::string::npos);
  EXPECT_EQ(none, nullptr);
  fs::remove(copy);
}

TEST_F(LmStages, AMissingModelFailsStartWithItsName) {
  StageRunner gen(registry_, "lm.generate");
  ASSERT_TRUE(gen.set("model", std::string("/nonexistent/x.sflm")).ok());
  const Status s = gen.start();
  ASSERT_TRUE(s.is_error());
  EXPECT_NE(s.message().find("/nonexistent/x.sflm"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace swarmflow
