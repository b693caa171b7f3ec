// Moves while the run goes on (docs/placement.md "What a move guarantees"):
// a replica drained and placed on another unit, or keys given to other
// replicas, loses nothing, repeats nothing and keeps each stream's order;
// a stateful stage takes its state along. No timing is asserted: each test
// waits for its moves to complete, then ends its source.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <thread>

#include <swarmflow/runtime.hpp>

namespace swarmflow {
namespace {

std::int64_t counter(const StageReport* s, const std::string& name) {
  if (s == nullptr) return -1;
  auto it = s->counters.find(name);
  return it == s->counters.end() ? 0 : it->second;
}

/// Waits until `done` moves have completed or the run stops making them.
bool await_moves(const Runtime& rt, std::uint64_t done) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < until && rt.moves_completed() < done) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return rt.moves_completed() >= done;
}

/// Waits until the sink has processed at least `n` envelopes (at most 20 s).
void await_received(const Runtime& rt, std::uint64_t n) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < until) {
    const RunReport r = rt.report();
    const StageReport* sink = r.stage("sink");
    if (sink != nullptr && sink->processed >= n) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ADD_FAILURE() << "the sink did not get " << n << " envelopes: " << rt.report().to_json();
}

void expect_everything_once_in_order(const RunReport& r) {
  const StageReport* sink = r.stage("sink");
  ASSERT_NE(sink, nullptr);
  const StageReport* src = r.stage("src");
  ASSERT_NE(src, nullptr);
  EXPECT_GT(counter(sink, "received"), 0);
  EXPECT_EQ(static_cast<std::uint64_t>(counter(sink, "received")), src->processed);
  EXPECT_EQ(counter(sink, "lost"), 0);
  EXPECT_EQ(counter(sink, "duplicate"), 0);
  EXPECT_EQ(counter(sink, "reordered"), 0);
  for (const auto& e : r.edges) {
    EXPECT_EQ(e.dropped, 0U) << e.from << " -> " << e.to;
    EXPECT_EQ(e.sent, e.delivered) << e.from << " -> " << e.to;
    EXPECT_EQ(e.waiting, 0U) << e.from << " -> " << e.to;
  }
}

const char* kThreeUnits =
    "pipeline: moves\n"
    "units:\n"
    "  - {id: u0, threads: 1}\n"
    "  - {id: u1, threads: 1}\n"
    "  - {id: u2, threads: 1}\n";

/// Each test runs with the units' messages over the inproc transport and
/// handed over directly (`transport: {in_process: direct}`).
class Moves : public ::testing::TestWithParam<std::string> {
 protected:
  /// Loads the three units, this test's transport and `stages`, and starts.
  void start(Runtime& rt, const std::string& stages) {
    std::vector<Diagnostic> diags;
    ASSERT_TRUE(rt.load_string(std::string(kThreeUnits) + GetParam() + "stages:\n" + stages, "moves.yaml", &diags).ok())
        << format_diagnostics(diags);
    ASSERT_TRUE(rt.start().ok());
  }
};

