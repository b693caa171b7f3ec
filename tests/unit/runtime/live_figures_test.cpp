// The coordinator's store of live figures: cumulative messages replace each
// other, moves and restored replicas are not counted twice, a fenced unit is
// not heard, and the changes it hands out add up to the totals.

#include <gtest/gtest.h>

#include <tuple>

#include "runtime/live_figures.hpp"

namespace swarmflow::runtime {
namespace {

// Stage 0 (2 replicas) -> stage 1 (1 replica) over edge 0.
const std::vector<std::pair<int, int>> kEdges{{0, 1}};

ReplicaFigures replica(int node, int r, std::uint64_t processed, std::int64_t counter = 0) {
  ReplicaFigures f;
  f.node = node;
  f.replica = r;
  f.processed = processed;
  f.errors = processed / 10;
  f.queued = processed % 7;
  if (counter != 0) f.counters["frames"] = counter;
  f.latency[3] = processed;
  f.service_buckets = {processed, 1};
  f.residence[5] = processed;
  return f;
}

EdgeSideFigures side(int edge, int r, bool producer, std::uint64_t sent, std::uint64_t delivered = 0) {
  EdgeSideFigures f;
  f.edge = edge;
  f.replica = r;
  f.producer = producer;
  f.sent = sent;
  f.delivered = delivered;
  f.hops[2] = sent;
  f.hop_max_ns = 1000;
  return f;
}

UnitFigures from(int unit, std::uint64_t incarnation, std::vector<ReplicaFigures> replicas,
                 std::vector<EdgeSideFigures> edges = {}) {
  UnitFigures f;
  f.unit = unit;
  f.incarnation = incarnation;
  f.replicas = std::move(replicas);
  f.edges = std::move(edges);
  return f;
}

/// What a counter on the coordinator reads after all changes were added.
struct Applied {
  std::uint64_t processed = 0;
  std::uint64_t errors = 0;
  std::int64_t frames = 0;
  std::uint64_t latency = 0;
  std::uint64_t sent = 0;
  void add(const FigureChanges& c, int node, int r) {
    for (const auto& d : c.replicas) {
      if (d.node != node || d.replica != r) continue;
      processed += d.processed;  // wraps, as the atomics do
      errors += d.errors;
      auto it = d.counters.find("frames");
      if (it != d.counters.end()) frames += it->second;
      for (const auto& [b, n] : d.latency) latency += n;
    }
    for (const auto& d : c.edges) sent += d.sent;
  }
};

TEST(LiveFigures, ARepeatedOrLaterMessageReplacesTheEarlierOne) {
  LiveFigures live;
  const std::vector<std::vector<int>> unit_of{{1, 1}, {0}};
  Applied a;
  live.take(from(1, 7, {replica(0, 0, 100)}), unit_of, kEdges);
  a.add(live.changes(), 0, 0);
  live.take(from(1, 7, {replica(0, 0, 100)}), unit_of, kEdges);  // sent twice
  a.add(live.changes(), 0, 0);
  live.take(from(1, 7, {replica(0, 0, 250)}), unit_of, kEdges);
  a.add(live.changes(), 0, 0);
  EXPECT_EQ(live.replica_total(0, 0).processed, 250u);
  EXPECT_EQ(a.processed, 250u);
  EXPECT_EQ(a.errors, 25u);
  EXPECT_EQ(a.latency, 250u);
  EXPECT_EQ(live.replica_total(0, 0).queued, 250u % 7);
}

TEST(LiveFigures, UnitDoneWithoutIncarnationReplacesTheLastLiveMessage) {
  LiveFigures live;
  const std::vector<std::vector<int>> unit_of{{1, 1}, {0}};
  live.take(from(1, 7, {replica(0, 1, 40)}), unit_of, kEdges);
  live.take(from(1, 0, {replica(0, 1, 60)}), unit_of, kEdges);
  EXPECT_EQ(live.replica_total(0, 1).processed, 60u);
}

TEST(LiveFigures, AStatelessReplicaMovedToAnotherUnitAddsBothHosts) {
  LiveFigures live;
  Applied a;
  live.take(from(1, 7, {replica(0, 0, 100)}), {{1, 1}, {0}}, kEdges);
  a.add(live.changes(), 0, 0);
  // Unit 1 died; replica 0/0 now runs on unit 2, from zero.
  live.take(from(2, 9, {replica(0, 0, 30)}), {{2, 1}, {0}}, kEdges);
  a.add(live.changes(), 0, 0);
  EXPECT_EQ(live.replica_total(0, 0).processed, 130u);
  EXPECT_EQ(a.processed, 130u);
  EXPECT_EQ(a.latency, 130u);
  EXPECT_EQ(live.replica_total(0, 0).residence.at(5), 130u) << "residence samples of both hosts";
}

TEST(LiveFigures, ARestoredReplicaCarriesItsPredecessorsCountOnce) {
  LiveFigures live;
  Applied a;
  live.take(from(1, 7, {replica(0, 0, 100, 100)}), {{1, 1}, {0}}, kEdges);
  a.add(live.changes(), 0, 0);
  // Restored on unit 2 from a snapshot taken at 90: it counts on from 90,
  // and the 10 after the snapshot are processed again there.
  live.carried_over(0, 0, 2);
  live.take(from(2, 9, {replica(0, 0, 95, 95)}), {{2, 1}, {0}}, kEdges);
  a.add(live.changes(), 0, 0);
  EXPECT_EQ(live.replica_total(0, 0).processed, 95u);
  EXPECT_EQ(a.processed, 95u) << "the total fell from 100 to 95: the change wraps and the sum is right";
  EXPECT_EQ(a.frames, 95);
  // Errors and histograms are each host's own work: both count.
  EXPECT_EQ(a.errors, 10u + 9u);
  EXPECT_EQ(a.latency, 195u);
}

TEST(LiveFigures, ARestartedUnitProcessIsANewHost) {
  LiveFigures live;
  live.take(from(1, 7, {replica(0, 0, 100)}), {{1, 1}, {0}}, kEdges);
  // The same unit id, a new process: its counts start from zero.
  live.take(from(1, 8, {replica(0, 0, 5)}), {{1, 1}, {0}}, kEdges);
  EXPECT_EQ(live.replica_total(0, 0).processed, 105u);
}

TEST(LiveFigures, AFencedUnitIsNotHeardForReplicasPlacedElsewhere) {
  LiveFigures live;
  live.take(from(1, 7, {replica(0, 0, 100)}, {side(0, 0, true, 100)}), {{1, 1}, {0}}, kEdges);
  // Unit 1 was declared dead and its replica placed on unit 2; it speaks again.
  live.take(from(1, 7, {replica(0, 0, 400)}, {side(0, 0, true, 400)}), {{2, 1}, {0}}, kEdges);
  EXPECT_EQ(live.replica_total(0, 0).processed, 100u);
  EXPECT_EQ(live.edge_total(0, 0, true).sent, 100u);
  // Its other replica is still its own.
  live.take(from(1, 7, {replica(0, 1, 3)}), {{2, 1}, {0}}, kEdges);
  EXPECT_EQ(live.replica_total(0, 1).processed, 3u);
}

TEST(LiveFigures, AReplicaThatDrainedOnAUnitForAMoveStillCountsWhatItDidThere) {
  LiveFigures live;
  live.take(from(1, 7, {replica(0, 0, 100)}, {side(0, 0, true, 100)}), {{1, 1}, {0}}, kEdges);
  // Moved to unit 2 after a drain: unit 1's last figures, sent after the
  // move, hold what it did until it drained, and count with unit 2's.
  const std::vector<std::tuple<int, int, int>> drained{{0, 0, 1}};
  live.take(from(1, 7, {replica(0, 0, 130)}, {side(0, 0, true, 130)}), {{2, 1}, {0}}, kEdges, drained);
  live.take(from(2, 9, {replica(0, 0, 20)}, {side(0, 0, true, 20)}), {{2, 1}, {0}}, kEdges, drained);
  EXPECT_EQ(live.replica_total(0, 0).processed, 150u);
  EXPECT_EQ(live.edge_total(0, 0, true).sent, 150u);
  // Without the drain it is a fenced unit, not heard.
  LiveFigures fenced;
  fenced.take(from(1, 7, {replica(0, 0, 100)}), {{1, 1}, {0}}, kEdges);
  fenced.take(from(1, 7, {replica(0, 0, 130)}), {{2, 1}, {0}}, kEdges);
  EXPECT_EQ(fenced.replica_total(0, 0).processed, 100u);
}

TEST(LiveFigures, AReplicaMovedBetweenTwoUnitsOfOneProcessIsOneHost) {
  LiveFigures live;
  live.take(from(1, 7, {replica(0, 0, 100)}, {side(0, 0, true, 100)}), {{1, 1}, {0}}, kEdges);
  // Units 1 and 2 are in one process (incarnation 7), which keeps one
  // replica's figures: unit 2 now says what it did on both.
  live.take(from(2, 7, {replica(0, 0, 130)}, {side(0, 0, true, 130)}), {{2, 1}, {0}}, kEdges);
  EXPECT_EQ(live.replica_total(0, 0).processed, 130u);
  EXPECT_EQ(live.edge_total(0, 0, true).sent, 130u);
}

TEST(LiveFigures, EdgeSidesReplaceAndOutOfRangeIsIgnored) {
  LiveFigures live;
  Applied a;
  const std::vector<std::vector<int>> unit_of{{1, 1}, {0}};
  live.take(from(1, 7, {}, {side(0, 1, true, 10), side(5, 0, true, 99)}), unit_of, kEdges);
  a.add(live.changes(), -1, -1);
  live.take(from(1, 7, {replica(9, 0, 1)}, {side(0, 1, true, 15)}), unit_of, kEdges);
  a.add(live.changes(), -1, -1);
  EXPECT_EQ(a.sent, 15u);
  EXPECT_EQ(live.edge_total(0, 1, true).hops.at(2), 15u) << "hop samples replace as counters do";
  EXPECT_EQ(live.replica_total(9, 0).processed, 0u);
  // The consumer side of edge 0 is on unit 0, not 1.
  live.take(from(1, 7, {}, {side(0, 0, false, 0, 50)}), unit_of, kEdges);
  EXPECT_EQ(live.edge_total(0, 0, false).delivered, 0u);
}

TEST(LiveFigures, NothingChangedHandsOutNothing) {
  LiveFigures live;
  EXPECT_TRUE(live.changes().replicas.empty());
  live.take(from(1, 7, {replica(0, 0, 1)}), {{1, 1}, {0}}, kEdges);
  EXPECT_EQ(live.changes().replicas.size(), 1u);
  EXPECT_TRUE(live.changes().replicas.empty());
}

}  // namespace
}  // namespace swarmflow::runtime
