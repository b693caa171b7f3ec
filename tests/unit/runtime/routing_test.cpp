#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "runtime/routing.hpp"

namespace swarmflow::runtime {
namespace {

using config::Overflow;

Envelope env(std::uint64_t stream, std::uint64_t seq) {
  EnvelopeHeader h;
  h.stream = stream;
  h.seq = seq;
  return Envelope(h, nullptr);
}

/// An envelope with `bytes` of payload (the router looks at the size only).
Envelope sized(std::uint64_t stream, std::uint64_t seq, std::size_t bytes) {
  EnvelopeHeader h;
  h.stream = stream;
  h.seq = seq;
  return Envelope(h, Payload::copy_of(std::vector<std::uint8_t>(bytes).data(), bytes));
}

// Every producer replica, in every unit process, builds its own ring: two
// rings built apart must send a stream to the same replica, and the mapping
// must be a fixed function of (replicas, stream), the same in every build.
TEST(ConsistentHashRing, RingsBuiltApartAgreeAndTheMappingIsFixed) {
  for (int replicas = 1; replicas <= 8; ++replicas) {
    const ConsistentHashRing a(replicas);
    const ConsistentHashRing b(replicas);
    int disagree = 0;
    int out_of_range = 0;
    for (std::uint64_t s = 0; s < 2000; ++s) {
      const int r = a.replica_for(s);
      disagree += r != b.replica_for(s) ? 1 : 0;
      out_of_range += r < 0 || r >= replicas ? 1 : 0;
    }
    EXPECT_EQ(disagree, 0) << replicas << " replicas";
    EXPECT_EQ(out_of_range, 0) << replicas << " replicas";
  }
  // Large and arbitrary keys (part ids, hashed ids) stay in range too.
  const ConsistentHashRing ring(3);
  for (std::uint64_t s : {~0ULL, ~0ULL - 1, 1ULL << 63, 0x5f3759df5f3759dfULL, 3'000'017ULL}) {
    EXPECT_GE(ring.replica_for(s), 0);
    EXPECT_LT(ring.replica_for(s), 3);
  }
  // Pinned values: a change of the hash or of the ring's layout moves
  // streams between processes built from different versions.
  const ConsistentHashRing four(4);
  std::vector<int> first;
  for (std::uint64_t s = 0; s < 16; ++s) first.push_back(four.replica_for(s));
  EXPECT_EQ(first, (std::vector<int>{3, 0, 3, 2, 2, 3, 2, 1, 0, 0, 1, 2, 0, 1, 1, 3}));
  EXPECT_EQ(mix64(0), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(mix64(1), 0x910a2dec89025cc1ULL);
}

TEST(ConsistentHashRing, EveryReplicaGetsAFairShare) {
  for (int replicas = 2; replicas <= 8; ++replicas) {
    const ConsistentHashRing ring(replicas);
    constexpr int kStreams = 20000;
    std::vector<int> counts(static_cast<std::size_t>(replicas), 0);
    for (std::uint64_t s = 0; s < kStreams; ++s) ++counts[static_cast<std::size_t>(ring.replica_for(s))];
    const int fair = kStreams / replicas;
    for (int r = 0; r < replicas; ++r) {
      // 64 points a replica: shares within a factor of about 1.5 of fair.
      EXPECT_GT(counts[static_cast<std::size_t>(r)], fair * 2 / 3) << r << " of " << replicas;
      EXPECT_LT(counts[static_cast<std::size_t>(r)], fair * 3 / 2) << r << " of " << replicas;
    }
  }
}

TEST(ConsistentHashRing, AddingAReplicaMovesAboutOneInNOnlyToTheNewOne) {
  for (int n = 1; n <= 8; ++n) {
    const ConsistentHashRing before(n);
    const ConsistentHashRing after(n + 1);
    constexpr int kStreams = 20000;
    int moved = 0;
    int between_old = 0;
    for (std::uint64_t s = 0; s < kStreams; ++s) {
      const int a = before.replica_for(s);
      const int b = after.replica_for(s);
      if (a != b) {
        ++moved;
        between_old += b != n ? 1 : 0;
      }
    }
    EXPECT_EQ(between_old, 0) << "streams moved between two old replicas, " << n << " -> " << n + 1;
    // The new replica takes about 1/(n+1) of the streams: some, and not much
    // more than its share.
    const int share = kStreams / (n + 1);
    EXPECT_GT(moved, share / 2) << n << " -> " << n + 1;
    EXPECT_LT(moved, share * 3 / 2) << n << " -> " << n + 1;
  }
}

TEST(PickLeastDelay, PrefersShorterExpectedDelay) {
  // Replica 0: 3 outstanding x 100 ns; replica 1: 1 outstanding x 1000 ns.
  std::vector<ReplicaView> v = {{5, 100}, {7, 1000}};
  EXPECT_EQ(pick_least_delay(v, 8, 0), 0);  // (3+1)*100=400 < (1+1)*1000
  v[0].credits = 1;                          // (7+1)*100=800 < 2000 still
  EXPECT_EQ(pick_least_delay(v, 8, 0), 0);
  v[1].service_ns = 300;                     // (1+1)*300=600 < 800
  EXPECT_EQ(pick_least_delay(v, 8, 0), 1);
}

TEST(PickLeastDelay, SkipsReplicasWithoutCreditAndRotatesTies) {
  std::vector<ReplicaView> v = {{0, 10}, {4, 10}, {4, 10}};
  EXPECT_EQ(pick_least_delay(v, 4, 0), 1);
  EXPECT_EQ(pick_least_delay(v, 4, 2), 2);
  v[1].credits = 0;
  v[2].credits = 0;
  EXPECT_EQ(pick_least_delay(v, 4, 0), -1);
}

TEST(PickLeastDelay, UnknownServiceTimeCountsAsMean) {
  std::vector<ReplicaView> v = {{2, 0}, {4, 100}};
  EXPECT_EQ(pick_least_delay(v, 4, 0), 1);  // (2+1)*100 > (0+1)*100
}

TEST(EdgeRouter, SendsOnlyAgainstCredit) {
  EdgeRouter r(1, 2, Overflow::block, false);
  std::vector<Dispatch> out;
  r.offer(env(0, 0), out);
  r.offer(env(0, 1), out);
  EXPECT_EQ(out.size(), 2U);
  EXPECT_FALSE(r.blocked());
  r.offer(env(0, 2), out);
  EXPECT_EQ(out.size(), 2U);
  EXPECT_TRUE(r.blocked());
  EXPECT_EQ(r.waiting(), 1U);
  out.clear();
  r.on_ack(0, 1, 1, 50, out);
  ASSERT_EQ(out.size(), 1U);
  EXPECT_EQ(out[0].envelope.header().seq, 2U);
  EXPECT_FALSE(r.blocked());
  EXPECT_EQ(r.dropped(), 0U);
  EXPECT_EQ(r.offered(), 3U);
  EXPECT_EQ(r.dispatched(), 3U);
}

TEST(EdgeRouter, DropNewestKeepsTheOldWaitingOnes) {
  EdgeRouter r(1, 2, Overflow::drop_newest, false);
  std::vector<Dispatch> out;
  for (std::uint64_t i = 0; i < 10; ++i) r.offer(env(0, i), out);
  EXPECT_EQ(out.size(), 2U);  // seq 0, 1 sent
  EXPECT_EQ(r.waiting(), 2U);  // seq 2, 3 wait
  EXPECT_EQ(r.dropped(), 6U);
  EXPECT_FALSE(r.blocked());
  out.clear();
  r.on_ack(0, 2, 2, 0, out);
  ASSERT_EQ(out.size(), 2U);
  EXPECT_EQ(out[0].envelope.header().seq, 2U);
  EXPECT_EQ(out[1].envelope.header().seq, 3U);
  EXPECT_EQ(r.offered(), r.dispatched() + r.dropped() + r.waiting());
}

TEST(EdgeRouter, DropOldestKeepsTheFreshOnes) {
  EdgeRouter r(1, 2, Overflow::drop_oldest, false);
  std::vector<Dispatch> out;
  for (std::uint64_t i = 0; i < 10; ++i) r.offer(env(0, i), out);
  EXPECT_EQ(r.dropped(), 6U);
  out.clear();
  r.on_ack(0, 2, 2, 0, out);
  ASSERT_EQ(out.size(), 2U);
  EXPECT_EQ(out[0].envelope.header().seq, 8U);
  EXPECT_EQ(out[1].envelope.header().seq, 9U);
}

TEST(EdgeRouter, LiveSourceDropsInsteadOfBlocking) {
  EdgeRouter r(1, 1, Overflow::block, false);
  std::vector<Dispatch> out;
  r.offer(env(0, 0), out, false);
  r.offer(env(0, 1), out, false);
  EXPECT_EQ(out.size(), 1U);
  EXPECT_EQ(r.dropped(), 1U);
  EXPECT_FALSE(r.blocked());
}

TEST(EdgeRouter, KeyedEdgeKeepsStreamsOnTheirReplicaAndInOrder) {
  EdgeRouter r(3, 2, Overflow::block, true);
  ConsistentHashRing ring(3);
  std::vector<Dispatch> out;
  std::map<std::uint64_t, std::uint64_t> next_seq;
  std::uint64_t produced = 0;
  // Produce 3 streams; ack whatever was sent each round, with one replica slow.
  for (int round = 0; round < 50; ++round) {
    for (std::uint64_t s = 0; s < 3; ++s) {
      if (!r.blocked()) r.offer(env(s, next_seq[s]++), out), ++produced;
    }
    std::map<int, int> per_replica;
    for (const auto& d : out) {
      EXPECT_EQ(d.replica, ring.replica_for(d.envelope.header().stream));
      ++per_replica[d.replica];
    }
    static std::map<std::uint64_t, std::uint64_t> seen;
    for (const auto& d : out) {
      EXPECT_EQ(d.envelope.header().seq, seen[d.envelope.header().stream]++);
    }
    out.clear();
    for (const auto& [replica, n] : per_replica) {
      if (replica == 0 && round % 3 != 0) continue;  // replica 0 acks late
      r.on_ack(replica, n, n, 0, out);
    }
  }
  EXPECT_EQ(r.offered(), produced);
}

TEST(EdgeRouterServing, ReplicasStandingByGetNothingUntilAddedThenTakeTheirShare) {
  // Four replicas, of which two take work (`replicas: {min: 2, max: 4}`).
  EdgeRouter r(4, 4, Overflow::block, false);
  std::vector<Dispatch> out;
  r.set_serving(2, 2, out);
  EXPECT_TRUE(out.empty());
  EXPECT_TRUE(r.standby(2));
  EXPECT_TRUE(r.standby(3));
  std::map<int, int> to;
  for (std::uint64_t i = 0; i < 8; ++i) r.offer(env(i, 0), out);
  for (const auto& d : out) ++to[d.replica];
  EXPECT_EQ(to.count(2) + to.count(3), 0U);
  EXPECT_EQ(to[0] + to[1], 8);  // all the credit of the two
  EXPECT_EQ(r.waiting(), 0U);
  // Without credit they wait, not for the replicas standing by ...
  out.clear();
  r.offer(env(9, 0), out);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(r.waiting(), 1U);
  EXPECT_TRUE(r.blocked());
  // ... which take them once added.
  r.set_serving(3, 2, out);
  ASSERT_EQ(out.size(), 1U);
  EXPECT_EQ(out[0].replica, 2);
  EXPECT_FALSE(r.standby(2));
  EXPECT_TRUE(r.standby(3));
}

TEST(EdgeRouterServing, KeysHashOverTheRingAndARemovedReplicasWaitingKeysGoToTheirNewOwner) {
  EdgeRouter r(3, 1, Overflow::block, true);
  std::vector<Dispatch> out;
  r.set_serving(3, 3, out);
  const ConsistentHashRing three(3);
  const ConsistentHashRing two(2);
  // A replica added to a keyed stage gets no key by the hash: the ring stays.
  r.set_serving(3, 2, out);
  std::uint64_t on_one = 0;
  for (std::uint64_t k = 0; k < 200; ++k) {
    EXPECT_EQ(r.replica_for_key(k), two.replica_for(k));
    if (two.replica_for(k) == 1) on_one = k;
  }
  // A key whose replica drains waits; when that replica leaves the ring,
  // the key goes where the smaller ring puts it.
  r.set_serving(2, 2, out);  // replica 2 is not in the ring anyway
  r.pause(1);
  out.clear();
  r.offer(env(on_one, 0), out);
  EXPECT_TRUE(out.empty());
  r.set_serving(1, 1, out);
  r.resume(1, false, out);
  ASSERT_EQ(out.size(), 1U);
  EXPECT_EQ(out[0].replica, 0);
  EXPECT_EQ(out[0].envelope.header().stream, on_one);
  for (std::uint64_t k = 0; k < 200; ++k) EXPECT_EQ(r.replica_for_key(k), 0);
  // Only the leaving replica's keys change hands between rings of 3 and 2.
  for (std::uint64_t k = 0; k < 2000; ++k) {
    if (three.replica_for(k) != 2) {
      EXPECT_EQ(two.replica_for(k), three.replica_for(k)) << k;
    }
  }
}

TEST(EdgeRouter, RoutesAwayFromASlowReplica) {
  EdgeRouter r(2, 8, Overflow::block, false);
  std::vector<Dispatch> out;
  r.offer(env(0, 0), out);
  r.offer(env(0, 1), out);
  ASSERT_EQ(out.size(), 2U);
  std::vector<Dispatch> more;
  // Replica 0 reports 10x the service time of replica 1.
  r.on_ack(out[0].replica, 1, 1, out[0].replica == 0 ? 10000 : 1000, more);
  r.on_ack(out[1].replica, 1, 1, out[1].replica == 0 ? 10000 : 1000, more);
  std::map<int, int> counts;
  for (std::uint64_t i = 0; i < 8; ++i) {
    more.clear();
    r.offer(env(0, 2 + i), more);
    ASSERT_EQ(more.size(), 1U);
    ++counts[more[0].replica];
  }
  EXPECT_GT(counts[1], counts[0]);
}

TEST(EdgeRouter, KeepsSentEnvelopesUntilReleased) {
  EdgeRouter r(1, 4, Overflow::block, false);
  std::vector<Dispatch> out;
  for (std::uint64_t i = 0; i < 4; ++i) r.offer(env(0, i), out);
  EXPECT_EQ(r.in_flight(0), 4U);
  out.clear();
  r.on_ack(0, 4, 0, 0, out);  // credit back, nothing released yet
  EXPECT_EQ(r.in_flight(0), 4U);
  r.on_ack(0, 0, 3, 0, out);
  EXPECT_EQ(r.in_flight(0), 1U);
}

TEST(EdgeRouter, APayloadTooLargeForOtherUnitsGoesToAReplicaInThisOne) {
  EdgeRouter r(3, 2, Overflow::block, false);
  r.set_remote({true, false, true}, 1000);  // replica 1 is in this unit
  std::vector<Dispatch> out;
  r.offer(sized(0, 0, 1001), out);
  r.offer(sized(0, 1, 1000), out);  // at the limit: anywhere
  r.offer(sized(0, 2, 5000), out);
  ASSERT_EQ(out.size(), 3U);
  EXPECT_EQ(out[0].replica, 1);
  EXPECT_EQ(out[2].replica, 1);
  // Replica 1 is out of credit: the next large one waits for it, though the
  // others have credit.
  r.offer(sized(0, 3, 5000), out);
  EXPECT_EQ(out.size(), 3U);
  EXPECT_TRUE(r.blocked());
  r.on_ack(0, 1, 1, 0, out);
  EXPECT_EQ(out.size(), 3U) << "credit from a remote replica does not send it";
  r.on_ack(1, 2, 2, 0, out);
  ASSERT_EQ(out.size(), 4U);
  EXPECT_EQ(out[3].replica, 1);
  EXPECT_EQ(out[3].envelope.header().seq, 3U);
  EXPECT_EQ(r.dropped(), 0U);
  EXPECT_EQ(r.too_large(), 0U);
}

TEST(EdgeRouter, ALargePayloadWaitingForItsReplicaDoesNotHoldUpTheOthers) {
  for (Overflow overflow : {Overflow::drop_newest, Overflow::drop_oldest, Overflow::block}) {
    EdgeRouter r(2, 2, overflow, false);
    r.set_remote({false, true}, 1000);  // replica 0 here, replica 1 on another unit
    std::vector<Dispatch> out;
    r.offer(sized(0, 0, 10), out);
    r.offer(sized(0, 1, 10), out);
    r.offer(sized(0, 2, 10), out);
    r.offer(sized(0, 3, 10), out);  // both replicas now out of credit
    ASSERT_EQ(out.size(), 4U);
    r.offer(sized(0, 4, 5000), out);  // waits for replica 0
    EXPECT_EQ(out.size(), 4U);
    out.clear();
    r.on_ack(1, 2, 2, 0, out);  // replica 1 has room again: the large one still waits
    EXPECT_TRUE(out.empty());
    for (std::uint64_t seq = 5; seq < 7; ++seq) r.offer(sized(0, seq, 10), out);
    ASSERT_EQ(out.size(), 2U) << "small ones go past it, to replica 1";
    for (const auto& d : out) EXPECT_EQ(d.replica, 1);
    out.clear();
    r.on_ack(0, 1, 1, 0, out);
    ASSERT_EQ(out.size(), 1U);
    EXPECT_EQ(out[0].replica, 0);
    EXPECT_EQ(out[0].envelope.header().seq, 4U);
    EXPECT_EQ(r.dropped(), 0U);
    EXPECT_EQ(r.waiting(), 0U);
    EXPECT_FALSE(r.blocked());
  }
}

TEST(EdgeRouter, APayloadTooLargeForOtherUnitsWithNoReplicaHereIsDroppedAndCounted) {
  EdgeRouter all_remote(2, 4, Overflow::block, false);
  all_remote.set_remote({true, true}, 1000);
  std::vector<Dispatch> out;
  all_remote.offer(sized(0, 0, 1001), out);
  all_remote.offer(sized(0, 1, 10), out);
  ASSERT_EQ(out.size(), 1U);
  EXPECT_EQ(out[0].envelope.header().seq, 1U);
  EXPECT_EQ(all_remote.dropped(), 1U);
  EXPECT_EQ(all_remote.too_large(), 1U);
  EXPECT_EQ(all_remote.offered(), 2U);
  EXPECT_FALSE(all_remote.blocked());

  // Keyed: a stream whose replica is on another unit cannot take it; one
  // whose replica is here can.
  ConsistentHashRing ring(2);
  EdgeRouter keyed(2, 4, Overflow::block, true);
  keyed.set_remote({false, true}, 1000);
  out.clear();
  std::uint64_t here = 0;
  std::uint64_t there = 0;
  while (ring.replica_for(here) != 0) ++here;
  while (ring.replica_for(there) != 1) ++there;
  keyed.offer(sized(here, 0, 2000), out);
  keyed.offer(sized(there, 0, 2000), out);
  keyed.offer(sized(there, 1, 100), out);
  ASSERT_EQ(out.size(), 2U);
  EXPECT_EQ(out[0].replica, 0);
  EXPECT_EQ(out[1].replica, 1);
  EXPECT_EQ(out[1].envelope.header().seq, 1U);
  EXPECT_EQ(keyed.too_large(), 1U);

  // All replicas in this unit: no limit applies.
  EdgeRouter local(2, 4, Overflow::block, false);
  local.set_remote({false, false}, 1000);
  out.clear();
  local.offer(sized(0, 0, 1u << 20), out);
  EXPECT_EQ(out.size(), 1U);
  EXPECT_EQ(local.too_large(), 0U);
}

// -- replay to a consumer replica placed anew --------------------------------

std::vector<std::uint64_t> seqs(const std::vector<Dispatch>& out, int replica = -1) {
  std::vector<std::uint64_t> v;
  for (const auto& d : out) {
    if (replica < 0 || d.replica == replica) v.push_back(d.envelope.header().seq);
  }
  return v;
}

TEST(EdgeRouterReplace, ReplaysWhatWasNotReleasedInOrderWithFreshCreditsBeforeAnythingNew) {
  EdgeRouter r(1, 2, Overflow::block, false);  // retains at most 4
  std::vector<Dispatch> out;
  r.offer(env(0, 0), out);
  r.offer(env(0, 1), out);
  r.on_ack(0, 2, 1, 0, out);  // seq 0 released: not replayed
  r.offer(env(0, 2), out);
  r.offer(env(0, 3), out);
  r.offer(env(0, 4), out);  // no credit: waits
  ASSERT_EQ(seqs(out), (std::vector<std::uint64_t>{0, 1, 2, 3}));
  EXPECT_EQ(r.credits(0), 0);
  out.clear();
  r.replace(0, false, out);
  // Fresh credits (2): the oldest two it had not released go again; seq 3
  // is still to go again, and seq 4 waits behind it although it was offered
  // before the replace.
  EXPECT_EQ(seqs(out), (std::vector<std::uint64_t>{1, 2}));
  EXPECT_EQ(r.replayed(), 2U);
  EXPECT_EQ(r.replaying(0), 1U);
  EXPECT_EQ(r.credits(0), 0);
  EXPECT_EQ(r.in_flight(0), 2U);
  EXPECT_EQ(r.waiting(), 1U);
  EXPECT_EQ(r.retained(), 3U);
  EXPECT_EQ(r.offered(), r.dispatched() + r.dropped() + r.waiting());
  out.clear();
  r.on_ack(0, 2, 2, 0, out);
  EXPECT_EQ(seqs(out), (std::vector<std::uint64_t>{3, 4}));
  EXPECT_EQ(r.replayed(), 3U);
  EXPECT_EQ(r.dispatched(), 5U);
  EXPECT_EQ(r.offered(), r.dispatched() + r.dropped() + r.waiting());
  r.on_ack(0, 2, 2, 0, out);
  EXPECT_EQ(r.retained(), 0U);
}

TEST(EdgeRouterReplace, AReplayLongerThanTheCreditsGoesAsCreditsReturnAndNewOnesWaitBehindIt) {
  EdgeRouter r(1, 2, Overflow::block, false);
  std::vector<Dispatch> out;
  for (std::uint64_t i = 0; i < 4; ++i) {
    r.offer(env(0, i), out);
    if (i % 2 == 1) r.on_ack(0, 2, 0, 0, out);  // credits back, nothing released
  }
  ASSERT_EQ(r.in_flight(0), 4U);  // the retention limit
  out.clear();
  r.replace(0, false, out);
  EXPECT_EQ(seqs(out), (std::vector<std::uint64_t>{0, 1}));
  EXPECT_EQ(r.replaying(0), 2U);
  EXPECT_EQ(r.retained(), 4U);
  // A new one must not overtake the replay, even with a credit back.
  r.offer(env(0, 4), out);
  r.on_ack(0, 1, 0, 0, out);
  EXPECT_EQ(seqs(out), (std::vector<std::uint64_t>{0, 1, 2}));
  r.on_ack(0, 1, 0, 0, out);
  EXPECT_EQ(seqs(out), (std::vector<std::uint64_t>{0, 1, 2, 3}));
  EXPECT_EQ(r.replaying(0), 0U);
  EXPECT_TRUE(r.blocked());  // seq 4 waits: 4 retained, the limit
  EXPECT_LE(r.in_flight(0), r.retention_limit());
  r.on_ack(0, 2, 1, 0, out);
  EXPECT_EQ(seqs(out), (std::vector<std::uint64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(r.replayed(), 4U);
  EXPECT_EQ(r.offered(), r.dispatched() + r.dropped() + r.waiting());
}

class ReplaceUnderPolicy : public ::testing::TestWithParam<Overflow> {};

// However many new envelopes arrive meanwhile, the replayed ones all go.
TEST_P(ReplaceUnderPolicy, ReplayedEnvelopesAreNeverDropped) {
  EdgeRouter r(1, 2, GetParam(), false);
  std::vector<Dispatch> out;
  for (std::uint64_t i = 0; i < 4; ++i) {
    r.offer(env(0, i), out);
    if (i % 2 == 1) r.on_ack(0, 2, 0, 0, out);
  }
  out.clear();
  r.replace(0, false, out);
  for (std::uint64_t i = 100; i < 120; ++i) {
    if (!r.blocked()) r.offer(env(0, i), out);
  }
  for (int round = 0; round < 10; ++round) r.on_ack(0, 1, 1, 0, out);
  std::vector<std::uint64_t> replayed;
  for (std::uint64_t s : seqs(out)) {
    if (s < 100) replayed.push_back(s);
  }
  EXPECT_EQ(replayed, (std::vector<std::uint64_t>{0, 1, 2, 3}));
  EXPECT_EQ(r.replayed(), 4U);
  // Replays come first, and what is new keeps its order.
  const auto all = seqs(out);
  EXPECT_TRUE(std::is_sorted(all.begin(), all.end()));
  EXPECT_EQ(r.offered(), r.dispatched() + r.dropped() + r.waiting());
  if (GetParam() != Overflow::block) {
    EXPECT_GT(r.dropped(), 0U);
  }
}

INSTANTIATE_TEST_SUITE_P(EveryPolicy, ReplaceUnderPolicy,
                         ::testing::Values(Overflow::block, Overflow::drop_oldest, Overflow::drop_newest));

TEST(EdgeRouterReplace, OnAnUnkeyedEdgeNewEnvelopesGoToOtherReplicasWhileTheReplayWaits) {
  EdgeRouter r(2, 2, Overflow::block, false);
  std::vector<Dispatch> out;
  for (std::uint64_t i = 0; i < 4; ++i) r.offer(env(0, i), out);  // two each
  r.on_ack(0, 2, 0, 0, out);
  r.on_ack(1, 2, 2, 0, out);
  for (std::uint64_t i = 4; i < 8; ++i) r.offer(env(0, i), out);
  ASSERT_EQ(r.in_flight(0), 4U);
  out.clear();
  r.replace(0, false, out);
  EXPECT_EQ(seqs(out, 0).size(), 2U);
  EXPECT_EQ(r.replaying(0), 2U);
  // Replica 1 has credit: new envelopes go there, none to replica 0.
  out.clear();
  r.on_ack(1, 2, 2, 0, out);
  r.offer(env(0, 8), out);
  r.offer(env(0, 9), out);
  EXPECT_EQ(seqs(out, 1), (std::vector<std::uint64_t>{8, 9}));
  EXPECT_TRUE(seqs(out, 0).empty());
  // A credit from replica 0 goes to its replay, not to what waits.
  r.offer(env(0, 10), out);
  out.clear();
  r.on_ack(0, 1, 0, 0, out);
  ASSERT_EQ(out.size(), 1U);
  EXPECT_EQ(out[0].replica, 0);
  EXPECT_EQ(r.replayed(), 3U);
  EXPECT_EQ(r.waiting(), 1U);
  EXPECT_EQ(r.offered(), r.dispatched() + r.dropped() + r.waiting());
}

TEST(EdgeRouterReplace, OnAKeyedEdgeAReplicasNewEnvelopesWaitBehindItsReplayAndOthersGoOn) {
  EdgeRouter r(2, 2, Overflow::block, true);
  const ConsistentHashRing ring(2);
  std::uint64_t s0 = 0;
  while (ring.replica_for(s0) != 0) ++s0;
  std::uint64_t s1 = 0;
  while (ring.replica_for(s1) != 1) ++s1;
  std::vector<Dispatch> out;
  r.offer(env(s0, 0), out);
  r.offer(env(s0, 1), out);
  r.on_ack(0, 2, 0, 0, out);
  r.offer(env(s0, 2), out);
  out.clear();
  r.replace(0, true, out);
  r.offer(env(s1, 0), out);  // its own replica: goes at once
  ASSERT_EQ(out.size(), 3U);
  EXPECT_EQ(seqs(out, 0), (std::vector<std::uint64_t>{0, 1}));
  EXPECT_EQ(seqs(out, 1), (std::vector<std::uint64_t>{0}));
  r.offer(env(s0, 3), out);  // waits for replica 0 behind the rest of the replay
  EXPECT_EQ(r.waiting(), 1U);
  out.clear();
  r.on_ack(0, 2, 2, 0, out);
  EXPECT_EQ(seqs(out, 0), (std::vector<std::uint64_t>{2, 3}));
  for (const auto& d : out) EXPECT_EQ(d.envelope.header().stream, s0);
}

TEST(EdgeRouterReplace, TheNewPlacementsUnitDecidesWhereLargePayloadsMayGo) {
  EdgeRouter r(2, 4, Overflow::block, false);
  r.set_remote({false, false}, 1000);
  std::vector<Dispatch> out;
  r.offer(sized(0, 0, 5000), out);
  r.offer(sized(0, 1, 5000), out);
  ASSERT_EQ(out.size(), 2U);
  const int first = out[0].replica;
  ASSERT_NE(out[1].replica, first);
  // `first` is placed on another unit: its large envelope cannot be carried
  // there, so it is dropped and counted, and large ones go to the other.
  out.clear();
  r.replace(first, true, out);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(r.too_large(), 1U);
  EXPECT_EQ(r.replayed(), 0U);
  for (std::uint64_t i = 2; i < 5; ++i) r.offer(sized(0, i, 5000), out);
  for (const auto& d : out) EXPECT_NE(d.replica, first);
  EXPECT_EQ(out.size(), 3U);
  EXPECT_EQ(r.offered(), r.dispatched() + r.dropped() + r.waiting());
  // Back in this unit: large ones may go to it again.
  out.clear();
  r.replace(first, false, out);
  r.offer(sized(0, 5, 5000), out);
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out.back().replica, first);
}

TEST(AckThreshold, NeverZeroAndAtMostHalfTheCapacity) {
  EXPECT_EQ(ack_threshold(1), 1);
  EXPECT_EQ(ack_threshold(2), 1);
  EXPECT_EQ(ack_threshold(16), 8);
}


// -- fanout: all ---------------------------------------------------------------

TEST(EdgeRouterFanout, EachEnvelopeGoesToEveryReplicaAsACopyOfOnePayload) {
  EdgeRouter router(3, 2, Overflow::block, false);
  router.set_fanout(true);
  std::vector<Dispatch> out;
  router.offer(sized(1, 0, 64), out);
  ASSERT_EQ(out.size(), 3U);
  std::set<int> replicas;
  for (const auto& d : out) {
    replicas.insert(d.replica);
    EXPECT_EQ(d.envelope.payload().get(), out[0].envelope.payload().get());
    EXPECT_EQ(d.envelope.header().seq, 0U);
  }
  EXPECT_EQ(replicas, (std::set<int>{0, 1, 2}));
  EXPECT_EQ(router.offered(), 3U);  // each copy counts, so sent = delivered + dropped holds
  EXPECT_EQ(router.dispatched(), 3U);
}

TEST(EdgeRouterFanout, ACopyWaitsForItsOwnReplicasCreditAndOrderPerReplicaIsKept) {
  EdgeRouter router(2, 1, Overflow::block, false);
  router.set_fanout(true);
  std::vector<Dispatch> out;
  router.offer(env(0, 0), out);
  ASSERT_EQ(out.size(), 2U);
  // Replica 0 credits, replica 1 does not: the next copy for 1 waits, and blocks.
  out.clear();
  router.on_ack(0, 1, 1, 0, out);
  router.offer(env(0, 1), out);
  ASSERT_EQ(out.size(), 1U);
  EXPECT_EQ(out[0].replica, 0);
  EXPECT_TRUE(router.blocked());
  EXPECT_EQ(router.waiting(), 1U);
  out.clear();
  router.on_ack(1, 1, 1, 0, out);
  ASSERT_EQ(out.size(), 1U);
  EXPECT_EQ(out[0].replica, 1);
  EXPECT_EQ(out[0].envelope.header().seq, 1U);
  EXPECT_FALSE(router.blocked());
}

TEST(EdgeRouterFanout, DroppingPoliciesCountEachCopyAndKeepCapacityPerReplica) {
  EdgeRouter router(2, 1, Overflow::drop_newest, false);
  router.set_fanout(true);
  std::vector<Dispatch> out;
  for (std::uint64_t seq = 0; seq < 4; ++seq) router.offer(env(0, seq), out);
  // seq 0 is sent to both; seq 1 waits for both (capacity 1 each); 2 and 3 are dropped.
  EXPECT_EQ(out.size(), 2U);
  EXPECT_EQ(router.waiting(), 2U);
  EXPECT_EQ(router.offered(), 8U);
  EXPECT_EQ(router.dropped(), 4U);
  EXPECT_EQ(router.offered(), router.dispatched() + router.dropped() + router.waiting());
}

}  // namespace
}  // namespace swarmflow::runtime