TEST_P(Moves, AKeyedReplicaMovedBackAndForthUnderLoadLosesNothingAndKeepsOrder) {
  Runtime rt;
  ASSERT_NO_FATAL_FAILURE(start(rt,
                                "  - {id: src, type: sim.source, params: {count: 0, streams: 8},"
                                " placement: {units: [u0]}}\n"
                                "  - {id: work, type: sim.work, replicas: 2, key: stream, inputs: {in: src/out},"
                                " params: {service_us: 40}}\n"
                                "  - {id: sink, type: sim.sink, key: stream, inputs: {in: work/out},"
                                " placement: {units: [u0]}}\n"));
  await_received(rt, 200);
  const char* units[] = {"u0", "u1", "u2"};
  constexpr int kMoves = 12;
  for (int i = 0; i < kMoves; ++i) {
    const std::uint64_t before = rt.moves_completed();
    const Status s = rt.move_replica("work", i % 2, units[(i + 1) % 3]);
    // A move to the unit it is on already is refused; the others are made.
    if (!s.ok()) {
      EXPECT_NE(s.message().find("already"), std::string::npos) << s.message();
      continue;
    }
    ASSERT_TRUE(await_moves(rt, before + 1)) << "move " << i << " did not complete: " << rt.report().to_json();
  }
  rt.request_stop();
  std::atomic<bool> done{false};
  std::thread dog([&] {
    for (int i = 0; i < 5000 && !done; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (!done) fprintf(stderr, "HUNG: %s\n", rt.report().to_json().c_str());
  });
  ASSERT_TRUE(rt.wait().ok());
  done = true;
  dog.join();
  const RunReport r = rt.report();
  expect_everything_once_in_order(r);
  ASSERT_GE(r.moves.size(), 8U);
  for (const auto& m : r.moves) {
    EXPECT_EQ(m.kind, "move");
    EXPECT_EQ(m.stage, "work");
    EXPECT_NE(m.from, m.to);
    EXPECT_GE(m.drain_ms, 0);
  }
}

TEST_P(Moves, AStatefulSinkMovedMidStreamKeepsItsPerStreamState) {
  // sim.sink keeps each stream's next sequence number: a successor without
  // it would count the envelopes before the move as lost.
  Runtime rt;
  ASSERT_NO_FATAL_FAILURE(start(rt,
                                "  - {id: src, type: sim.source, params: {count: 0, streams: 4},"
                                " placement: {units: [u0]}}\n"
                                "  - {id: work, type: sim.work, inputs: {in: src/out}, params: {service_us: 20},"
                                " placement: {units: [u0]}}\n"
                                "  - {id: sink, type: sim.sink, key: stream, inputs: {in: work/out},"
                                " placement: {units: [u1, u2]}}\n"));
  await_received(rt, 300);
  ASSERT_TRUE(rt.move_replica("sink", 0, "u2").ok());
  ASSERT_TRUE(await_moves(rt, 1));
  await_received(rt, 600);
  ASSERT_TRUE(rt.move_replica("sink", 0, "u1").ok());
  ASSERT_TRUE(await_moves(rt, 2));
  await_received(rt, 900);
  // Not where its placement.units allow, and not a source.
  EXPECT_FALSE(rt.move_replica("sink", 0, "u0").ok());
  EXPECT_FALSE(rt.move_replica("src", 0, "u1").ok());
  rt.request_stop();
  ASSERT_TRUE(rt.wait().ok());
  const RunReport r = rt.report();
  expect_everything_once_in_order(r);
  ASSERT_EQ(r.moves.size(), 2U);
  EXPECT_EQ(r.moves[0].from, "u1");
  EXPECT_EQ(r.moves[0].to, "u2");
  EXPECT_EQ(r.moves[1].to, "u1");
}

TEST_P(Moves, KeysGivenToAnotherReplicaAndBackKeepEachStreamsOrder) {
  Runtime rt;
  ASSERT_NO_FATAL_FAILURE(start(rt,
                                "  - {id: src, type: sim.source, params: {count: 0, streams: 6},"
                                " placement: {units: [u0]}}\n"
                                "  - {id: work, type: sim.work, replicas: 2, key: stream, inputs: {in: src/out},"
                                " params: {service_us: 30}, placement: {units: [u1, u2], spread: true}}\n"
                                "  - {id: sink, type: sim.sink, key: stream, inputs: {in: work/out},"
                                " placement: {units: [u0]}}\n"));
  await_received(rt, 300);
  // Every stream to replica 1, then every stream to replica 0.
  std::vector<std::pair<std::uint64_t, int>> to_one;
  std::vector<std::pair<std::uint64_t, int>> to_zero;
  for (std::uint64_t s = 0; s < 6; ++s) {
    to_one.emplace_back(s, 1);
    to_zero.emplace_back(s, 0);
  }
  ASSERT_TRUE(rt.reassign_keys("work", to_one).ok());
  ASSERT_TRUE(await_moves(rt, 1));
  const std::uint64_t one_done = rt.moves_completed();
  await_received(rt, 900);
  const RunReport middle = rt.report();
  ASSERT_TRUE(rt.reassign_keys("work", to_zero).ok());
  ASSERT_TRUE(await_moves(rt, one_done + 1));  // at least one replica gave keys back
  await_received(rt, 1500);
  rt.request_stop();
  ASSERT_TRUE(rt.wait().ok());
  const RunReport r = rt.report();
  expect_everything_once_in_order(r);
  ASSERT_GE(r.moves.size(), 2U);
  for (const auto& m : r.moves) EXPECT_EQ(m.kind, "keys");
  // While replica 1 held every key, replica 0 took none.
  std::uint64_t zero_middle = 0;
  for (const auto& rep : middle.replicas) {
    if (rep.stage == "work" && rep.replica == 0) zero_middle = rep.processed;
  }
  std::uint64_t zero_end = 0;
  for (const auto& rep : r.replicas) {
    if (rep.stage == "work" && rep.replica == 0) zero_end = rep.processed;
  }
  EXPECT_GT(zero_end, zero_middle);
}

TEST_P(Moves, KeysOfAStageWithStatePerKeyGoToTheirNewReplicaWithTheirState) {
  // sim.sink keeps each stream's next sequence number, per stream: keyed by
  // stream, its streams can go to the other replica, each with its state. A
  // replica given a stream without it would count the stream's envelopes
  // before the hand-over as lost.
  Runtime rt;
  ASSERT_NO_FATAL_FAILURE(start(rt,
                                "  - {id: src, type: sim.source, params: {count: 0, streams: 6},"
                                " placement: {units: [u0]}}\n"
                                "  - {id: sink, type: sim.sink, replicas: 2, key: stream, inputs: {in: src/out},"
                                " params: {service_us: 30}, placement: {units: [u1, u2], spread: true}}\n"));
  await_received(rt, 300);
  std::vector<std::pair<std::uint64_t, int>> to_one;
  std::vector<std::pair<std::uint64_t, int>> to_zero;
  for (std::uint64_t s = 0; s < 6; ++s) {
    to_one.emplace_back(s, 1);
    to_zero.emplace_back(s, s % 2 == 0 ? 0 : 1);
  }
  ASSERT_TRUE(rt.reassign_keys("sink", to_one).ok());
  ASSERT_TRUE(await_moves(rt, 1));
  const std::uint64_t one_done = rt.moves_completed();
  await_received(rt, 900);
  ASSERT_TRUE(rt.reassign_keys("sink", to_zero).ok());
  ASSERT_TRUE(await_moves(rt, one_done + 1));
  await_received(rt, 1500);
  rt.request_stop();
  ASSERT_TRUE(rt.wait().ok());
  const RunReport r = rt.report();
  expect_everything_once_in_order(r);
  ASSERT_GE(r.moves.size(), 2U);
  std::uint64_t keys = 0;
  for (const auto& m : r.moves) {
    EXPECT_EQ(m.kind, "keys");
    keys += m.keys;
  }
  EXPECT_GE(keys, 6U);  // every stream went at least once
  for (const auto& rep : r.replicas) {
    if (rep.stage == "sink") {
      EXPECT_GT(rep.processed, 0U) << rep.replica;
    }
  }
}

TEST_P(Moves, KeysAndReplicasOfAStageWhoseStateIsNotPerKeyStay) {
  // sim.sink keeps its state per stream; keyed by part_id, a key is not a
  // stream, so its keys cannot take their state along: reassigning them is
  // refused, and so is removing a replica (its state has no other home),
  // while adding one is not.
  Runtime rt;
  ASSERT_NO_FATAL_FAILURE(start(rt,
                                "  - {id: src, type: sim.source, params: {count: 0, streams: 2},"
                                " placement: {units: [u0]}}\n"
                                "  - {id: sink, type: sim.sink, replicas: {min: 2, max: 3}, key: part_id,"
                                " inputs: {in: src/out}, placement: {units: [u1, u2], spread: true}}\n"));
  await_received(rt, 100);
  Status s = rt.reassign_keys("sink", {{0, 1}, {1, 0}});
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("not per key"), std::string::npos) << s.message();
  ASSERT_TRUE(rt.add_replica("sink").ok());
  ASSERT_TRUE(await_moves(rt, 1));
  s = rt.remove_replica("sink");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("per replica"), std::string::npos) << s.message();
  rt.request_stop();
  ASSERT_TRUE(rt.wait().ok());
}

