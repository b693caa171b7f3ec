// The vote on a simulated clock: clamping, quorum and deadline, leader
// choice and demotion, the fast path and its corrections, ties, silent voters.

#include <gtest/gtest.h>

#include <vector>

#include "consensus/vote_tally.hpp"

namespace swarmflow::consensus {
namespace {

constexpr std::int64_t kMs = 1'000'000;

TallySettings three(double max_confidence = 0.9) {
  TallySettings s;
  s.voters = 3;
  s.quorum = 0.5;
  s.max_confidence = max_confidence;
  s.deadline_ns = 50 * kMs;
  return s;
}

Vote vote(std::uint64_t seq, int voter, std::uint64_t key, double confidence) {
  return Vote{7, seq, voter, key, confidence};
}

TEST(VoteTally, ClampingKeepsOneConfidentLiarFromOutvotingTwoHonestReplicas) {
  VoteTally t(three());
  std::vector<Decision> out;
  // The liar first, at 0.99; two honest ones at 0.6 each.
  t.add(vote(0, 2, 666, 0.99), 0, out);
  t.add(vote(0, 0, 42, 0.6), 1 * kMs, out);
  EXPECT_TRUE(out.empty());  // 0.6 vs 0.9, one voter left: either could still win
  t.add(vote(0, 1, 42, 0.6), 2 * kMs, out);
  ASSERT_EQ(out.size(), 1U);
  EXPECT_EQ(out[0].key, 42U);
  EXPECT_DOUBLE_EQ(out[0].agreeing_weight, 1.2);
  EXPECT_DOUBLE_EQ(out[0].total_weight, 2.1);  // the liar weighs 0.9, not 0.99
  EXPECT_TRUE(out[0].quorum);
  EXPECT_EQ(out[0].dissenters, std::vector<int>{2});
  EXPECT_EQ(out[0].agreeing, (std::vector<int>{0, 1}));
  EXPECT_EQ(out[0].waited_ns, 2 * kMs);
  // Without the clamp the liar (0.99 x 1) would still lose to 1.2 here, but
  // not to two honest replicas at 0.45: with the clamp at 0.45 it does.
  VoteTally tight(three(0.45));
  out.clear();
  tight.add(vote(0, 2, 666, 0.99), 0, out);
  tight.add(vote(0, 0, 42, 0.45), 0, out);
  tight.add(vote(0, 1, 42, 0.45), 0, out);
  ASSERT_EQ(out.size(), 1U);
  EXPECT_EQ(out[0].key, 42U);
  EXPECT_EQ(tight.weight(0.99), 0.45);
  EXPECT_EQ(tight.weight(-1), 0);
}

TEST(VoteTally, AFloorEqualToTheCeilingMakesAPlainMajority) {
  TallySettings s = three(0.5);
  s.min_confidence = 0.5;
  VoteTally t(s);
  std::vector<Decision> out;
  // Two honest detectors unsure of their findings, one sure liar.
  t.add(vote(0, 2, 666, 0.99), 0, out);
  t.add(vote(0, 0, 42, 0.2), 0, out);
  t.add(vote(0, 1, 42, 0.3), 0, out);
  ASSERT_EQ(out.size(), 1U);
  EXPECT_EQ(out[0].key, 42U);
  EXPECT_TRUE(out[0].quorum);
  EXPECT_DOUBLE_EQ(out[0].agreeing_weight, 1.0);
}

TEST(VoteTally, QuorumDecidesAsSoonAsNoLaterVoteCouldChangeIt) {
  VoteTally t(three());
  std::vector<Decision> out;
  t.add(vote(0, 0, 42, 0.9), 0, out);
  EXPECT_TRUE(out.empty());  // 0.9 of at most 2.7
  t.add(vote(0, 1, 42, 0.9), kMs, out);
  ASSERT_EQ(out.size(), 1U);  // 1.8 > 0.5 x 2.7: the third cannot change it
  EXPECT_TRUE(out[0].quorum);
  EXPECT_EQ(out[0].silent, std::vector<int>{2});
  EXPECT_EQ(t.counts().decisions, 1U);
  EXPECT_EQ(t.pending(), 1U);  // still open for the third vote
  t.add(vote(0, 2, 42, 0.9), 2 * kMs, out);
  EXPECT_EQ(out.size(), 1U);  // nothing more to say
  EXPECT_EQ(t.pending(), 0U);
  // A vote for a finished key is late.
  t.add(vote(0, 2, 42, 0.9), 3 * kMs, out);
  EXPECT_EQ(t.counts().late_votes, 1U);
  EXPECT_EQ(out.size(), 1U);
}

TEST(VoteTally, WithoutQuorumItDecidesOnceAllHaveVotedFlaggedNeverAsAgreed) {
  VoteTally t(three());
  std::vector<Decision> out;
  t.add(vote(0, 0, 1, 0.9), 0, out);
  t.add(vote(0, 1, 2, 0.8), 0, out);
  t.add(vote(0, 2, 3, 0.7), 0, out);
  ASSERT_EQ(out.size(), 1U);
  EXPECT_EQ(out[0].key, 1U);  // the heaviest
  EXPECT_FALSE(out[0].quorum);
  EXPECT_FALSE(out[0].at_deadline);
  EXPECT_EQ(t.counts().without_quorum, 1U);
}

TEST(VoteTally, ASilentReplicaIsCoveredByTheDeadline) {
  VoteTally t(three());
  std::vector<Decision> out;
  t.add(vote(0, 0, 1, 0.9), 0, out);
  t.add(vote(0, 1, 2, 0.9), 10 * kMs, out);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(t.next_deadline(), 50 * kMs);
  t.advance(49 * kMs, out);
  EXPECT_TRUE(out.empty());
  t.advance(50 * kMs, out);
  ASSERT_EQ(out.size(), 1U);
  EXPECT_TRUE(out[0].at_deadline);
  EXPECT_FALSE(out[0].quorum);
  EXPECT_EQ(out[0].silent, std::vector<int>{2});
  EXPECT_EQ(out[0].waited_ns, 50 * kMs);
  EXPECT_EQ(t.counts().without_quorum, 1U);
  EXPECT_EQ(t.next_deadline(), 0);
  // Two that agree reach quorum without the silent one, long before the deadline.
  t.add(vote(1, 0, 5, 0.9), 60 * kMs, out);
  t.add(vote(1, 1, 5, 0.9), 61 * kMs, out);
  ASSERT_EQ(out.size(), 2U);
  EXPECT_TRUE(out[1].quorum);
  // The silent replica loses reliability at each deadline and is never leader.
  t.advance(200 * kMs, out);
  EXPECT_LT(t.reliability(2), t.reliability(0));
  EXPECT_NE(t.leader(), 2);
}

TEST(VoteTally, TiesGoToTheMoreReliableVoterThenTheLowerIndex) {
  TallySettings s = three();
  s.voters = 2;
  VoteTally t(s);
  std::vector<Decision> out;
  t.add(vote(0, 1, 20, 0.9), 0, out);
  t.add(vote(0, 0, 10, 0.9), 0, out);
  ASSERT_EQ(out.size(), 1U);
  EXPECT_EQ(out[0].key, 10U);  // equal reliability: voter 0
  // Voter 0 was right there by definition; make voter 1 the more reliable.
  for (std::uint64_t seq = 1; seq < 20; ++seq) {
    t.add(vote(seq, 0, 1, 0.9), 0, out);
    t.add(vote(seq, 1, 1, 0.5), 0, out);
  }
  for (std::uint64_t seq = 20; seq < 30; ++seq) {
    t.add(vote(seq, 0, 7, 0.2), 0, out);
    t.add(vote(seq, 1, 8, 0.9), 0, out);  // 1 wins by weight: 0 dissents
  }
  ASSERT_GT(t.reliability(1), t.reliability(0));
  out.clear();
  t.add(vote(100, 0, 10, 0.9), 0, out);
  t.add(vote(100, 1, 20, 0.9), 0, out);
  ASSERT_EQ(out.size(), 1U);
  EXPECT_EQ(out[0].key, 20U);
}

TEST(VoteTally, TheMostReliableVoterLeadsAndALiarIsDemoted) {
  TallySettings s = three();
  s.leader_threshold = 0.95;
  VoteTally t(s);
  EXPECT_EQ(t.leader(), 0);
  std::vector<Decision> out;
  // Voter 0 lies on every key, confidently: its answers pass at once as
  // the leader's, and are corrected by the other two.
  std::uint64_t seq = 0;
  for (; seq < 40 && t.leader() == 0; ++seq) {
    t.add(vote(seq, 0, 666, 0.99), 0, out);
    t.add(vote(seq, 1, 42, 0.9), 0, out);
    t.add(vote(seq, 2, 42, 0.9), 0, out);
  }
  EXPECT_NE(t.leader(), 0);
  EXPECT_EQ(t.counts().leader_changes, 1U);
  EXPECT_EQ(t.counts().fast, seq);
  EXPECT_EQ(t.counts().corrections, seq);
  EXPECT_EQ(t.counts().decisions, seq);  // a correction is not a decision of its own
  ASSERT_EQ(out.size(), 2 * seq);
  EXPECT_TRUE(out[0].fast);
  EXPECT_EQ(out[0].key, 666U);
  EXPECT_TRUE(out[1].correction);
  EXPECT_EQ(out[1].key, 42U);
  EXPECT_TRUE(out[1].quorum);
  // The new leader is 1 (more reliable than 0, and first among equals).
  EXPECT_EQ(t.leader(), 1);
  // Its confident answer passes at once and the others confirm it silently.
  out.clear();
  t.add(vote(100, 1, 5, 0.97), 0, out);
  ASSERT_EQ(out.size(), 1U);
  EXPECT_TRUE(out[0].fast);
  EXPECT_FALSE(out[0].quorum);
  EXPECT_EQ(out[0].leader, 1);
  t.add(vote(100, 2, 5, 0.9), 0, out);
  t.add(vote(100, 0, 5, 0.9), 0, out);
  EXPECT_EQ(out.size(), 1U);
  EXPECT_EQ(t.counts().confirmed, 1U);
  // Below the threshold the leader waits like everyone else.
  out.clear();
  t.add(vote(101, 1, 5, 0.9), 0, out);
  EXPECT_TRUE(out.empty());
}

TEST(VoteTally, HysteresisKeepsTheLeaderThroughOneMistake) {
  TallySettings s = three();
  s.leader_margin = 0.15;
  VoteTally t(s);
  std::vector<Decision> out;
  auto leader_dissents = [&](std::uint64_t seq) {
    t.add(vote(seq, 0, 1, 0.5), 0, out);
    t.add(vote(seq, 1, 2, 0.9), 0, out);
    t.add(vote(seq, 2, 2, 0.9), 0, out);
  };
  leader_dissents(0);
  EXPECT_DOUBLE_EQ(t.reliability(0), 0.9);
  EXPECT_EQ(t.leader(), 0);  // 0.9 against 1.0: within the margin
  leader_dissents(1);
  EXPECT_EQ(t.leader(), 1);  // 0.81 against 1.0: demoted
  EXPECT_EQ(t.counts().leader_changes, 1U);
}

TEST(VoteTally, TooManyKeysAtOnceDecideTheOldestEarly) {
  TallySettings s = three();
  s.max_pending = 2;
  VoteTally t(s);
  std::vector<Decision> out;
  t.add(vote(0, 0, 1, 0.9), 0, out);
  t.add(vote(1, 0, 1, 0.9), 0, out);
  t.add(vote(2, 0, 1, 0.9), 0, out);
  ASSERT_EQ(out.size(), 1U);
  EXPECT_EQ(out[0].seq, 0U);
  EXPECT_FALSE(out[0].quorum);
  EXPECT_EQ(t.counts().evicted, 1U);
  EXPECT_EQ(t.pending(), 2U);
  t.flush(kMs, out);
  EXPECT_EQ(out.size(), 3U);
  EXPECT_EQ(t.pending(), 0U);
}

TEST(VoteTally, RepeatedAndUnknownVotersAreIgnoredAndCounted) {
  VoteTally t(three());
  std::vector<Decision> out;
  t.add(vote(0, 0, 1, 0.9), 0, out);
  t.add(vote(0, 0, 2, 0.9), 0, out);
  t.add(vote(0, 3, 2, 0.9), 0, out);
  t.add(vote(0, -1, 2, 0.9), 0, out);
  EXPECT_EQ(t.counts().repeated_votes, 1U);
  EXPECT_EQ(t.counts().unknown_voters, 2U);
  EXPECT_TRUE(out.empty());
}

}  // namespace
}  // namespace swarmflow::consensus
