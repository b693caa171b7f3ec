// The adaptive placement policy on a simulated cluster: a closed-loop fluid
// model of a source feeding a keyed stage (block overflow, so the slowest
// replica paces everything), units of given speeds, and the policy deciding
// every load interval on a simulated clock. No threads, no sleeps.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

#include "placement/rebalance.hpp"

namespace swarmflow::placement {
namespace {

constexpr std::int64_t kMs = 1'000'000;

config::UnitDecl unit(const std::string& id, double speed = 1.0) {
  config::UnitDecl u;
  u.id = id;
  u.threads = 1;
  u.speed = speed;
  return u;
}

/// src (pinned to u0's side of things: it is a source) -> work (keyed).
struct Model {
  config::PipelineSpec spec;
  std::vector<std::vector<int>> unit_of;  // [stage][replica]: stage 0 src, stage 1 work
  std::vector<double> weight;             // per key: share of the source's envelopes
  std::vector<int> owner;                 // per key: replica of work
  double service_s = 0.002;               // per envelope at speed 1
  int queue_capacity = 16;
  double throughput = 0;                  // envelopes/s, after step()
  std::vector<double> served;             // per work replica, envelopes/s
  int moves = 0;

  Model(std::vector<config::UnitDecl> units, int replicas, int keys, std::vector<int> placed) {
    spec.units = std::move(units);
    config::StageDecl src;
    src.id = "src";
    config::StageDecl work;
    work.id = "work";
    work.inputs.push_back(config::InputDecl{});
    work.keyed = true;
    work.replicas = replicas;
    work.min_replicas = replicas;
    work.max_replicas = replicas;
    work.queue.capacity = queue_capacity;
    spec.stages = {src, work};
    unit_of = {{-1}, std::move(placed)};
    weight.assign(static_cast<std::size_t>(keys), 1.0 / keys);
    for (int k = 0; k < keys; ++k) owner.push_back(k % replicas);
  }

  int replicas() const { return static_cast<int>(unit_of[1].size()); }
  double speed(int u) const { return spec.units[static_cast<std::size_t>(u)].speed; }
  int sharing(int u) const { return static_cast<int>(std::count(unit_of[1].begin(), unit_of[1].end(), u)); }
  /// Envelopes per second replica r can process.
  double capacity(int r) const {
    const int u = unit_of[1][static_cast<std::size_t>(r)];
    return speed(u) / service_s / sharing(u);
  }

  /// The steady state: the source sends as fast as the slowest replica
  /// allows for its share of the keys.
  void step() {
    std::vector<double> share(static_cast<std::size_t>(replicas()), 0.0);
    for (std::size_t k = 0; k < weight.size(); ++k) share[static_cast<std::size_t>(owner[k])] += weight[k];
    throughput = 1e18;
    for (int r = 0; r < replicas(); ++r) {
      if (share[static_cast<std::size_t>(r)] > 0) throughput = std::min(throughput, capacity(r) / share[static_cast<std::size_t>(r)]);
    }
    served.assign(share.size(), 0.0);
    for (std::size_t r = 0; r < share.size(); ++r) served[r] = throughput * share[r];
  }

  LoadView view() const {
    LoadView v;
    v.units.assign(spec.units.size(), UnitLoadView{});
    v.unit_of = unit_of;
    for (int r = 0; r < replicas(); ++r) {
      const int u = unit_of[1][static_cast<std::size_t>(r)];
      const double cpu = served[static_cast<std::size_t>(r)] * service_s / speed(u);
      v.units[static_cast<std::size_t>(u)].utilisation += cpu;
      ReplicaLoadView rl;
      rl.stage = 1;
      rl.replica = r;
      rl.service_ns = service_s / speed(u) * 1e9;
      rl.arrival_hz = served[static_cast<std::size_t>(r)];
      // The bottleneck's queue is full; the others keep up.
      rl.queue_depth = served[static_cast<std::size_t>(r)] >= capacity(r) * 0.999 ? queue_capacity : 0;
      for (std::size_t k = 0; k < weight.size(); ++k) {
        if (owner[k] == r) rl.keys.push_back(KeyLoad{k, throughput * weight[k] * service_s});
      }
      v.replicas.push_back(rl);
    }
    for (auto& u : v.units) u.utilisation = std::min(1.0, u.utilisation);
    return v;
  }