TEST_P(Moves, ReplicasAddedAndRemovedMidStreamLoseNothingAndKeysKeepTheirOrderAndState) {
  // sim.sink keeps each stream's next sequence number, per stream: a replica
  // that took a stream without its state, or before the stream's earlier
  // envelopes were processed, would count them lost or reordered.
  Runtime rt;
  ASSERT_NO_FATAL_FAILURE(start(rt,
                                "  - {id: src, type: sim.source, params: {count: 0, streams: 8},"
                                " placement: {units: [u0]}}\n"
                                "  - {id: sink, type: sim.sink, replicas: {min: 1, max: 3}, key: stream,"
                                " inputs: {in: src/out}, params: {service_us: 20}, placement: {units: [u1, u2]}}\n"));
  await_received(rt, 300);
  // Replica 1 joins where it stands by (u2) and takes half the streams;
  // replica 2 stands by on u1, moves to u2 as it joins, and takes two.
  ASSERT_TRUE(rt.add_replica("sink", "u2").ok());
  ASSERT_TRUE(await_moves(rt, 1));
  std::vector<std::pair<std::uint64_t, int>> halves;
  for (std::uint64_t s = 0; s < 8; ++s) halves.emplace_back(s, static_cast<int>(s % 2));
  ASSERT_TRUE(rt.reassign_keys("sink", halves).ok());
  ASSERT_TRUE(await_moves(rt, 2));
  await_received(rt, 900);
  ASSERT_TRUE(rt.add_replica("sink", "u2").ok());
  ASSERT_TRUE(await_moves(rt, 3));
  // Stream 2 comes from replica 0, stream 3 from replica 1: one drain each.
  ASSERT_TRUE(rt.reassign_keys("sink", {{2, 2}, {3, 2}}).ok());
  ASSERT_TRUE(await_moves(rt, 5));
  await_received(rt, 1500);
  // At most max: refused.
  Status s = rt.add_replica("sink");
  EXPECT_NE(s.message().find("most replicas"), std::string::npos) << s.message();
  // Down to min: each removed replica's streams go on elsewhere with their state.
  ASSERT_TRUE(rt.remove_replica("sink").ok());
  ASSERT_TRUE(await_moves(rt, 6));
  await_received(rt, 2100);
  ASSERT_TRUE(rt.remove_replica("sink").ok());
  ASSERT_TRUE(await_moves(rt, 7));
  s = rt.remove_replica("sink");
  EXPECT_NE(s.message().find("fewest replicas"), std::string::npos) << s.message();
  const RunReport mid = rt.report();
  const StageReport* sink = mid.stage("sink");
  ASSERT_NE(sink, nullptr);
  const std::uint64_t processed = sink->processed;
  await_received(rt, processed + 300);
  rt.request_stop();
  ASSERT_TRUE(rt.wait().ok());
  const RunReport r = rt.report();
  expect_everything_once_in_order(r);
  std::vector<std::string> kinds;
  for (const auto& m : r.moves) kinds.push_back(m.kind);
  EXPECT_EQ(kinds, (std::vector<std::string>{"add", "keys", "add", "keys", "keys", "remove", "remove"}));
  ASSERT_EQ(r.moves.size(), 7U);
  EXPECT_EQ(r.moves[0].replica, 1);
  EXPECT_EQ(r.moves[0].from, "u2");
  EXPECT_EQ(r.moves[0].to, "u2");
  EXPECT_EQ(r.moves[2].replica, 2);
  EXPECT_EQ(r.moves[2].from, "u1");
  EXPECT_EQ(r.moves[2].to, "u2");
  EXPECT_EQ(r.moves[5].replica, 2);
  EXPECT_EQ(r.moves[6].replica, 1);
  // Every replica worked while it took work; after the removals only
  // replica 0 did (the others processed nothing more).
  std::map<int, std::uint64_t> by_replica;
  for (const auto& rep : r.replicas) {
    if (rep.stage == "sink") by_replica[rep.replica] = rep.processed;
  }
  ASSERT_EQ(by_replica.size(), 3U);
  for (const auto& [replica, n] : by_replica) EXPECT_GT(n, 0U) << replica;
}

