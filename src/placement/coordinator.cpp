#include "placement/coordinator.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include <caf/all.hpp>

#include <swarmflow/log.hpp>

#include "config/pipeline_spec.hpp"
#include "graph/graph.hpp"
#include "placement/failover.hpp"
#include "placement/failure_detector.hpp"
#include "runtime/snapshot_codec.hpp"
#include "runtime/unit_protocol.hpp"

namespace swarmflow::placement {
namespace {

/// (unit id, message bytes): a verified control message from a unit.
using control_atom = caf::atom_constant<caf::atom("control")>;
/// The failure watch's periodic check (scheduled by the actor itself).
using check_atom = caf::atom_constant<caf::atom("check")>;
/// (uint8 Await) -> (bool met, lost, missing), once met; `status_atom`: now.
using await_atom = caf::atom_constant<caf::atom("await")>;
using status_atom = caf::atom_constant<caf::atom("status")>;
/// -> bool: the units are in a run already.
using in_run_atom = caf::atom_constant<caf::atom("in_run")>;
/// -> (error, precondition): empty error when taken over.
using take_over_atom = caf::atom_constant<caf::atom("take_over")>;
/// -> bool: stops the coordinator.
using halt_atom = caf::atom_constant<caf::atom("halt")>;

/// The coordinator's view of the units in other processes. Soft state: it is
/// rebuilt from what the units send.
struct State {
  explicit State(CoordinatorSetup s) : setup(std::move(s)) {
    const std::size_t n = setup.remote.size();
    joined.assign(n, false);
    ready.assign(n, false);
    done.assign(n, false);
    dead.assign(n, false);
    rejoining.assign(n, false);
    plan_sent.assign(n, false);
    leaving.assign(n, false);
    heard_epoch.assign(n, 0);
    unit_state.assign(n, std::nullopt);
    unit_placement.assign(n, std::nullopt);
    left.assign(n, false);
    clock_offsets.assign(n, {0, false});
    for (std::size_t u = 0; u < n; ++u) {
      if (!setup.remote[u]) clock_offsets[u] = {0, true};
    }
    detectors = std::make_unique<FailureDetectors>(setup.spec->failure, n);
    if (!setup.clock) setup.clock = [] { return steady_now_ns(); };
  }

  CoordinatorSetup setup;
  const config::PipelineSpec& spec() const { return *setup.spec; }
  CoordinatorEffects& effects() const { return *setup.effects; }
  std::int64_t now() const { return setup.clock(); }

  std::vector<bool> joined;
  std::vector<bool> ready;
  std::vector<bool> done;
  std::vector<bool> dead;       ///< declared dead by its detector
  std::vector<bool> rejoining;  ///< dead, heard again: gets the plan in force, then Go
  std::vector<bool> plan_sent;  ///< a rejoining unit has been sent the plan
  std::vector<bool> leaving;    ///< asked to leave; its replicas are not handed over yet
  /// Placement epoch in each unit's heartbeats: above 0, the unit is in a
  /// run already (this coordinator was started again and takes it over).
  std::vector<std::uint32_t> heard_epoch;
  /// The placement each unit runs by, from its UnitState (a takeover).
  std::vector<std::optional<std::pair<std::uint32_t, std::vector<std::vector<int>>>>> unit_state;
  /// The same placements whole (replicas taking work, key maps, hand-overs).
  std::vector<std::optional<runtime::RoutingTable>> unit_placement;
  std::vector<bool> left;  ///< asked to leave and handed its replicas over
  /// Every message from a unit is a heartbeat for its detector.
  std::unique_ptr<FailureDetectors> detectors;
  std::string lost;  ///< why the first unit declared dead was; empty while none is
  Snapshots snapshots;
  /// By unit: its clock offset as it last reported it (units of this
  /// process: 0, known), and when all were last shared with the units.
  std::vector<std::pair<std::int64_t, bool>> clock_offsets;
  std::int64_t clock_shared_ns = 0;

