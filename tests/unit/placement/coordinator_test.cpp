// The coordinator actor's decisions, fed with control messages on a clock
// the test sets: who has joined, who is dead, who leaves, and what it does
// about it (through CoordinatorEffects, recorded here).

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include <swarmflow/registry.hpp>

#include "config/pipeline_spec.hpp"
#include "graph/graph.hpp"
#include "placement/coordinator.hpp"
#include "placement/static_placement.hpp"
#include "runtime/snapshot_codec.hpp"
#include "runtime/unit_protocol.hpp"

namespace swarmflow::placement {
namespace {

constexpr std::int64_t kMs = 1'000'000;

/// What the coordinator did, as the Runtime would have carried it out.
struct RecordedEffects : CoordinatorEffects {
  mutable std::mutex mutex;
  std::shared_ptr<const runtime::RoutingTable> placed;
  std::int64_t started_ns = 1;
  std::vector<std::pair<int, schema::ControlBody>> sent;
  std::vector<std::uint32_t> applied_epochs;
  std::vector<std::vector<int>> applied_unit_of;  ///< of the last placement taken up
  std::vector<FailoverReport> failovers;
  std::vector<std::string> aborts;
  int finished = 0;
  int merged = 0;

  std::shared_ptr<const runtime::RoutingTable> table() const override {
    std::lock_guard<std::mutex> lock(mutex);
    return placed;
  }
  std::int64_t run_started_ns() const override { return started_ns; }
  bool run_finished() const override { return false; }
  void send(int unit, transport::ControlBuffer message) override {
    const auto* c = transport::verify_control(message.data(), message.size(), transport::WireLimits{});
    std::lock_guard<std::mutex> lock(mutex);
    sent.emplace_back(unit, c == nullptr ? schema::ControlBody::NONE : c->body_type());
  }
  void apply_placement(std::vector<std::vector<int>> unit_of, std::uint32_t epoch, const Snapshots&) override {
    std::lock_guard<std::mutex> lock(mutex);
    auto table = std::make_shared<runtime::RoutingTable>();
    table->epoch = epoch;
    table->unit_of = unit_of;
    placed = table;
    applied_epochs.push_back(epoch);
    applied_unit_of = std::move(unit_of);
  }
  void take_over(std::vector<std::vector<int>>, std::uint32_t) override {}
  void record_load(int, double) override {}
  void merge_unit_done(int, const schema::UnitDone&) override {
    std::lock_guard<std::mutex> lock(mutex);
    ++merged;
  }
  void replicas_finished(int count) override {
    std::lock_guard<std::mutex> lock(mutex);
    finished += count;
  }
  void record_failover(FailoverReport failover, std::int64_t, std::int64_t) override {
    std::lock_guard<std::mutex> lock(mutex);
    failovers.push_back(std::move(failover));
  }
  void record_first_output(std::uint32_t, std::int64_t) override {}
  void abort(const std::string& message) override {
    std::lock_guard<std::mutex> lock(mutex);
    aborts.push_back(message);
  }
  void drained(int node, int replica, std::shared_ptr<const runtime::ReplicaSnapshot> handover) override {
    std::lock_guard<std::mutex> lock(mutex);
    handovers.emplace_back(std::make_pair(node, replica), std::move(handover));
  }
  std::vector<std::pair<std::pair<int, int>, std::shared_ptr<const runtime::ReplicaSnapshot>>> handovers;