TEST_P(Moves, MovesQueuedBackToBackAreMadeFromThePlacementInForceWhenEachBegins) {
  // Asked for at once: the same replica twice, keys given away twice. Hosts
  // take the placements up one epoch at a time, so none misses a drain.
  Runtime rt;
  ASSERT_NO_FATAL_FAILURE(start(rt,
                                "  - {id: src, type: sim.source, params: {count: 0, streams: 6},"
                                " placement: {units: [u0]}}\n"
                                "  - {id: work, type: sim.work, replicas: 3, key: stream, inputs: {in: src/out},"
                                " params: {service_us: 30}}\n"
                                "  - {id: sink, type: sim.sink, key: stream, inputs: {in: work/out},"
                                " placement: {units: [u0]}}\n"));
  await_received(rt, 300);
  std::vector<std::pair<std::uint64_t, int>> to_one;
  std::vector<std::pair<std::uint64_t, int>> to_two;
  for (std::uint64_t s = 0; s < 6; ++s) {
    to_one.emplace_back(s, 1);
    to_two.emplace_back(s, 2);
  }
  const char* units[] = {"u1", "u2", "u0", "u1"};
  int asked = 0;
  for (const char* u : units) asked += rt.move_replica("work", 0, u).ok() ? 1 : 0;
  asked += rt.reassign_keys("work", to_one).ok() ? 1 : 0;
  asked += rt.reassign_keys("work", to_two).ok() ? 1 : 0;
  asked += rt.move_replica("work", 2, "u0").ok() ? 1 : 0;
  ASSERT_GE(asked, 4);  // a move to the unit a replica is on when asked is refused
  ASSERT_TRUE(await_moves(rt, static_cast<std::uint64_t>(asked))) << rt.report().to_json();
  await_received(rt, 2000);
  rt.request_stop();
  ASSERT_TRUE(rt.wait().ok());
  const RunReport r = rt.report();
  expect_everything_once_in_order(r);
  EXPECT_GE(r.moves.size(), 4U);
}

