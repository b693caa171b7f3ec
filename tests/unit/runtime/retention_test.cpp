// Retention: what a router keeps for replay is bounded by credits under every
// overflow policy, and a consumer releases an envelope once nothing made from
// it waits any more, so a slow stage further down cannot make memory grow.

#include <gtest/gtest.h>

#include <algorithm>

#include <swarmflow/runtime.hpp>
#include <swarmflow/schema/blob_generated.h>

#include "runtime/routing.hpp"

namespace swarmflow::runtime {
namespace {

Envelope env(std::uint64_t stream, std::uint64_t seq) {
  EnvelopeHeader h;
  h.stream = stream;
  h.seq = seq;
  return Envelope(h, nullptr);
}

class RetentionLimit : public ::testing::TestWithParam<config::Overflow> {};

// The consumer processes everything at once (credits come back) but releases
// nothing: the router stops sending at the retention limit and applies its
// overflow policy, exactly as it does without credit.
TEST_P(RetentionLimit, AReplicaThatReleasesNothingStopsGettingEnvelopes) {
  const int capacity = 4;
  EdgeRouter r(1, capacity, GetParam(), false);
  std::vector<Dispatch> out;
  std::uint64_t seq = 0;
  for (int round = 0; round < 20; ++round) {
    if (!r.blocked()) r.offer(env(0, seq++), out);
    r.on_ack(0, capacity, 0, 0, out);  // every credit back, nothing released
    ASSERT_LE(r.in_flight(0), retention_limit(capacity));
  }
  EXPECT_EQ(r.in_flight(0), retention_limit(capacity));
  EXPECT_EQ(r.peak_retained(), retention_limit(capacity));
  EXPECT_EQ(out.size(), retention_limit(capacity));
  EXPECT_EQ(r.offered(), r.dispatched() + r.dropped() + r.waiting());
  if (GetParam() == config::Overflow::block) {
    EXPECT_TRUE(r.blocked());
    EXPECT_EQ(r.dropped(), 0U);
  } else {
    EXPECT_GT(r.dropped(), 0U);
    EXPECT_LE(r.waiting(), static_cast<std::size_t>(capacity));
  }
  // Releasing makes room again: the oldest waiting envelope goes next.
  out.clear();
  const std::size_t waited = r.waiting();
  r.on_ack(0, 0, 2, 0, out);
  EXPECT_EQ(out.size(), std::min<std::size_t>(2, waited));
  EXPECT_EQ(r.in_flight(0), retention_limit(capacity) - 2 + out.size());
}

INSTANTIATE_TEST_SUITE_P(EveryPolicy, RetentionLimit,
                         ::testing::Values(config::Overflow::block, config::Overflow::drop_oldest,
                                           config::Overflow::drop_newest));

TEST(RetentionLimitRouting, AnUnkeyedEdgeSendsToTheReplicaWithRoomToRetain) {
  EdgeRouter r(2, 2, config::Overflow::block, false);
  std::vector<Dispatch> out;
  // Replica 0 takes 4 and never releases; then only replica 1 gets envelopes.
  for (std::uint64_t i = 0; i < 8; ++i) {
    r.offer(env(0, i), out);
    for (const auto& d : out) r.on_ack(d.replica, 1, d.replica == 1 ? 1 : 0, 0, out);
    out.clear();
  }
  EXPECT_EQ(r.in_flight(0), retention_limit(2));
  EXPECT_EQ(r.in_flight(1), 0U);
  EXPECT_EQ(r.dispatched(), 8U);
  EXPECT_FALSE(r.blocked());
}

TEST(RetentionLimitRouting, TheOldestHeldOriginIsTheOldestNotYetAcceptedDownstream) {
  EdgeRouter r(2, 1, config::Overflow::block, true);
  std::vector<Dispatch> out;
  EXPECT_EQ(r.oldest_held_origin(), EdgeRouter::kNoOrigin);
  // Find a stream for each replica.
  std::uint64_t s0 = 0;
  std::uint64_t s1 = 0;
  ConsistentHashRing ring(2);
  while (ring.replica_for(s0) != 0) ++s0;
  while (ring.replica_for(s1) != 1) ++s1;
  r.offer(env(s0, 0), out, true, 10);  // sent
  r.offer(env(s1, 0), out, true, 11);  // sent
  r.offer(env(s0, 1), out, true, 12);  // waits for replica 0
  r.offer(env(s1, 1), out, true, 13);  // waits for replica 1
  EXPECT_EQ(out.size(), 2U);
  EXPECT_EQ(r.oldest_held_origin(), 10U);  // sent, but not credited yet
  out.clear();
  r.on_ack(0, 1, 1, 0, out);  // replica 0 credits 10; its waiting one (12) goes
  ASSERT_EQ(out.size(), 1U);
  EXPECT_EQ(r.oldest_held_origin(), 11U);
  r.on_ack(1, 1, 1, 0, out);  // replica 1 credits 11; 13 goes
  EXPECT_EQ(r.oldest_held_origin(), 12U);
  r.on_ack(0, 1, 0, 0, out);  // credited, not yet released: accepted all the same
  EXPECT_EQ(r.oldest_held_origin(), 13U);
  r.on_ack(1, 1, 1, 0, out);
  EXPECT_EQ(r.oldest_held_origin(), EdgeRouter::kNoOrigin);
}

// -- whole runs -----------------------------------------------------------

RunReport run_yaml(const std::string& yaml) {
  Runtime rt;
  std::vector<Diagnostic> diags;
  Status s = rt.load_string(yaml, "retention.yaml", &diags);
  EXPECT_TRUE(s.ok()) << format_diagnostics(diags);
  if (!s.ok()) return {};
  s = rt.run();
  EXPECT_TRUE(s.ok()) << s.message();
  return rt.report();
}

/// Every edge conserves, and no router kept more than `limit` for one replica.
void expect_bounded(const RunReport& r, std::size_t limit) {
  ASSERT_FALSE(r.edges.empty());
  for (const auto& e : r.edges) {
    EXPECT_EQ(e.sent, e.delivered + e.dropped) << e.from << " -> " << e.to;
    EXPECT_EQ(e.waiting, 0U) << e.from << " -> " << e.to;
    EXPECT_GT(e.peak_retained, 0U) << e.from << " -> " << e.to;
    EXPECT_LE(e.peak_retained, limit) << e.from << " -> " << e.to;
  }
}

// A slow sink behind drop_oldest: `work` keeps outputs waiting nearly all the
// time. Without per-envelope releases the source kept every envelope it ever
// sent to `work` (the whole run) for replay.
TEST(Retention, ASlowSinkBehindDropOldestKeepsRetentionBounded) {
  const std::uint64_t count = 3000;
  RunReport r = run_yaml(
      "pipeline: retention\nstages:\n"
      "  - {id: src, type: sim.source, params: {count: 3000, payload_bytes: 256}}\n"
      "  - {id: work, type: sim.work, inputs: {in: src/out}}\n"
      "  - {id: sink, type: sim.sink, inputs: {in: work/out}, params: {service_us: 200},\n"
      "     queue: {capacity: 4, overflow: drop_oldest}}\n");
  // Into work: 2 x its 8 credits, plus what work may hold for the sink's 4
  // credits and 4 waiting.
  expect_bounded(r, retention_limit(8) + 4 * 2);
  EXPECT_GT(r.edge("work/out", "sink/in")->dropped, 0U);
  EXPECT_EQ(r.edge("src/out", "work/in")->delivered, count);
}

TEST(Retention, KeyedEdgeWithOneSlowReplicaKeepsRetentionBounded) {
  const std::uint64_t count = 3000;
  RunReport r = run_yaml(
      "pipeline: retention\nstages:\n"
      "  - {id: src, type: sim.source, params: {count: 3000, streams: 8}}\n"
      "  - {id: work, type: sim.work, inputs: {in: src/out}, queue: {capacity: 8}}\n"
      "  - {id: sink, type: sim.sink, replicas: 2, key: stream, inputs: {in: work/out},\n"
      "     params: {service_us: 100}, queue: {capacity: 4, overflow: drop_newest}}\n");
  // Into work: 2 x 8, plus 4 credits for each sink replica and 4 waiting.
  expect_bounded(r, retention_limit(8) + 4 * 3);
  EXPECT_EQ(r.stage("work")->processed, count);
}

/// Joins `a` and `b` by sequence number and passes `a` on.
class PassPair final : public Stage {
 public:
  void setup(StageSpec& s) override {
    a_ = s.input<schema::Blob>("a");
    b_ = s.input<schema::Blob>("b");
    out_ = s.output<schema::Blob>("out");
  }
  Status process(Inputs& in, Outputs& out, StageContext&) override {
    if (const Envelope* a = in.envelope(a_)) out.forward(out_, *a);
    return {};
  }

