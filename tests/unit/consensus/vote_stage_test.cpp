// consensus.vote driven by the StageRunner: candidates from three replicas,
// decisions with the winning payload, the deadline by call back, and wrong
// decisions counted against a reference.

#include <gtest/gtest.h>

#include <swarmflow/schema/blob_generated.h>
#include <swarmflow/schema/consensus_generated.h>

#include "consensus/consensus.hpp"
#include "support/stage_runner.hpp"

namespace swarmflow {
namespace {

constexpr std::int64_t kMs = 1'000'000;

Envelope candidate(std::uint64_t seq, std::uint64_t key, float confidence) {
  flatbuffers::FlatBufferBuilder fbb;
  fbb.Finish(schema::CreateBlob(fbb, 0, seq), schema::BlobIdentifier());
  EnvelopeHeader h;
  h.stream = 1;
  h.seq = seq;
  h.vote_key = key;
  h.confidence = confidence;
  return Envelope(h, Payload::from_builder(fbb));
}

struct Voter {
  Registry registry;
  std::unique_ptr<testing::StageRunner> runner;
  explicit Voter(const std::vector<std::pair<std::string, ParamValue>>& params = {}) {
    register_consensus_stages(registry);
    runner = std::make_unique<testing::StageRunner>(registry, "consensus.vote", "vote");
    runner->set_producers("candidates", 3);
    runner->set_producers("reference", 1);
    for (const auto& [name, value] : params) EXPECT_TRUE(runner->set(name, value).ok()) << name;
    runner->set_now_ns(1000 * kMs);
    EXPECT_TRUE(runner->start().ok());
  }
  Status vote(int replica, const Envelope& e) { return runner->feed_from("candidates", e, "detect", replica); }
  const std::vector<Envelope>& decisions() { return runner->output("decisions"); }
  const std::vector<Envelope>& out() { return runner->output("out"); }
};

TEST(ConsensusVote, PassesTheWinningCandidateOnWithItsRecord) {
  Voter v;
  const Envelope liar = candidate(0, 666, 0.99F);
  const Envelope honest = candidate(0, 42, 0.8F);
  ASSERT_TRUE(v.vote(2, liar).ok());
  ASSERT_TRUE(v.vote(0, honest).ok());
  EXPECT_TRUE(v.out().empty());
  ASSERT_TRUE(v.vote(1, candidate(0, 42, 0.8F)).ok());
  ASSERT_EQ(v.out().size(), 1U);
  ASSERT_EQ(v.decisions().size(), 1U);
  // The payload of an agreeing candidate, not copied; the header says the answer.
  EXPECT_EQ(v.out()[0].payload().get(), honest.payload().get());
  EXPECT_EQ(v.out()[0].header().vote_key, 42U);
  EXPECT_EQ(v.out()[0].header().seq, 0U);
  const auto* d = v.decisions()[0].as<schema::VoteDecision>();
  EXPECT_EQ(d->vote_key(), 42U);
  EXPECT_TRUE(d->quorum());
  EXPECT_FALSE(d->without_quorum());
  EXPECT_EQ(d->winner()->str(), "detect#0");
  ASSERT_EQ(d->dissenters()->size(), 1U);
  EXPECT_EQ(d->dissenters()->Get(0)->str(), "detect#2");
  EXPECT_NEAR(d->agreeing_weight(), 1.6, 1e-6);
  EXPECT_NEAR(d->total_weight(), 2.5, 1e-6);  // the liar's 0.99 weighs 0.9
  EXPECT_EQ(v.runner->counter_value("decisions"), 1);
  EXPECT_EQ(v.runner->counter_value("without_quorum"), 0);
  EXPECT_EQ(v.runner->counter_value("vote_latency_le_1000"), 1);  // decided on arrival
}

TEST(ConsensusVote, AsksToBeCalledBackAtTheDeadlineAndDecidesThenWithoutQuorum) {
  Voter v({{"deadline_ms", std::int64_t{20}}});
  ASSERT_TRUE(v.vote(0, candidate(3, 1, 0.9F)).ok());
  EXPECT_EQ(v.runner->deferred_until(), 1020 * kMs);
  v.runner->set_now_ns(1005 * kMs);
  ASSERT_TRUE(v.vote(1, candidate(3, 2, 0.7F)).ok());
  EXPECT_EQ(v.runner->deferred_until(), 1020 * kMs);
  EXPECT_TRUE(v.out().empty());
  // Replica 2 stays silent: the call back at the deadline decides.
  v.runner->set_now_ns(1020 * kMs);
  ASSERT_TRUE(v.runner->pull().ok());
  ASSERT_EQ(v.decisions().size(), 1U);
  const auto* d = v.decisions()[0].as<schema::VoteDecision>();
  EXPECT_EQ(d->vote_key(), 1U);
  EXPECT_FALSE(d->quorum());
  EXPECT_TRUE(d->without_quorum());
  EXPECT_TRUE(d->at_deadline());
  EXPECT_EQ(d->silent()->Get(0)->str(), "detect#2");
  EXPECT_EQ(d->waited_ns(), 20 * kMs);
  EXPECT_EQ(v.out()[0].header().seq, 3U);  // the candidate's header, not the call back's
  EXPECT_EQ(v.runner->deferred_until(), 0);  // nothing more is due
  EXPECT_EQ(v.runner->counter_value("without_quorum"), 1);
  // A late vote is ignored.
  ASSERT_TRUE(v.vote(2, candidate(3, 1, 0.9F)).ok());
  EXPECT_EQ(v.runner->counter_value("late_votes"), 1);
  EXPECT_EQ(v.decisions().size(), 1U);
}

TEST(ConsensusVote, CountsDecisionsThatDifferFromTheReference) {
  Voter v;
  for (std::uint64_t seq = 0; seq < 4; ++seq) {
    // Two liars agree on seq 2: the vote is wrong there.
    const std::uint64_t lie = seq == 2 ? 9 : seq;
    ASSERT_TRUE(v.vote(0, candidate(seq, seq, 0.9F)).ok());
    ASSERT_TRUE(v.vote(1, candidate(seq, lie, 0.9F)).ok());
    ASSERT_TRUE(v.vote(2, candidate(seq, lie, 0.9F)).ok());
  }
  for (std::uint64_t seq = 0; seq < 4; ++seq) ASSERT_TRUE(v.runner->feed("reference", candidate(seq, seq, 1)).ok());
  // A reference before its decision is kept until it comes.
  ASSERT_TRUE(v.runner->feed("reference", candidate(4, 4, 1)).ok());
  ASSERT_TRUE(v.vote(0, candidate(4, 4, 0.9F)).ok());
  ASSERT_TRUE(v.vote(1, candidate(4, 4, 0.9F)).ok());
  ASSERT_TRUE(v.vote(2, candidate(4, 4, 0.9F)).ok());
  EXPECT_EQ(v.runner->counter_value("checked"), 5);
  EXPECT_EQ(v.runner->counter_value("wrong"), 1);
}

TEST(ConsensusVote, RefusesToStartWhenItCannotTellHowManyVote) {
  Registry registry;
  register_consensus_stages(registry);
  testing::StageRunner runner(registry, "consensus.vote", "vote");
  const Status s = runner.start();
  EXPECT_TRUE(s.is_error());
  EXPECT_NE(s.message().find("set `replicas`"), std::string::npos) << s.message();
}

TEST(ConsensusVote, TheLeadersConfidentAnswerPassesAtOnceAndIsCorrected) {
  Voter v({{"leader_threshold", 0.95}});
  ASSERT_TRUE(v.vote(0, candidate(0, 666, 0.99F)).ok());  // replica 0 leads at first
  ASSERT_EQ(v.decisions().size(), 1U);
  EXPECT_TRUE(v.decisions()[0].as<schema::VoteDecision>()->fast());
  EXPECT_EQ(v.out()[0].header().vote_key, 666U);
  ASSERT_TRUE(v.vote(1, candidate(0, 42, 0.9F)).ok());
  ASSERT_TRUE(v.vote(2, candidate(0, 42, 0.9F)).ok());
  ASSERT_EQ(v.decisions().size(), 2U);
  const auto* d = v.decisions()[1].as<schema::VoteDecision>();
  EXPECT_TRUE(d->correction());
  EXPECT_EQ(d->vote_key(), 42U);
  EXPECT_EQ(v.runner->counter_value("decisions"), 1);
  EXPECT_EQ(v.runner->counter_value("corrections"), 1);
  EXPECT_EQ(v.runner->counter_value("leader_changes"), 1);
}

}  // namespace
}  // namespace swarmflow