TEST_P(Moves, MovesThatCannotBeMadeAreRefusedWithTheReason) {
  Runtime rt;
  std::vector<Diagnostic> diags;
  ASSERT_TRUE(rt.load_string(std::string(kThreeUnits) + GetParam() +
                                 "stages:\n"
                                 "  - {id: src, type: sim.source, params: {count: 0, rate_hz: 1000}}\n"
                                 "  - {id: sink, type: sim.sink, inputs: {in: src/out}}\n",
                             "moves.yaml", &diags)
                  .ok())
      << format_diagnostics(diags);
  EXPECT_FALSE(rt.move_replica("src", 0, "u1").ok());  // not started
  ASSERT_TRUE(rt.start().ok());
  Status s = rt.move_replica("src", 0, "u1");
  EXPECT_NE(s.message().find("source"), std::string::npos) << s.message();
  s = rt.move_replica("nope", 0, "u1");
  EXPECT_NE(s.message().find("no stage"), std::string::npos) << s.message();
  s = rt.move_replica("sink", 0, "u9");
  EXPECT_NE(s.message().find("no unit"), std::string::npos) << s.message();
  EXPECT_FALSE(rt.set_unit_speed("u9", 1.0).ok());
  EXPECT_FALSE(rt.set_unit_speed("u1", 0).ok());
  EXPECT_TRUE(rt.set_unit_speed("u1", 0.5).ok());
  rt.request_stop();
  ASSERT_TRUE(rt.wait().ok());
}

INSTANTIATE_TEST_SUITE_P(InProcess, Moves, ::testing::Values("", "transport: {in_process: direct}\n"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param.empty() ? std::string("ZeroMq") : std::string("Direct");
                         });

}  // namespace
}  // namespace swarmflow