  void apply(const Move& m) {
    ++moves;
    switch (m.kind) {
      case MoveKind::move_replica: unit_of[1][static_cast<std::size_t>(m.replica)] = m.to_unit; break;
      case MoveKind::add_replica:
        unit_of[1].push_back(m.to_unit);
        for (std::size_t k = 0; k < owner.size(); ++k) owner[k] = static_cast<int>(k) % replicas();
        break;
      case MoveKind::remove_replica:
        unit_of[1].pop_back();
        for (std::size_t k = 0; k < owner.size(); ++k) owner[k] = static_cast<int>(k) % replicas();
        break;
      case MoveKind::reassign_keys:
        for (const auto& [key, r] : m.keys) owner[static_cast<std::size_t>(key)] = r;
        break;
    }
  }

  /// Runs the policy every 250 ms from `from` to `to` (simulated ns), with
  /// `change(t)` applied first at each tick (a scenario).
  void run(Rebalancer& policy, std::int64_t from, std::int64_t to,
           const std::function<void(std::int64_t)>& change = nullptr) {
    for (std::int64_t t = from; t < to; t += 250 * kMs) {
      if (change) change(t);
      step();
      for (const Move& m : policy.decide(view(), t)) apply(m);
      step();
    }
  }
};

std::vector<config::UnitDecl> units(std::vector<double> speeds) {
  std::vector<config::UnitDecl> v;
  for (std::size_t i = 0; i < speeds.size(); ++i) v.push_back(unit("u" + std::to_string(i), speeds[i]));
  return v;
}

TEST(Rebalance, ThePipelineFilesSettingsAreThePolicys) {
  config::PlacementDecl decl;
  decl.rebalance_above = 0.7;
  decl.hysteresis = 0.05;
  decl.sustain_ms = 200;
  decl.cooldown_ms = 3000;
  const PolicySettings s = PolicySettings::from(decl);
  EXPECT_DOUBLE_EQ(s.rebalance_above, 0.7);
  EXPECT_DOUBLE_EQ(s.hysteresis, 0.05);
  EXPECT_EQ(s.sustain_ns, 200 * kMs);
  EXPECT_EQ(s.cooldown_ns, 3000 * kMs);
  // A cooldown from the file holds: two conditions 1 s apart make one move.
  Model m(units({1, 1, 1, 1, 1}), 4, 8, {1, 2, 3, 4});
  m.owner = {0, 0, 0, 1, 2, 2, 3, 3};
  Rebalancer policy(m.spec, s);
  m.run(policy, 0, 1500 * kMs);
  EXPECT_EQ(m.moves, 1);
  m.run(policy, 1500 * kMs, 2500 * kMs, [&](std::int64_t) { m.spec.units[2].speed = 0.25; });
  EXPECT_EQ(m.moves, 1) << "moved within the cooldown of 3 s";
}

TEST(Rebalance, AUnitSlowedMidRunIsRelievedAndThroughputComesBack) {
  // 4 replicas of a keyed 2 ms stage on u1..u4 of 5 one-thread units, 8
  // keys: 2000/s. u2 slows to 0.25 at 2 s.
  Model m(units({1, 1, 1, 1, 1}), 4, 8, {1, 2, 3, 4});
  Rebalancer policy(m.spec, PolicySettings{});
  m.run(policy, 0, 2000 * kMs);
  EXPECT_NEAR(m.throughput, 2000, 1);
  EXPECT_EQ(m.moves, 0);
  auto slow = [&](std::int64_t t) {
    if (t >= 2000 * kMs) m.spec.units[2].speed = 0.25;
  };
  m.run(policy, 2000 * kMs, 4000 * kMs, slow);
  EXPECT_GE(m.throughput, 0.9 * 2000) << "not back to 90% within 2 s";
  m.run(policy, 4000 * kMs, 60'000 * kMs, slow);
  EXPECT_GE(m.throughput, 0.95 * 2000);
  EXPECT_NE(m.unit_of[1][1], 2) << "the replica stayed on the slow unit";
  EXPECT_LE(m.moves, 2);
}

TEST(Rebalance, AReplicaThatKeepsItsUnitBusyStaysWhenItsFiguresWobble) {
  // Balanced at 2000/s on u1..u4, u0 idle: every replica keeps its unit
  // busy, so moving one to u0 relieves nothing. Measured arrival rates
  // wobble by up to 8% (a real unit's figures do); nothing moves in 60 s.
  Model m(units({1, 1, 1, 1, 1}), 4, 8, {1, 2, 3, 4});
  Rebalancer policy(m.spec, PolicySettings{});
  m.step();
  for (std::int64_t t = 0; t < 60'000 * kMs; t += 250 * kMs) {
    LoadView v = m.view();
    for (auto& r : v.replicas) r.arrival_hz *= 1.0 - 0.02 * static_cast<double>((t / (250 * kMs) + r.replica) % 5);
    for (const Move& mv : policy.decide(v, t)) m.apply(mv);
  }
  EXPECT_EQ(m.moves, 0);
}

TEST(Rebalance, AReplicaWhoseStepsOutlastTheIntervalIsSeenBusyAndMoved) {
  // u1 slowed to 0.05: each step of `work` takes 440 ms, longer than the
  // 100 ms interval, so most intervals see no arrival and no step end. What
  // it costs where it is shows in its busy share (the step under way
  // counts), and the policy moves it to the idle u2.
  Model m(units({1, 0.05, 1}), 1, 2, {1});
  m.spec.stages[1].pin_units = {"u1", "u2"};
  Rebalancer policy(m.spec, PolicySettings{});
  int moved_at = -1;
  for (int i = 0; i < 20 && moved_at < 0; ++i) {
    LoadView v;
    v.units.assign(3, UnitLoadView{});
    v.unit_of = m.unit_of;
    v.units[1].utilisation = 1.0;
    v.units[1].speed = 0.05;
    ReplicaLoadView r;
    r.stage = 1;
    r.replica = 0;
    r.service_ns = 440e6;
    r.arrival_hz = i % 4 == 0 ? 10.0 : 0.0;  // one arrival in four intervals
    r.busy = 1.0;
    v.replicas.push_back(r);
    for (const Move& mv : policy.decide(v, (1000 + i * 100) * kMs)) {
      EXPECT_EQ(mv.kind, MoveKind::move_replica);
      EXPECT_EQ(mv.to_unit, 2);
      moved_at = i;
    }
  }
  // Held for the sustain window (500 ms), through intervals with no arrival.
  EXPECT_EQ(moved_at, 5);
}

TEST(Rebalance, KeysHashedUnevenlyAreReassignedByTheirLoad) {
  // 8 keys over 4 replicas as 3/1/2/2: the replica with 3 paces all (1333/s).
  Model m(units({1, 1, 1, 1}), 4, 8, {0, 1, 2, 3});
  m.owner = {0, 0, 0, 1, 2, 2, 3, 3};
  const std::vector<int> hashed = m.owner;
  Rebalancer policy(m.spec, PolicySettings{});
  m.step();
  EXPECT_NEAR(m.throughput, 2000.0 * 2 / 3, 1);
  m.run(policy, 0, 10'000 * kMs);
  EXPECT_NEAR(m.throughput, 2000, 1);
  int changed = 0;
  for (std::size_t k = 0; k < hashed.size(); ++k) changed += hashed[k] != m.owner[k] ? 1 : 0;
  EXPECT_EQ(changed, 1) << "the fewest keys move: each replica that gives one away drains";
  std::map<int, int> per_replica;
  for (int o : m.owner) ++per_replica[o];
  for (const auto& [r, n] : per_replica) EXPECT_EQ(n, 2) << "replica " << r;
  EXPECT_EQ(m.moves, 1);
}

TEST(Rebalance, AHeavyKeyGetsAReplicaToItself) {
  // One key carries half the envelopes.
  Model m(units({1, 1, 1, 1}), 4, 8, {0, 1, 2, 3});
  m.weight = {0.5, 0.5 / 7, 0.5 / 7, 0.5 / 7, 0.5 / 7, 0.5 / 7, 0.5 / 7, 0.5 / 7};
  Rebalancer policy(m.spec, PolicySettings{});
  m.run(policy, 0, 10'000 * kMs);
  const int heavy = m.owner[0];
  for (std::size_t k = 1; k < m.owner.size(); ++k) EXPECT_NE(m.owner[k], heavy) << "key " << k;
  // The heavy key alone on one replica is the best there is: 2 x its capacity.
  EXPECT_NEAR(m.throughput, 500 / 0.5, 1);
}

TEST(Rebalance, HeterogeneousSpeedsConvergeNearTheBestKeyAssignment) {
  Model m(units({1, 1, 0.5, 0.25}), 4, 8, {0, 1, 2, 3});
  Rebalancer policy(m.spec, PolicySettings{});
  m.run(policy, 0, 30'000 * kMs);
  const int moves = m.moves;
  m.run(policy, 30'000 * kMs, 90'000 * kMs);
  EXPECT_EQ(m.moves, moves) << "still moving after it converged";
  // The best any assignment of the 8 keys to these replicas gives.
  double best = 0;
  std::vector<int> owner(8, 0);
  for (int code = 0; code < 1 << 16; ++code) {
    for (int k = 0; k < 8; ++k) owner[static_cast<std::size_t>(k)] = (code >> (2 * k)) & 3;
    Model probe = m;
    probe.owner = owner;
    probe.step();
    best = std::max(best, probe.throughput);
  }
  EXPECT_GE(m.throughput, 0.95 * best) << "best " << best;
}

TEST(Rebalance, ASquareWaveFasterThanTheSustainWindowMovesNothing) {
  Model m(units({1, 1, 1, 1, 1}), 4, 8, {1, 2, 3, 4});
  Rebalancer policy(m.spec, PolicySettings{});
  // u2 alternates between full and quarter speed every 250 ms, for 60 s.
  m.run(policy, 0, 60'000 * kMs, [&](std::int64_t t) { m.spec.units[2].speed = (t / (250 * kMs)) % 2 == 0 ? 1 : 0.25; });
  EXPECT_EQ(m.moves, 0);
}

TEST(Rebalance, ASlowSquareWaveMovesOnceAndDoesNotMoveBack) {
  Model m(units({1, 1, 1, 1, 1}), 4, 8, {1, 2, 3, 4});
  Rebalancer policy(m.spec, PolicySettings{});
  // u2 alternates every 5 s: once its replica is on the idle u0 it stays.
  m.run(policy, 0, 60'000 * kMs, [&](std::int64_t t) { m.spec.units[2].speed = (t / (5000 * kMs)) % 2 == 0 ? 1 : 0.25; });
  EXPECT_EQ(m.moves, 1);
}

TEST(Rebalance, NothingMovesDuringTheCooldown) {
  // Two slow units and one idle: one move, then nothing for cooldown_ms.
  Model m(units({1, 0.25, 0.25, 1, 1, 1}), 2, 8, {1, 2});
  PolicySettings s;
  s.cooldown_ns = 3000 * kMs;
  Rebalancer policy(m.spec, s);
  std::vector<std::int64_t> at;
  for (std::int64_t t = 0; t < 20'000 * kMs; t += 250 * kMs) {
    m.step();
    for (const Move& mv : policy.decide(m.view(), t)) {
      m.apply(mv);
      at.push_back(t);
    }
  }
  ASSERT_GE(at.size(), 2U);
  EXPECT_GE(at[1] - at[0], 3000 * kMs);
}

TEST(Rebalance, APinnedStageAndASourceNeverMove) {
  Model m(units({1, 0.25, 1}), 1, 4, {1});
  m.spec.stages[1].pin_units = {"u1"};
  Rebalancer policy(m.spec, PolicySettings{});
  m.run(policy, 0, 20'000 * kMs);
  EXPECT_EQ(m.unit_of[1][0], 1);
  for (int k = 0; k < 2; ++k) {
    // Allowed on u1 and u2 only: it may go to u2, never to u0.
    Model n(units({1, 0.25, 1}), 1, 4, {1});
    n.spec.stages[1].pin_units = {"u1", "u2"};
    Rebalancer p(n.spec, PolicySettings{});
    n.run(p, 0, 20'000 * kMs);
    EXPECT_EQ(n.unit_of[1][0], 2);
  }
}

TEST(Rebalance, ABacklogAddsReplicasUpToMaxAndIdleReplicasGoDownToMin) {
  // One replica on a slow unit with three idle ones: the queue backs up, so
  // replicas are added (up to max 3) wherever there is room.
  Model m(units({1, 0.5, 1, 1, 1}), 1, 8, {1});
  m.spec.stages[1].min_replicas = 1;
  m.spec.stages[1].max_replicas = 3;  // replicas: {min: 1, max: 3}
  m.spec.stages[1].pin_units = {"u1", "u2", "u3", "u4"};
  Rebalancer policy(m.spec, PolicySettings{});
  m.run(policy, 0, 30'000 * kMs);
  EXPECT_EQ(m.replicas(), 3);
  // Load falls to a trickle (an open-loop view: each replica 5% busy): back to min.
  LoadView quiet = m.view();
  for (auto& r : quiet.replicas) {
    r.arrival_hz = 25;
    r.queue_depth = 0;
  }
  for (auto& u : quiet.units) u.utilisation = 0.05;
  Rebalancer idle(m.spec, PolicySettings{});
  for (std::int64_t t = 0; t < 30'000 * kMs; t += 250 * kMs) {
    quiet.unit_of = m.unit_of;
    quiet.replicas.resize(static_cast<std::size_t>(m.replicas()));
    for (const Move& mv : idle.decide(quiet, t)) {
      EXPECT_EQ(mv.kind, MoveKind::remove_replica);
      m.apply(mv);
    }
  }
  EXPECT_EQ(m.replicas(), 1);
}

TEST(Rebalance, AssignKeysByLoadFillsTheRoomiestReplicaFirst) {
  const auto owner = assign_keys_by_load({{1, 4}, {2, 3}, {3, 2}, {4, 2}, {5, 1}}, {1.0, 1.0});
  std::vector<double> load(2, 0);
  const std::map<std::uint64_t, double> cost = {{1, 4}, {2, 3}, {3, 2}, {4, 2}, {5, 1}};
  for (const auto& [key, r] : owner) load[static_cast<std::size_t>(r)] += cost.at(key);
  EXPECT_EQ(load[0], 6);
  EXPECT_EQ(load[1], 6);
  // A replica with twice the capacity takes twice the load.
  const auto skewed = assign_keys_by_load({{1, 1}, {2, 1}, {3, 1}}, {2.0, 1.0});
  int on_big = 0;
  for (const auto& [key, r] : skewed) on_big += r == 0 ? 1 : 0;
  EXPECT_EQ(on_big, 2);
}

}  // namespace
}  // namespace swarmflow::placement