  int sent_to(int unit, schema::ControlBody type) const {
    std::lock_guard<std::mutex> lock(mutex);
    return sent_to_locked(unit, type);
  }
  int sent_to_locked(int unit, schema::ControlBody type) const {
    int n = 0;
    for (const auto& [u, t] : sent) n += u == unit && t == type ? 1 : 0;
    return n;
  }
};

/// A coordinator with u0 in its own process and u1, u2 as unit processes,
/// `work/0` on u1 and `work/1` on u2; its clock is `now_ns`.
class CoordinatorActor : public ::testing::Test {
 protected:
  void SetUp() override {
    register_builtin_stages(registry_);
    std::vector<Diagnostic> found;
    auto spec = config::load_pipeline_string(
        "pipeline: coordinated\n"
        "coordinator: \"ipc:///tmp/swarmflow-coordinator-test.sock\"\n"
        "units:\n"
        "  - {id: u0, endpoint: \"ipc:///tmp/swarmflow-coordinator-test-u0.sock\"}\n"
        "  - {id: u1, endpoint: \"ipc:///tmp/swarmflow-coordinator-test-u1.sock\"}\n"
        "  - {id: u2, endpoint: \"ipc:///tmp/swarmflow-coordinator-test-u2.sock\"}\n"
        "stages:\n"
        "  - {id: source, type: sim.source, params: {count: 10}, placement: {units: [u0]}}\n"
        "  - {id: work, type: sim.work, replicas: 2, key: stream, inputs: {in: source/out},\n"
        "     placement: {units: [u1, u2], spread: true}}\n"
        "  - {id: sink, type: sim.sink, inputs: {in: work/out}, placement: {units: [u0]}}\n",
        "coordinated.yaml", registry_, found);
    ASSERT_TRUE(spec.has_value()) << format_diagnostics(found);
    spec_ = std::move(*spec);
    graph_ = graph::Graph::build(spec_, registry_);
    auto table = std::make_shared<runtime::RoutingTable>();
    table->epoch = 1;
    table->unit_of = place_static(spec_);
    ASSERT_EQ(table->unit_of[1], std::vector<int>({1, 2}));
    effects_.placed = table;

    CoordinatorSetup setup;
    setup.spec = &spec_;
    setup.graph = &graph_;
    setup.remote = {false, true, true};
    setup.effects = &effects_;
    setup.clock = [now = now_] { return now->load(); };
    setup.check_period_us = 5000;
    setup.checks_itself = false;
    figures_ = setup.figures;
    config_.set("scheduler.max-threads", std::size_t{1});
    system_ = std::make_unique<caf::actor_system>(config_);
    coordinator_ = spawn_coordinator(*system_, std::move(setup));
  }

  void TearDown() override {
    if (system_) {
      stop_coordinator(*system_, coordinator_);
      coordinator_ = caf::actor();
      system_.reset();
    }
  }

  void from(const std::string& unit, const transport::ControlBuffer& message) {
    forward_control(coordinator_, unit, message.data(), message.size());
  }
  void heartbeat(const std::string& unit, std::uint32_t epoch = 0) {
    from(unit, transport::make_control([&](flatbuffers::FlatBufferBuilder& fbb) {
           return std::make_pair(schema::ControlBody::Heartbeat,
                                 schema::CreateHeartbeat(fbb, fbb.CreateString(unit), now_->load(), epoch, 42).Union());
         }));
  }
  void unit_done(const std::string& unit, std::uint32_t epoch) {
    from(unit, transport::make_control([&](flatbuffers::FlatBufferBuilder& fbb) {
           return std::make_pair(schema::ControlBody::UnitDone,
                                 schema::CreateUnitDone(fbb, fbb.CreateString(unit), epoch, true).Union());
         }));
  }
  /// Sets the clock and runs a failure check (after what was sent before);
  /// `scheduled`: one due every 5 ms, skipped when late.
  void check_at(std::int64_t ns, bool scheduled = false) {
    now_->store(ns);
    check_now(*system_, coordinator_, scheduled);
  }