 private:
  InputPort<schema::Blob> a_;
  InputPort<schema::Blob> b_;
  OutputPort<schema::Blob> out_;
};

TEST(Retention, JoinsReleaseWhatTheyHoldOnceTheirSetsAreDone) {
  const std::uint64_t count = 2000;
  Runtime rt;
  ASSERT_TRUE(rt.registry().add<PassPair>("test.pass_pair", "joins a and b, passes a").ok());
  std::vector<Diagnostic> diags;
  ASSERT_TRUE(rt.load_string("pipeline: retention\nstages:\n"
                             "  - {id: a, type: sim.source, params: {count: 2000}}\n"
                             "  - {id: b, type: sim.source, params: {count: 2000}}\n"
                             "  - {id: pair, type: test.pass_pair, inputs: {a: a/out, b: b/out},\n"
                             "     join: {key: seq, timeout_ms: 5000}, queue: {capacity: 8}}\n"
                             "  - {id: sink, type: sim.sink, inputs: {in: pair/out}, params: {service_us: 100},\n"
                             "     queue: {capacity: 4, overflow: drop_oldest}}\n",
                             "retention.yaml", &diags)
                  .ok())
      << format_diagnostics(diags);
  ASSERT_TRUE(rt.run().ok());
  RunReport r = rt.report();
  // Into the join: its 8 credits, 8 more held behind waiting outputs, and
  // the 32 incomplete sets it may hold for each of its two inputs.
  expect_bounded(r, retention_limit(8, 2 * 32) + 4 * 2);
  // Unpaced sources race each other, so some sets may be partial; every
  // sequence number is still processed, whole or in part.
  EXPECT_GE(r.stage("pair")->processed, count);
  EXPECT_EQ(r.edge("a/out", "pair/a")->delivered, count);
  EXPECT_EQ(r.edge("b/out", "pair/b")->delivered, count);
}

}  // namespace
}  // namespace swarmflow::runtime