  /// Tells every unit process every unit's clock offset, at most once a second.
  void share_clock_offsets() {
    const std::int64_t t = now();
    if (clock_shared_ns != 0 && t - clock_shared_ns < 1'000'000'000) return;
    clock_shared_ns = t;
    std::vector<std::int64_t> offsets;
    std::vector<bool> known;
    for (const auto& [offset, k] : clock_offsets) {
      offsets.push_back(offset);
      known.push_back(k);
    }
    for (std::size_t u = 0; u < setup.remote.size(); ++u) {
      if (!setup.remote[u] || dead[u] || left[u] || done[u]) continue;
      send(u, transport::make_control([&](flatbuffers::FlatBufferBuilder& fbb) {
             auto k = fbb.CreateVector(known);
             return std::make_pair(schema::ControlBody::ClockOffsets,
                                   schema::CreateClockOffsets(fbb, fbb.CreateVector(offsets), k).Union());
           }));
    }
  }

  // -- the failure watch's schedule
  std::int64_t next_check_ns = 0;
  bool skipped = false;

  /// Requests waiting for a condition.
  struct Waiter {
    Await what;
    caf::response_promise promise;
  };
  std::vector<Waiter> waiters;

  bool all(const std::vector<bool>& flags) const {
    for (std::size_t u = 0; u < flags.size(); ++u) {
      if (setup.remote[u] && !flags[u]) return false;
    }
    return true;
  }
  std::string missing(const std::vector<bool>& flags) const {
    std::string out;
    for (std::size_t u = 0; u < flags.size(); ++u) {
      if (setup.remote[u] && !flags[u]) out += (out.empty() ? "" : ", ") + spec().units[u].id;
    }
    return out;
  }

  AwaitStatus status(Await what) const {
    AwaitStatus s;
    s.lost = lost;
    switch (what) {
      case Await::joined:
        s.missing = missing(joined);
        s.met = s.missing.empty() || !lost.empty();
        break;
      case Await::ready:
        s.missing = missing(ready);
        s.met = s.missing.empty() || !lost.empty();
        break;
      case Await::unit_states: {
        std::vector<bool> stated(unit_state.size());
        for (std::size_t u = 0; u < stated.size(); ++u) stated[u] = unit_state[u].has_value();
        s.missing = missing(stated);
        s.met = s.missing.empty();
        break;
      }
      case Await::done: {
        std::vector<bool> over(done.size());
        for (std::size_t u = 0; u < over.size(); ++u) over[u] = done[u] || dead[u];
        s.missing = missing(over);
        s.met = s.missing.empty();
        break;
      }
    }
    return s;
  }

  /// Answers the waiters whose condition now holds.
  void answer_waiters() {
    for (auto it = waiters.begin(); it != waiters.end();) {
      const AwaitStatus s = status(it->what);
      if (s.met) {
        it->promise.deliver(true, s.lost, s.missing);
        it = waiters.erase(it);
      } else {
        ++it;
      }
    }
  }

  void send(std::size_t unit, transport::ControlBuffer message) {
    effects().send(static_cast<int>(unit), std::move(message));
  }

  void broadcast_plan() {
    const auto table = effects().table();
    for (std::size_t u = 0; u < setup.remote.size(); ++u) {
      if (setup.remote[u]) send(u, runtime::plan_message(*table));
    }
  }

  // -- messages from the units ------------------------------------------------

  void on_unit_message(const std::string& unit_id, const schema::Control& c) {
    const int u = runtime::unit_index(spec(), unit_id);
    if (u < 0 || !setup.remote[static_cast<std::size_t>(u)]) {
      setup.figures->unknown_units.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    const auto i = static_cast<std::size_t>(u);
    if (left[i]) {
      // It handed its replicas over: only its figures are still wanted; then
      // it may go.
      if (c.body_type() == schema::ControlBody::UnitDone && !done[i]) {
        done[i] = true;
        effects().merge_unit_done(u, *c.body_as_UnitDone());
        send(i, runtime::simple_message(schema::ControlBody::Shutdown, effects().table()->epoch));
      }
      return;
    }
    if (dead[i]) {
      // A unit declared dead speaks again: a restarted process joins anew as
      // a unit without replicas (its replicas live elsewhere now); anything
      // else from it belongs to its old life and is refused.
      if (c.body_type() != schema::ControlBody::Heartbeat) {
        setup.figures->stale_messages.fetch_add(1, std::memory_order_relaxed);
        return;
      }
      dead[i] = false;
      rejoining[i] = true;
      plan_sent[i] = false;
      ready[i] = false;
      done[i] = false;
      detectors->rejoin(i, now());
    }
    detectors->heartbeat(i, now());
    switch (c.body_type()) {
      case schema::ControlBody::Heartbeat:
        joined[i] = true;
        heard_epoch[i] = c.body_as_Heartbeat()->epoch();
        break;
      case schema::ControlBody::UnitState: {
        const auto* m = c.body_as_UnitState();
        std::vector<std::vector<int>> plan;
        if (m->running() && m->plan() != nullptr &&
            runtime::decode_plan(*setup.graph, spec().units.size(), *m->plan(), &plan)) {
          unit_state[i] = std::make_pair(m->plan()->epoch(), std::move(plan));
          runtime::RoutingTable whole;
          if (runtime::decode_placement(*setup.graph, spec().units.size(), *m->plan(), &whole)) {
            unit_placement[i] = std::move(whole);
          }
        }
        break;
      }
      case schema::ControlBody::UnitFigures: {
        const auto* m = c.body_as_UnitFigures();
        if (m->clock_delay_ns() >= 0) {
          effects().record_clock(u, m->clock_offset_ns(), m->clock_delay_ns());
          clock_offsets[i] = {m->clock_offset_ns(), true};
          share_clock_offsets();
        }
        if (!done[i]) effects().merge_unit_figures(u, *m);
        break;
      }
      case schema::ControlBody::LoadReport:
        effects().record_load_report(u, *c.body_as_LoadReport());
        break;
      case schema::ControlBody::Ready:
        if (c.body_as_Ready()->epoch() == effects().table()->epoch) ready[i] = true;
        effects().unit_ready(u, c.body_as_Ready()->epoch());
        break;
      case schema::ControlBody::Snapshot: {
        // Kept only from the unit that hosts the replica by the placement
        // in force: a fenced unit's state is stale.
        const auto* m = c.body_as_Snapshot();
        const auto table = effects().table();
        const int node = static_cast<int>(m->node());
        const int replica = static_cast<int>(m->replica());
        auto snapshot = std::make_shared<runtime::ReplicaSnapshot>();
        if (node < 0 || static_cast<std::size_t>(node) >= table->unit_of.size() || replica < 0 ||
            static_cast<std::size_t>(replica) >= table->unit_of[static_cast<std::size_t>(node)].size() ||
            table->unit(node, replica) != u || !runtime::decode_snapshot(*m, snapshot.get()) ||
            (snapshot->handover && !table->is_draining(node, replica))) {
          setup.figures->stale_messages.fetch_add(1, std::memory_order_relaxed);
          break;
        }
        if (snapshot->handover) {
          // A drained replica's hand-over: a failover of its successor
          // before its own first snapshot starts from this state (nothing
          // before it is retained upstream any more).
          if (!snapshot->finished) {
            auto kept = std::make_shared<runtime::ReplicaSnapshot>(*snapshot);
            kept->handover = false;
            kept->keys.clear();
            snapshots[{node, replica}] = std::move(kept);
          }
          effects().drained(node, replica, std::move(snapshot));
          break;
        }
        const std::uint64_t id = snapshot->id;
        snapshots[{node, replica}] = std::move(snapshot);
        send(i, runtime::encode_snapshot_stored(table->epoch, node, replica, id));
        break;
      }
      case schema::ControlBody::Leaving:
        // Handed over by the failure watch, like a unit declared dead.
        if (!leaving[i]) leaving[i] = true;
        break;
      case schema::ControlBody::FirstOutput: {
        const auto* m = c.body_as_FirstOutput();
        effects().record_first_output(m->epoch(), m->after_ns());
        break;
      }
      case schema::ControlBody::UnitDone:
        if (c.body_as_UnitDone()->epoch() != effects().table()->epoch) {
          // Of an older placement: refused and counted (the unit sends it
          // again for the placement in force, with what was placed on it).
          setup.figures->stale_messages.fetch_add(1, std::memory_order_relaxed);
        } else if (!done[i]) {
          done[i] = true;
          detectors->retire(i);  // it may leave now
          effects().merge_unit_done(u, *c.body_as_UnitDone());
          effects().replicas_finished(effects().table()->replicas_on(u));
        }
        break;
      default:
        break;
    }
  }

  // -- the failure watch ------------------------------------------------------

  /// A unit declared dead has its replicas placed on the survivors (a new
  /// epoch, taken up here and sent to every unit process); its sources are
  /// lost. Before the run has started, or when some replica has no unit to
  /// go to, the run ends with an error that names the unit.
  void watch_units() {
    const std::int64_t now_ns = now();
    welcome_back();
    const auto dead_units = detectors->declare_dead(now_ns);
    std::vector<std::size_t> leavers;
    for (std::size_t u = 0; u < leaving.size(); ++u) {
      if (leaving[u] && !left[u] && !dead[u]) leavers.push_back(u);
    }
    if (dead_units.empty() && leavers.empty()) return;
    std::string who;
    for (const auto& d : dead_units) {
      dead[d.unit] = true;
      effects().unit_lost(static_cast<int>(d.unit));
      char phi[64];
      std::snprintf(phi, sizeof phi, "%.1f", d.phi);
      who += (who.empty() ? "" : "; ") + ("unit '" + spec().units[d.unit].id + "' is dead: nothing heard from it for " +
                                          std::to_string(d.silent_ns / 1'000'000) + " ms (phi " + phi +
                                          " reached failure.phi_threshold)");
    }
    for (std::size_t u : leavers) {
      // It hands its replicas over now; its detector stops watching it.
      left[u] = true;
      detectors->retire(u);
      effects().unit_lost(static_cast<int>(u));
      who += (who.empty() ? "" : "; ") + ("unit '" + spec().units[u].id + "' is leaving (it was asked to stop)");
    }
    std::vector<bool> usable(setup.remote.size());
    for (std::size_t u = 0; u < usable.size(); ++u) {
      usable[u] = !setup.remote[u] || (joined[u] && !done[u] && !dead[u] && !rejoining[u] && !left[u]);
    }
    std::vector<bool> is_source;
    for (const auto& node : setup.graph->nodes) is_source.push_back(node.source());
    const auto table = effects().table();
    const std::int64_t start_ns = effects().run_started_ns();
    const bool running = start_ns > 0 && !effects().run_finished();
    // A source whose position is kept here restarts elsewhere from it.
    std::vector<std::vector<bool>> restartable(table->unit_of.size());
    for (std::size_t s = 0; s < restartable.size(); ++s) restartable[s].assign(table->unit_of[s].size(), false);
    for (const auto& [key, snapshot] : snapshots) {
      const auto s = static_cast<std::size_t>(key.first);
      const auto r = static_cast<std::size_t>(key.second);
      if (s < restartable.size() && r < restartable[s].size()) restartable[s][r] = true;
    }
    const FailoverPlan plan = place_after_failure(spec(), is_source, table->unit_of, usable, restartable);
    if (!running || !plan.refused.empty()) {
      const std::string message =
          who + (running ? "; its work cannot be taken over (" + plan.refused + "), so the run ends"
                         : "; the run ends");
      if (lost.empty()) lost = message;
      effects().abort(message);
      return;
    }
    const std::uint32_t epoch = table->epoch + 1;
    FailoverReport report;
    for (const auto& d : dead_units) {
      if (!report.unit.empty()) report.unit += ",";
      report.unit += spec().units[d.unit].id;
      report.silent_ms = std::max<std::int64_t>(report.silent_ms, d.silent_ns / 1'000'000);
    }
    for (std::size_t u : leavers) {
      if (!report.unit.empty()) report.unit += ",";
      report.unit += spec().units[u].id;
    }
    if (dead_units.empty()) report.cause = "left";
    report.detected_s = static_cast<double>(now_ns - start_ns) / 1e9;
    report.epoch = epoch;
    const auto name = [&](const std::pair<int, int>& r) {
      return setup.graph->nodes[static_cast<std::size_t>(r.first)].decl->id + "/" + std::to_string(r.second);
    };
    for (const auto& m : plan.moved) {
      report.moved.push_back(name(m) + " -> " +
                             spec().units[static_cast<std::size_t>(plan.unit_of[static_cast<std::size_t>(m.first)]
                                                                         [static_cast<std::size_t>(m.second)])]
                                 .id);
    }
    for (const auto& l : plan.lost) {
      report.lost.push_back(name(l));
      // Why: with a position kept here it could have restarted, unless its
      // placement allows no unit left; without one, what it had not sent is gone.
      const auto it = snapshots.find(l);
      std::string why;
      if (it != snapshots.end() && it->second) {
        why = "its placement allows no unit left; it had sent at least " + std::to_string(it->second->processed);
      } else {
        why = "no position of it was kept off its unit (a live source has none; synthetic cameras, files and sim.source keep one)";
      }
      report.lost_why.push_back(std::move(why));
    }
    std::string moved;
    for (const auto& m : report.moved) moved += (moved.empty() ? "" : ", ") + m;
    std::string lost_replicas;
    for (const auto& l : report.lost) lost_replicas += (lost_replicas.empty() ? "" : ", ") + l;
    swarmflow::log::warn("%s; placement epoch %u: %s%s%s", who.c_str(), epoch,
                 moved.empty() ? "nothing to move" : moved.c_str(), lost_replicas.empty() ? "" : "; lost: ",
                 lost_replicas.c_str());
    effects().record_failover(std::move(report), now_ns, now());
    // A stateful replica moved to a unit process starts from its latest
    // snapshot, sent ahead of the plan on the same socket.
    for (const auto& m : plan.moved) {
      const int to = plan.unit_of[static_cast<std::size_t>(m.first)][static_cast<std::size_t>(m.second)];
      if (!setup.remote[static_cast<std::size_t>(to)]) continue;
      const auto it = snapshots.find(m);
      if (it != snapshots.end() && it->second) {
        send(static_cast<std::size_t>(to), runtime::encode_restore(epoch, m.first, m.second, *it->second));
        effects().carried_over(m.first, m.second, to);
      }
    }
    effects().apply_placement(plan.unit_of, epoch, snapshots);
    broadcast_plan();
    // Lost replicas never report; nothing else counts them as ended.
    if (!plan.lost.empty()) effects().replicas_finished(static_cast<int>(plan.lost.size()));
  }

  /// A unit heard again after it was declared dead gets the plan in force
  /// (where none of its old replicas are any more) and, once it is Ready for
  /// that epoch, Go: from then on failover may place replicas on it.
  void welcome_back() {
    for (std::size_t u = 0; u < setup.remote.size(); ++u) {
      if (!rejoining[u]) continue;
      const std::string& id = spec().units[u].id;
      if (!plan_sent[u]) {
        plan_sent[u] = true;
        const auto table = effects().table();
        swarmflow::log::info("unit '%s' is back: it joins again without replicas (placement epoch %u)",
                     id.c_str(), table->epoch);
        send(u, runtime::plan_message(*table));
      } else if (ready[u]) {
        rejoining[u] = false;
        const std::uint32_t epoch = effects().table()->epoch;
        swarmflow::log::info("unit '%s' runs again: failover and moves may place replicas on it", id.c_str());
        send(u, runtime::simple_message(schema::ControlBody::Go, epoch));
        effects().unit_back(static_cast<int>(u));
      }
    }
  }

  /// A check of the failure watch, `period_ns` after the last one was due.
  /// One that comes more than max(period, 20 ms) late, after a stall of the
  /// whole process during which messages may have waited unread, is not
  /// trusted: the next one decides (two in a row are never skipped).
  void scheduled_check(std::int64_t period_ns) {
    const std::int64_t woke = now();
    const bool late = woke - next_check_ns > std::max<std::int64_t>(period_ns, 20'000'000);
    next_check_ns = woke + period_ns;
    if (late && !skipped) {
      skipped = true;
      return;
    }
    skipped = false;
    watch_units();
  }

  // -- a takeover ---------------------------------------------------------------

  /// This coordinator was started again while its units run on: it takes
  /// the run over with the newest placement they report (UnitState). The
  /// replicas of its own units died with the coordinator before it, so a
  /// placement with any there cannot be taken over.
  std::pair<std::string, bool> take_over() {
    std::string missing_units;
    const std::vector<std::vector<int>>* plan = nullptr;
    std::uint32_t epoch = 0;
    std::size_t newest = 0;
    for (std::size_t u = 0; u < setup.remote.size(); ++u) {
      if (!setup.remote[u]) continue;
      const auto& state = unit_state[u];
      if (!state) {
        missing_units += (missing_units.empty() ? "" : ", ") + spec().units[u].id;
      } else if (plan == nullptr || state->first > epoch) {
        epoch = state->first;
        plan = &state->second;
        newest = u;
      }
    }
    if (!missing_units.empty() || plan == nullptr) {
      return {"the units run a pipeline already, but " + missing_units +
                  " did not say by which placement: cannot take it over",
              false};
    }
    for (std::size_t s = 0; s < plan->size(); ++s) {
      for (std::size_t r = 0; r < (*plan)[s].size(); ++r) {
        const int u = (*plan)[s][r];
        if (u != runtime::kLostUnit && !setup.remote[static_cast<std::size_t>(u)]) {
          return {"cannot take the running pipeline over: replica " + std::to_string(r) + " of stage '" +
                      spec().stages[s].id + "' ran on unit '" + spec().units[static_cast<std::size_t>(u)].id +
                      "' in the coordinator's process, and died with it",
                  true};
        }
      }
    }
    if (unit_placement[newest] && unit_placement[newest]->epoch == epoch) {
      effects().take_over_placement(*unit_placement[newest]);
    } else {
      effects().take_over(*plan, epoch);
    }
    swarmflow::log::info("coordinator at %s: takes over the running pipeline at placement epoch %u",
                 spec().coordinator.c_str(), epoch);
    return {std::string(), false};
  }
};

caf::behavior coordinator_actor(caf::event_based_actor* self, CoordinatorSetup setup) {
  auto state = std::make_shared<State>(std::move(setup));
  const std::int64_t period_us = std::max<std::int64_t>(1, state->setup.check_period_us);
  state->next_check_ns = state->now() + period_us * 1000;
  if (state->setup.checks_itself) {
    self->delayed_send(self, std::chrono::microseconds(period_us), check_atom::value);
  }
  return {
      [=](control_atom, const std::string& unit_id, const std::vector<std::uint8_t>& bytes) {
        // The control server verified these bytes before it handed them
        // over; verified again here, as this actor may be told by anyone.
        const auto* c = transport::verify_control(bytes.data(), bytes.size(), state->setup.limits);
        if (c == nullptr) return;
        state->on_unit_message(unit_id, *c);
        state->answer_waiters();
      },
      [=](check_atom) {
        state->scheduled_check(period_us * 1000);
        self->delayed_send(self, std::chrono::microseconds(period_us), check_atom::value);
        state->answer_waiters();
      },
      [=](check_atom, bool scheduled) -> bool {
        if (scheduled) {
          state->scheduled_check(period_us * 1000);
        } else {
          state->watch_units();
        }
        state->answer_waiters();
        return true;
      },
      [=](await_atom, std::uint8_t what) -> caf::response_promise {
        auto promise = self->make_response_promise();
        const AwaitStatus s = state->status(static_cast<Await>(what));
        if (s.met) {
          promise.deliver(true, s.lost, s.missing);
        } else {
          state->waiters.push_back(State::Waiter{static_cast<Await>(what), promise});
        }
        return promise;
      },
      [=](status_atom, std::uint8_t what) {
        const AwaitStatus s = state->status(static_cast<Await>(what));
        return caf::make_message(s.met, s.lost, s.missing);
      },
      [=](in_run_atom) {
        bool in_run = false;
        for (std::size_t u = 0; u < state->setup.remote.size(); ++u) {
          in_run = in_run || (state->setup.remote[u] && state->heard_epoch[u] > 0);
        }
        return in_run;
      },
      [=](take_over_atom) {
        auto [error, precondition] = state->take_over();
        return caf::make_message(std::move(error), precondition);
      },
      [=](halt_atom) {
        self->quit();
        return true;
      },
  };
}

}  // namespace

std::int64_t check_period_us(int heartbeat_ms) { return std::max(1000, heartbeat_ms * 1000 / 5); }

caf::actor spawn_coordinator(caf::actor_system& system, CoordinatorSetup setup) {
  return system.spawn<caf::detached>(coordinator_actor, std::move(setup));
}

void forward_control(const caf::actor& coordinator, const std::string& unit_id, const std::uint8_t* data,
                     std::size_t size) {
  caf::anon_send(coordinator, control_atom::value, unit_id, std::vector<std::uint8_t>(data, data + size));
}

namespace {

AwaitStatus ask_status(caf::scoped_actor& self, const caf::actor& coordinator, Await what) {
  AwaitStatus s;
  self->request(coordinator, caf::infinite, status_atom::value, static_cast<std::uint8_t>(what))
      .receive(
          [&](bool met, const std::string& lost, const std::string& missing) {
            s.met = met;
            s.lost = lost;
            s.missing = missing;
          },
          [&](const caf::error&) {});
  return s;
}

}  // namespace

AwaitStatus await(caf::actor_system& system, const caf::actor& coordinator, Await what, std::int64_t timeout_ms) {
  caf::scoped_actor self{system};
  AwaitStatus s;
  bool answered = false;
  self->request(coordinator, std::chrono::milliseconds(std::max<std::int64_t>(0, timeout_ms)), await_atom::value,
                static_cast<std::uint8_t>(what))
      .receive(
          [&](bool met, const std::string& lost, const std::string& missing) {
            answered = true;
            s.met = met;
            s.lost = lost;
            s.missing = missing;
          },
          [&](const caf::error&) {});
  if (answered) return s;
  return ask_status(self, coordinator, what);
}

AwaitStatus status(caf::actor_system& system, const caf::actor& coordinator, Await what) {
  caf::scoped_actor self{system};
  return ask_status(self, coordinator, what);
}

bool units_in_a_run(caf::actor_system& system, const caf::actor& coordinator) {
  caf::scoped_actor self{system};
  bool in_run = false;
  self->request(coordinator, caf::infinite, in_run_atom::value)
      .receive([&](bool answer) { in_run = answer; }, [&](const caf::error&) {});
  return in_run;
}

Status take_over(caf::actor_system& system, const caf::actor& coordinator) {
  caf::scoped_actor self{system};
  Status result = Status::error("the coordinator is gone", StatusCode::unavailable);
  self->request(coordinator, caf::infinite, take_over_atom::value)
      .receive(
          [&](const std::string& error, bool precondition) {
            if (error.empty()) {
              result = Status();
            } else {
              result = Status::error(error, precondition ? StatusCode::failed_precondition : StatusCode::unavailable);
            }
          },
          [&](const caf::error&) {});
  return result;
}

void check_now(caf::actor_system& system, const caf::actor& coordinator, bool scheduled) {
  caf::scoped_actor self{system};
  self->request(coordinator, caf::infinite, check_atom::value, scheduled)
      .receive([](bool) {}, [](const caf::error&) {});
}

void stop_coordinator(caf::actor_system& system, const caf::actor& coordinator) {
  if (!coordinator) return;
  caf::scoped_actor self{system};
  self->request(coordinator, caf::infinite, halt_atom::value).receive([](bool) {}, [](const caf::error&) {});
}

}  // namespace swarmflow::placement