  Registry registry_;
  config::PipelineSpec spec_;
  graph::Graph graph_;
  RecordedEffects effects_;
  std::shared_ptr<std::atomic<std::int64_t>> now_ = std::make_shared<std::atomic<std::int64_t>>(0);
  std::shared_ptr<CoordinatorFigures> figures_;
  caf::actor_system_config config_;
  std::unique_ptr<caf::actor_system> system_;
  caf::actor coordinator_;
};

TEST_F(CoordinatorActor, AnswersAWaitForTheUnitsToJoinOnceEachHasSentAHeartbeat) {
  AwaitStatus s = status(*system_, coordinator_, Await::joined);
  EXPECT_FALSE(s.met);
  EXPECT_EQ(s.missing, "u1, u2");
  heartbeat("u1");
  s = status(*system_, coordinator_, Await::joined);
  EXPECT_FALSE(s.met);
  EXPECT_EQ(s.missing, "u2");
  heartbeat("u2");
  s = await(*system_, coordinator_, Await::joined, 10'000);
  EXPECT_TRUE(s.met);
  EXPECT_EQ(s.missing, "");
  EXPECT_EQ(s.lost, "");
  EXPECT_FALSE(units_in_a_run(*system_, coordinator_));
  // Ready counts only for the epoch in force.
  from("u1", runtime::ready_message("u1", 1));
  from("u2", runtime::ready_message("u2", 7));
  s = status(*system_, coordinator_, Await::ready);
  EXPECT_FALSE(s.met);
  EXPECT_EQ(s.missing, "u2");
}

TEST_F(CoordinatorActor, ASilentUnitIsDeclaredDeadAndItsReplicaIsPlacedOnTheSurvivor) {
  // Both units beat every 25 ms; u1 falls silent at 500 ms. With the default
  // settings phi reaches the threshold some 250 ms later.
  std::int64_t declared_at = -1;
  for (std::int64_t t = 0; t <= 1500 * kMs; t += 5 * kMs) {
    now_->store(t);
    if (t % (25 * kMs) == 0) {
      if (t <= 500 * kMs) heartbeat("u1");
      heartbeat("u2");
    }
    check_at(t);
    std::lock_guard<std::mutex> lock(effects_.mutex);
    if (declared_at < 0 && !effects_.applied_epochs.empty()) declared_at = t;
  }
  ASSERT_GE(declared_at, 0) << "u1 was never declared dead";
  EXPECT_GT(declared_at, 700 * kMs);
  EXPECT_LT(declared_at, 950 * kMs);
  {
    std::lock_guard<std::mutex> lock(effects_.mutex);
    EXPECT_EQ(effects_.applied_epochs, std::vector<std::uint32_t>({2}));
    EXPECT_EQ(effects_.applied_unit_of[1], std::vector<int>({2, 2}));
    ASSERT_EQ(effects_.failovers.size(), 1U);
    EXPECT_EQ(effects_.failovers[0].unit, "u1");
    EXPECT_EQ(effects_.failovers[0].epoch, 2U);
    EXPECT_EQ(effects_.failovers[0].moved, std::vector<std::string>({"work/0 -> u2"}));
    EXPECT_TRUE(effects_.aborts.empty());
  }
  // Every unit process gets the new plan; nothing from the dead unit but a
  // heartbeat is taken any more.
  EXPECT_EQ(effects_.sent_to(2, schema::ControlBody::PlacementPlan), 1);
  EXPECT_EQ(effects_.sent_to(1, schema::ControlBody::PlacementPlan), 1);
  unit_done("u1", 2);
  check_at(1505 * kMs);
  EXPECT_EQ(figures_->stale_messages.load(), 1U);
}

TEST_F(CoordinatorActor, ALeavingUnitIsHandedOverAtTheNextCheckAndToldToGoOnceItHasReported) {
  heartbeat("u1");
  heartbeat("u2");
  check_at(10 * kMs);
  from("u1", runtime::leaving_message("u1", 1));
  check_at(15 * kMs);
  {
    std::lock_guard<std::mutex> lock(effects_.mutex);
    ASSERT_EQ(effects_.failovers.size(), 1U);
    EXPECT_EQ(effects_.failovers[0].cause, "left");
    EXPECT_EQ(effects_.failovers[0].unit, "u1");
    EXPECT_EQ(effects_.applied_unit_of[1], std::vector<int>({2, 2}));
  }
  // Its figures are still wanted; then it is told to go. It is not watched
  // any more: its silence after that is no death.
  unit_done("u1", 1);
  for (std::int64_t t = 25 * kMs; t <= 2000 * kMs; t += 25 * kMs) {
    now_->store(t);
    heartbeat("u2");
    check_at(t);
  }
  EXPECT_EQ(effects_.sent_to(1, schema::ControlBody::Shutdown), 1);
  std::lock_guard<std::mutex> lock(effects_.mutex);
  EXPECT_EQ(effects_.merged, 1);
  EXPECT_EQ(effects_.failovers.size(), 1U);
  EXPECT_TRUE(effects_.aborts.empty());
}

TEST_F(CoordinatorActor, AUnitDoneOfAnOlderEpochIsRefusedAndCountedAndTheOneOfTheEpochInForceIsTaken) {
  heartbeat("u1");
  heartbeat("u2");
  check_at(10 * kMs);
  // u1 leaves: epoch 2. A UnitDone of epoch 1 from u2 (sent before it took
  // epoch 2 up) is refused; the one it sends again for epoch 2 counts.
  from("u1", runtime::leaving_message("u1", 1));
  check_at(15 * kMs);
  ASSERT_EQ(effects_.table()->epoch, 2U);
  unit_done("u2", 1);
  check_at(20 * kMs);
  EXPECT_EQ(figures_->stale_messages.load(), 1U);
  {
    std::lock_guard<std::mutex> lock(effects_.mutex);
    EXPECT_EQ(effects_.merged, 0);
  }
  unit_done("u2", 2);
  check_at(25 * kMs);
  EXPECT_EQ(figures_->stale_messages.load(), 1U);
  std::lock_guard<std::mutex> lock(effects_.mutex);
  EXPECT_EQ(effects_.merged, 1);
}

TEST_F(CoordinatorActor, AUnitDeadBeforeTheRunStartsEndsItWithAnErrorThatNamesIt) {
  effects_.started_ns = 0;
  heartbeat("u1");
  heartbeat("u2");
  for (std::int64_t t = 0; t <= 2000 * kMs; t += 25 * kMs) {
    now_->store(t);
    heartbeat("u2");
    check_at(t);
  }
  const AwaitStatus s = await(*system_, coordinator_, Await::ready, 10'000);
  EXPECT_TRUE(s.met);
  EXPECT_NE(s.lost.find("unit 'u1' is dead: nothing heard from it for"), std::string::npos) << s.lost;
  EXPECT_NE(s.lost.find("; the run ends"), std::string::npos) << s.lost;
  std::lock_guard<std::mutex> lock(effects_.mutex);
  ASSERT_EQ(effects_.aborts.size(), 1U);
  EXPECT_EQ(effects_.aborts[0], s.lost);
  EXPECT_TRUE(effects_.applied_epochs.empty());
}

TEST_F(CoordinatorActor, ACheckThatComesLateIsSkippedOnceAsTheProcessMayHaveStalled) {
  for (std::int64_t t = 0; t <= 500 * kMs; t += 5 * kMs) {
    now_->store(t);
    if (t % (25 * kMs) == 0) {
      heartbeat("u1");
      heartbeat("u2");
    }
    check_at(t, true);
  }
  // The whole process stalls for half a second: the units' heartbeats wait
  // unread. The first check after it is not trusted...
  check_at(1000 * kMs, true);
  {
    std::lock_guard<std::mutex> lock(effects_.mutex);
    EXPECT_TRUE(effects_.failovers.empty());
    EXPECT_TRUE(effects_.aborts.empty());
  }
  // ...and the heartbeats read then show both units alive.
  heartbeat("u1");
  heartbeat("u2");
  check_at(1005 * kMs, true);
  // Two late checks in a row: the second decides. Both units are silent,
  // and the work they had cannot go anywhere else.
  check_at(2000 * kMs, true);
  {
    std::lock_guard<std::mutex> lock(effects_.mutex);
    EXPECT_TRUE(effects_.aborts.empty());
  }
  check_at(3000 * kMs, true);
  std::lock_guard<std::mutex> lock(effects_.mutex);
  ASSERT_EQ(effects_.aborts.size(), 1U);
  EXPECT_NE(effects_.aborts[0].find("its work cannot be taken over"), std::string::npos) << effects_.aborts[0];
  EXPECT_TRUE(effects_.failovers.empty());
}

TEST_F(CoordinatorActor, AHandOverFromTheUnitOfADrainingReplicaGoesToThePlacerAndIsKeptForAFailover) {
  // work/0 on u1 drains for a move (the placement in force says so).
  auto draining = std::make_shared<runtime::RoutingTable>(*effects_.placed);
  draining->epoch = 2;
  draining->draining = {1, 0};
  {
    std::lock_guard<std::mutex> lock(effects_.mutex);
    effects_.placed = draining;
  }
  runtime::ReplicaSnapshot handover;
  handover.handover = true;
  handover.state = "seq 41";
  handover.processed = 41;
  handover.keys = {{7, "key 7 at 12"}};
  heartbeat("u1");
  heartbeat("u2");
  // From a unit that does not host it, or for a replica that is not draining: refused.
  from("u2", runtime::encode_snapshot("u2", 2, 1, 0, handover));
  from("u2", runtime::encode_snapshot("u2", 2, 1, 1, handover));
  from("u1", runtime::encode_snapshot("u1", 2, 1, 0, handover));
  check_at(0);
  EXPECT_EQ(figures_->stale_messages.load(), 2U);
  {
    std::lock_guard<std::mutex> lock(effects_.mutex);
    ASSERT_EQ(effects_.handovers.size(), 1U);
    EXPECT_EQ(effects_.handovers[0].first, std::make_pair(1, 0));
    ASSERT_TRUE(effects_.handovers[0].second);
    EXPECT_EQ(effects_.handovers[0].second->state, "seq 41");
    EXPECT_EQ(effects_.handovers[0].second->keys, handover.keys);
    // Its successor runs on u2 (the placer's next placement).
    auto moved = std::make_shared<runtime::RoutingTable>(*effects_.placed);
    moved->epoch = 3;
    moved->draining = {-1, -1};
    moved->unit_of[1] = {2, 2};
    effects_.placed = moved;
  }
  EXPECT_EQ(effects_.sent_to(1, schema::ControlBody::SnapshotStored), 0) << "a hand-over is not answered";
  // u2 dies before the successor's first snapshot: work/0 starts on u1 from
  // the hand-over's state.
  for (std::int64_t t = 0; t <= 1500 * kMs; t += 5 * kMs) {
    if (t % (25 * kMs) == 0) {
      heartbeat("u1");
      if (t <= 100 * kMs) heartbeat("u2");
    }
    check_at(t);
  }
  std::lock_guard<std::mutex> lock(effects_.mutex);
  ASSERT_EQ(effects_.failovers.size(), 1U);
  EXPECT_EQ(effects_.applied_unit_of[1], std::vector<int>({1, 1}));
  EXPECT_EQ(effects_.sent_to_locked(1, schema::ControlBody::Restore), 1);
}

TEST_F(CoordinatorActor, APlacementPlanCarriesTheWholePlacementAndAnOutOfRangeOneIsRefused) {
  runtime::RoutingTable t;
  t.epoch = 9;
  t.unit_of = {{0}, {2, 1}, {0}};
  t.draining = {1, 1};
  t.draining_keys = {3, 5};
  t.draining_all_keys = true;
  t.handovers = {runtime::RoutingTable::Handover{1, 0, 1, 7}};
  t.active = {1, 1, 1};
  t.ring = {1, 1, 1};
  auto keys = std::make_shared<runtime::KeyMap>();
  (*keys)[11] = 1;
  (*keys)[12] = 0;
  t.keys = {nullptr, keys, nullptr};
  const auto decode = [&](const runtime::RoutingTable& table, runtime::RoutingTable* out) {
    const auto message = runtime::plan_message(table);
    const auto* c = transport::verify_control(message.data(), message.size(), transport::WireLimits{});
    return c != nullptr && c->body_as_PlacementPlan() != nullptr &&
           runtime::decode_placement(graph_, spec_.units.size(), *c->body_as_PlacementPlan(), out);
  };
  runtime::RoutingTable got;
  ASSERT_TRUE(decode(t, &got));
  EXPECT_EQ(got.epoch, 9U);
  EXPECT_EQ(got.unit_of, t.unit_of);
  EXPECT_EQ(got.draining, t.draining);
  EXPECT_EQ(got.draining_keys, t.draining_keys);
  EXPECT_TRUE(got.draining_all_keys);
  ASSERT_EQ(got.handovers.size(), 1U);
  EXPECT_TRUE(got.was_handed_over(1, 0) == false) << "taken up at epoch 7, not 9";
  EXPECT_TRUE(got.drained_on(1, 0, 1));
  EXPECT_EQ(got.active, t.active);
  EXPECT_EQ(got.ring, t.ring);
  ASSERT_TRUE(got.key_map(1));
  EXPECT_EQ(*got.key_map(1), *keys);
  EXPECT_FALSE(got.key_map(0));
  // A key placed on a replica the stage does not have, or a hand-over from
  // a unit the pipeline does not have, is not this pipeline's plan.
  runtime::RoutingTable bad = t;
  auto wrong = std::make_shared<runtime::KeyMap>(*keys);
  (*wrong)[13] = 2;
  bad.keys = {nullptr, wrong, nullptr};
  EXPECT_FALSE(decode(bad, &got));
  bad = t;
  bad.handovers[0].from_unit = 3;
  EXPECT_FALSE(decode(bad, &got));
  bad = t;
  bad.draining = {1, 2};
  EXPECT_FALSE(decode(bad, &got));
}

TEST_F(CoordinatorActor, AHandOverOfManyKeysFitsTheControlLimitsAndABrokenOneIsRefused) {
  runtime::ReplicaSnapshot handover;
  handover.handover = true;
  for (std::uint64_t k = 0; k < 20000; ++k) handover.keys.emplace_back(k, "state of " + std::to_string(k));
  handover.keys.emplace_back(99999, "");
  const auto message = runtime::encode_snapshot("u1", 2, 1, 0, handover);
  const auto* c = transport::verify_control(message.data(), message.size(), transport::WireLimits{});
  ASSERT_NE(c, nullptr) << "20001 keys with their state in one hand-over";
  runtime::ReplicaSnapshot got;
  ASSERT_TRUE(runtime::decode_snapshot(*c->body_as_Snapshot(), &got));
  EXPECT_EQ(got.keys, handover.keys);
  const auto keys = runtime::encode_key_states(3, 1, 1, handover.keys);
  const auto* k = transport::verify_control(keys.data(), keys.size(), transport::WireLimits{});
  ASSERT_NE(k, nullptr);
  runtime::KeyStates states;
  ASSERT_TRUE(runtime::decode_key_states(*k->body_as_KeyStates(), &states));
  EXPECT_EQ(states, handover.keys);
  // A successor's Restore carries the state, not the keys given away.
  const auto restore = runtime::encode_restore(3, 1, 0, handover);
  const auto* r = transport::verify_control(restore.data(), restore.size(), transport::WireLimits{});
  ASSERT_NE(r, nullptr);
  ASSERT_TRUE(runtime::decode_snapshot(*r->body_as_Restore()->snapshot(), &got));
  EXPECT_TRUE(got.keys.empty());
  // Sizes that do not add up to the bytes: refused.
  const auto broken = transport::make_control([&](flatbuffers::FlatBufferBuilder& fbb) {
    const std::vector<std::uint64_t> ids{1, 2};
    const std::vector<std::uint32_t> sizes{3, 9};
    const std::vector<std::uint8_t> bytes{1, 2, 3, 4};
    return std::make_pair(schema::ControlBody::KeyStates,
                          schema::CreateKeyStates(fbb, 3, 1, 1, fbb.CreateVector(ids), fbb.CreateVector(sizes),
                                                  fbb.CreateVector(bytes))
                              .Union());
  });
  const auto* b = transport::verify_control(broken.data(), broken.size(), transport::WireLimits{});
  ASSERT_NE(b, nullptr);
  EXPECT_FALSE(runtime::decode_key_states(*b->body_as_KeyStates(), &states));
}

}  // namespace
}  // namespace swarmflow::placement
