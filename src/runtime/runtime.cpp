#include <swarmflow/runtime.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <thread>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include "placement/failure_detector.hpp"
#include "placement/failover.hpp"
#include "placement/static_placement.hpp"
#include "runtime/inbound_batcher.hpp"
#include "runtime/messages.hpp"
#include "runtime/report_builder.hpp"
#include "runtime/run_state.hpp"
#include "runtime/snapshot_codec.hpp"
#include "runtime/stats_codec.hpp"
#include "runtime/unit_actor.hpp"
#include "runtime/unit_protocol.hpp"
#include "transport/control.hpp"
#include "transport/security.hpp"
#include "transport/transport.hpp"

namespace swarmflow {
namespace runtime {
namespace {


template <class T>
std::vector<std::unique_ptr<T>> make_n(int n) {
  std::vector<std::unique_ptr<T>> v;
  for (int i = 0; i < n; ++i) v.push_back(std::make_unique<T>());
  return v;
}

/// The coordinator's view of the units in other processes. Soft state: it is
/// rebuilt from what the units send.
struct ClusterView {
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<bool> remote;  ///< by unit
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
  std::vector<bool> left;       ///< asked to leave and handed its replicas over
  std::uint64_t stale_messages = 0;  ///< from units declared dead, other than a new heartbeat
  /// Every message from a unit is a heartbeat for its detector.
  std::unique_ptr<placement::FailureDetectors> detectors;
  std::string lost;  ///< why the first unit declared dead was; empty while none is
  std::uint64_t unknown_units = 0;
  /// The latest snapshot of each stateful replica on a unit process, by
  /// (node, replica): what a failover restores.
  std::map<std::pair<int, int>, std::shared_ptr<const ReplicaSnapshot>> snapshots;
  /// Answers units (SnapshotStored); set before the server starts.
  transport::ControlServer* server = nullptr;

  bool all(const std::vector<bool>& flags) {
    for (std::size_t u = 0; u < flags.size(); ++u) {
      if (remote[u] && !flags[u]) return false;
    }
    return true;
  }
  std::string missing(const std::vector<bool>& flags, const config::PipelineSpec& spec) {
    std::string out;
    for (std::size_t u = 0; u < flags.size(); ++u) {
      if (remote[u] && !flags[u]) out += (out.empty() ? "" : ", ") + spec.units[u].id;
    }
    return out;
  }
};

int replicas_on(const RunState& run, int unit) { return run.table()->replicas_on(unit); }

}  // namespace
}  // namespace runtime

// -- Runtime ------------------------------------------------------------------

namespace {
/// How often a coordinator that waits for units to join says whom it waits for.
constexpr std::int64_t kJoinLogEveryMs = 3000;
}  // namespace

Status write_key_pair(const std::string& path, bool overwrite) {
  if (!transport::curve_available()) {
    return Status::error("this libzmq has no CURVE support", StatusCode::unavailable);
  }
  return transport::write_keypair(path, transport::generate_keypair(), overwrite);
}

struct Runtime::Impl {
  RuntimeOptions options;
  Registry registry;
  std::shared_ptr<runtime::RunState> run;
  /// One actor system per unit hosted here, by unit index (null elsewhere).
  std::vector<std::unique_ptr<caf::actor_system_config>> caf_configs;
  std::vector<std::unique_ptr<caf::actor_system>> systems;
  std::vector<caf::actor> unit_actors;  ///< one per unit hosted here
  int instance = 0;
  bool started = false;
  bool waited = false;
  Status result;
  RunReport final_report;

  std::vector<bool> local;   ///< by unit: hosted in this process
  bool distributed = false;  ///< some unit runs in another process
  std::unique_ptr<transport::ControlServer> control_server;

  /// The run's report so far, with the coordinator's control socket.
  RunReport report_now() const {
    RunReport r = runtime::build_report(*run);
    if (control_server) r.coordinator.refused_handshakes = control_server->refused_handshakes();
    r.coordinator.stale_refused = run->stale_refused.load(std::memory_order_relaxed);
    if (cluster) {
      std::lock_guard<std::mutex> lock(cluster->mutex);
      r.coordinator.stale_refused += cluster->stale_messages;
    }
    return r;
  }
  std::shared_ptr<runtime::ClusterView> cluster;
  std::shared_ptr<runtime::UnitSide> unit_side;

  // -- the failure watch thread (start_failure_watch)
  std::thread watch;
  std::mutex watch_mutex;
  std::condition_variable watch_cv;
  bool watch_stopping = false;

  ~Impl() { stop_failure_watch(); }

  // -- CURVE: public keys of every unit (resolved), this process's key pair
  std::vector<std::string> unit_keys;
  std::string coordinator_key;
  transport::KeyPair own_keys;

  static bool is_tcp(const std::string& endpoint) { return endpoint.rfind("tcp://", 0) == 0; }

  /// A public key as written in the file: Z85, or a .pub file relative to it.
  Status resolve_key(const std::string& value, const std::string& what, std::string* out) const {
    // A file wins over a literal key: a 40-character path can also be valid Z85.
    std::string path = value;
    if (!value.empty() && value[0] != '/' && !run->spec.file.empty()) {
      const auto slash = run->spec.file.rfind('/');
      if (slash != std::string::npos) path = run->spec.file.substr(0, slash + 1) + value;
    }
    if (!std::filesystem::exists(path)) path = value;
    std::string error;
    auto key = transport::read_public_key(path, &error);
    if (!key) return Status::error(what + ": " + error, StatusCode::invalid_argument);
    *out = *key;
    return {};
  }

  /// Reads the keys tcp endpoints need and lets the listed units in.
  Status prepare_security() {
    const auto& spec = run->spec;
    bool any_tcp = is_tcp(spec.coordinator);
    unit_keys.assign(spec.units.size(), {});
    for (std::size_t u = 0; u < spec.units.size(); ++u) {
      if (spec.units[u].public_key.empty()) continue;
      if (Status s = resolve_key(spec.units[u].public_key, "unit '" + spec.units[u].id + "' public_key", &unit_keys[u]);
          !s.ok()) {
        return s;
      }
      any_tcp = any_tcp || is_tcp(spec.units[u].endpoint);
    }
    if (!any_tcp) return {};
    if (!spec.coordinator_key.empty()) {
      if (Status s = resolve_key(spec.coordinator_key, "coordinator_key", &coordinator_key); !s.ok()) return s;
    }
    bool need_own = distributed && is_tcp(spec.coordinator);
    for (std::size_t u = 0; u < spec.units.size(); ++u) need_own = need_own || (local[u] && is_tcp(spec.units[u].endpoint));
    if (!need_own) return {};
    if (options.secret_key_path.empty()) {
      return Status::error("tcp endpoints use CURVE: give this process its key pair with --secret-key PATH "
                           "(made by `swarmflow keygen PATH`)",
                           StatusCode::failed_precondition);
    }
    std::string error;
    auto keys = transport::read_keypair(options.secret_key_path, &error);
    if (!keys) return Status::error("--secret-key: " + error, StatusCode::invalid_argument);
    own_keys = *keys;
    for (std::size_t u = 0; u < spec.units.size(); ++u) {
      if (local[u] && is_tcp(spec.units[u].endpoint) && unit_keys[u] != own_keys.public_key) {
        return Status::error("the key pair " + options.secret_key_path + " is not the one listed for unit '" +
                                 spec.units[u].id + "'",
                             StatusCode::invalid_argument);
      }
    }
    if (options.coordinator && distributed && is_tcp(spec.coordinator) && coordinator_key != own_keys.public_key) {
      return Status::error("the key pair " + options.secret_key_path + " is not the coordinator_key",
                           StatusCode::invalid_argument);
    }
    std::vector<std::string> admitted;
    for (const auto& k : unit_keys) {
      if (!k.empty()) admitted.push_back(k);
    }
    transport::admit_public_keys(admitted);
    return {};
  }

  Status adopt(std::optional<config::PipelineSpec> spec, std::vector<Diagnostic>& found,
               std::vector<Diagnostic>* diagnostics) {
    if (diagnostics != nullptr) *diagnostics = found;
    if (!spec) return Status::error(format_diagnostics(found), StatusCode::invalid_argument);
    if (started) return Status::error("a pipeline is already running", StatusCode::failed_precondition);
    run = std::make_shared<runtime::RunState>();
    run->spec = std::move(*spec);
    run->registry = &registry;
    run->graph = graph::Graph::build(run->spec, registry);
    const auto& g = run->graph;
    run->replica_stats.resize(g.nodes.size());
    run->subscribers.resize(g.nodes.size());
    run->total_replicas = 0;
    for (const auto& node : g.nodes) {
      const int n = node.decl->replicas;
      run->replica_stats[static_cast<std::size_t>(node.index)] = runtime::make_n<runtime::ReplicaStats>(n);
      run->subscribers[static_cast<std::size_t>(node.index)].resize(node.spec.outputs().size());
      run->total_replicas += n;
    }
    for (const auto& edge : g.edges) {
      run->edge_out.push_back(
          runtime::make_n<runtime::EdgeSideStats>(g.nodes[static_cast<std::size_t>(edge.from_node)].decl->replicas));
      run->edge_in.push_back(
          runtime::make_n<runtime::EdgeSideStats>(g.nodes[static_cast<std::size_t>(edge.to_node)].decl->replicas));
    }
    if (run->spec.units.empty()) run->spec.units.push_back(config::UnitDecl{"u0", "", 0, 1.0, ""});
    auto table = std::make_shared<runtime::RoutingTable>();
    table->unit_of = placement::place_static(run->spec);
    run->publish(std::move(table));
    for (const auto& u : run->spec.units) run->unit_speed.push_back(u.speed);
    return {};
  }

  /// Worker threads of unit `u`: --threads, else the unit's own, else the
  /// machine's cores shared among the units of this process.
  int thread_count(std::size_t u) const {
    if (options.threads > 0) return options.threads;
    if (run->spec.units[u].threads > 0) return run->spec.units[u].threads;
    int here = 0;
    for (bool l : local) here += l ? 1 : 0;
    const int cores = std::max(2, static_cast<int>(std::thread::hardware_concurrency()));
    return std::max(1, cores / std::max(1, here));
  }

  /// The data-plane endpoint of unit `u`: as listed, else in-process.
  std::string endpoint(std::size_t u) const {
    const auto& decl = run->spec.units[u];
    if (!decl.endpoint.empty()) return decl.endpoint;
    return "inproc://swarmflow-" + std::to_string(instance) + "-" + decl.id;
  }

  /// Which units this process hosts, and whether others run elsewhere.
  Status choose_local_units() {
    const auto& spec = run->spec;
    local.assign(spec.units.size(), options.units.empty());
    for (const auto& id : options.units) {
      const int u = runtime::unit_index(spec, id);
      if (u < 0) return Status::error("no unit '" + id + "' in the pipeline", StatusCode::invalid_argument);
      local[static_cast<std::size_t>(u)] = true;
    }
    distributed = false;
    for (bool l : local) distributed = distributed || !l;
    if (!options.coordinator && !distributed) {
      return Status::error("a unit process hosts some units; name them", StatusCode::invalid_argument);
    }
    if (distributed) {
      if (spec.coordinator.empty()) {
        return Status::error("units run in several processes, so the pipeline needs `coordinator: ENDPOINT`",
                             StatusCode::invalid_argument);
      }
      for (const auto& u : spec.units) {
        if (u.endpoint.empty() || u.endpoint.rfind("inproc://", 0) == 0) {
          return Status::error("unit '" + u.id + "' needs a tcp:// or ipc:// endpoint to be reached from another process",
                               StatusCode::invalid_argument);
        }
      }
    }
    return {};
  }

  Status start_transports() {
    const std::size_t units = run->spec.units.size();
    run->transports.resize(units);
    if (units < 2 && !distributed) return {};
    std::vector<transport::Peer> peers;
    for (std::size_t u = 0; u < units; ++u) {
      peers.push_back(transport::Peer{run->spec.units[u].id, endpoint(u), unit_keys[u]});
    }
    bool any_control = false;
    for (std::size_t u = 0; u < units; ++u) {
      if (!local[u]) continue;
      transport::TransportConfig cfg;
      cfg.unit_id = run->spec.units[u].id;
      cfg.endpoint = endpoint(u);
      cfg.peers = peers;
      cfg.public_key = own_keys.public_key;
      cfg.secret_key = own_keys.secret_key;
      const config::TransportDecl& declared = run->spec.transport;
      cfg.limits.max_payload_bytes = static_cast<std::size_t>(declared.max_message_bytes);
      cfg.send_hwm = static_cast<int>(declared.high_water_mark);
      cfg.recv_hwm = static_cast<int>(declared.high_water_mark);
      cfg.linger_ms = static_cast<int>(declared.linger_ms);
      cfg.pack_below_bytes = static_cast<std::size_t>(declared.pack_below_bytes);
      cfg.heartbeat_ms = run->spec.failure.heartbeat_ms;
      if (!options.coordinator) {
        cfg.control_endpoint = run->spec.coordinator;
        cfg.coordinator_public_key = coordinator_key;
      }
      std::weak_ptr<runtime::RunState> weak = run;
      auto inbound = std::make_shared<runtime::InboundBatcher>(weak, static_cast<int>(u));
      auto t = std::make_unique<transport::Transport>(
          transport::process_context(), cfg, [inbound](transport::Inbound&& in) { inbound->add(std::move(in)); });
      t->on_burst_end([inbound] { inbound->flush(); });
      t->on_tick([inbound] { inbound->tick(); });
      if (!options.coordinator) {
        auto side = unit_side;
        // With several units here the coordinator beats to each; one of
        // them is enough for the detector, which expects one stream.
        const bool beats = !any_control;
        any_control = true;
        t->on_control([weak, side, beats](const schema::Control& c) {
          auto r = weak.lock();
          if (r) runtime::on_coordinator_message(*r, *side, c, beats);
        });
      }
      Status s = t->start();
      if (!s.ok()) return s;
      run->transports[u] = std::move(t);
    }
    return {};
  }

  void stop_transports() {
    for (auto& t : run->transports) {
      if (t) t->stop();
    }
  }

  // -- unit process ---------------------------------------------------------

  template <class Pred>
  bool wait_unit_side(Pred pred, int timeout_ms) {
    std::unique_lock<std::mutex> lock(unit_side->mutex);
    return unit_side->cv.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return pred(*unit_side); });
  }

  // -- coordinator ------------------------------------------------------------

  Status start_coordinator() {
    const auto& spec = run->spec;
    cluster = std::make_shared<runtime::ClusterView>();
    const std::size_t n = spec.units.size();
    cluster->remote.resize(n);
    for (std::size_t u = 0; u < n; ++u) cluster->remote[u] = !local[u];
    cluster->joined.assign(n, false);
    cluster->ready.assign(n, false);
    cluster->done.assign(n, false);
    cluster->dead.assign(n, false);
    cluster->rejoining.assign(n, false);
    cluster->plan_sent.assign(n, false);
    cluster->leaving.assign(n, false);
    cluster->heard_epoch.assign(n, 0);
    cluster->unit_state.assign(n, std::nullopt);
    cluster->left.assign(n, false);
    cluster->detectors = std::make_unique<placement::FailureDetectors>(spec.failure, n);
    transport::ControlServerConfig cfg;
    cfg.endpoint = spec.coordinator;
    cfg.public_key = own_keys.public_key;
    cfg.secret_key = own_keys.secret_key;
    cfg.heartbeat_ms = spec.failure.heartbeat_ms;
    for (std::size_t u = 0; u < n; ++u) {
      if (!local[u]) cfg.heartbeat_to.push_back(spec.units[u].id);
    }
    std::weak_ptr<runtime::RunState> weak = run;
    auto view = cluster;
    control_server = std::make_unique<transport::ControlServer>(
        transport::process_context(), cfg, [weak, view](const std::string& unit_id, const schema::Control& c) {
          auto r = weak.lock();
          if (r) on_unit_message(*r, *view, unit_id, c);
        });
    cluster->server = control_server.get();
    return control_server->start();
  }

  static void on_unit_message(runtime::RunState& run, runtime::ClusterView& view, const std::string& unit_id,
                              const schema::Control& c) {
    const int u = runtime::unit_index(run.spec, unit_id);
    std::lock_guard<std::mutex> lock(view.mutex);
    if (u < 0 || !view.remote[static_cast<std::size_t>(u)]) {
      ++view.unknown_units;
      return;
    }
    const auto i = static_cast<std::size_t>(u);
    if (view.left[i]) {
      // It handed its replicas over: only its figures are still wanted; then
      // it may go.
      if (c.body_type() == schema::ControlBody::UnitDone && !view.done[i]) {
        view.done[i] = true;
        runtime::merge_unit_done(run, u, *c.body_as_UnitDone());
        if (view.server != nullptr) {
          view.server->send(unit_id, runtime::simple_message(schema::ControlBody::Shutdown,
                                                                               run.table()->epoch));
        }
        view.cv.notify_all();
      }
      return;
    }
    if (view.dead[i]) {
      // A unit declared dead speaks again: a restarted process joins anew as
      // a unit without replicas (its replicas live elsewhere now); anything
      // else from it belongs to its old life and is refused.
      if (c.body_type() != schema::ControlBody::Heartbeat) {
        ++view.stale_messages;
        return;
      }
      view.dead[i] = false;
      view.rejoining[i] = true;
      view.plan_sent[i] = false;
      view.ready[i] = false;
      view.done[i] = false;
      view.detectors->rejoin(i, steady_now_ns());
    }
    view.detectors->heartbeat(i, steady_now_ns());
    switch (c.body_type()) {
      case schema::ControlBody::Heartbeat:
        view.joined[i] = true;
        view.heard_epoch[i] = c.body_as_Heartbeat()->epoch();
        break;
      case schema::ControlBody::UnitState: {
        const auto* m = c.body_as_UnitState();
        std::vector<std::vector<int>> plan;
        if (m->running() && m->plan() != nullptr && runtime::decode_plan(run, *m->plan(), &plan)) {
          view.unit_state[i] = std::make_pair(m->plan()->epoch(), std::move(plan));
        }
        break;
      }
      case schema::ControlBody::LoadReport:
        run.record_load(u, std::clamp(static_cast<double>(c.body_as_LoadReport()->utilisation()), 0.0, 1.0));
        break;
      case schema::ControlBody::Ready:
        if (c.body_as_Ready()->epoch() == run.table()->epoch) view.ready[i] = true;
        break;
      case schema::ControlBody::Snapshot: {
        // Kept only from the unit that hosts the replica by the placement
        // in force: a fenced unit's state is stale.
        const auto* m = c.body_as_Snapshot();
        const auto table = run.table();
        const int node = static_cast<int>(m->node());
        const int replica = static_cast<int>(m->replica());
        auto snapshot = std::make_shared<runtime::ReplicaSnapshot>();
        if (table->unit(node, replica) != u || !runtime::decode_snapshot(*m, snapshot.get())) {
          ++view.stale_messages;
          break;
        }
        const std::uint64_t id = snapshot->id;
        view.snapshots[{node, replica}] = std::move(snapshot);
        if (view.server != nullptr) {
          view.server->send(unit_id, runtime::encode_snapshot_stored(table->epoch, node, replica, id));
        }
        break;
      }
      case schema::ControlBody::Leaving:
        // Handed over by the failure watch, like a unit declared dead.
        if (!view.leaving[i]) view.leaving[i] = true;
        break;
      case schema::ControlBody::FirstOutput: {
        const auto* m = c.body_as_FirstOutput();
        run.record_first_output(m->epoch(), m->after_ns(), true);
        break;
      }
      case schema::ControlBody::UnitDone:
        if (!view.done[i] && c.body_as_UnitDone()->epoch() == run.table()->epoch) {
          view.done[i] = true;
          view.detectors->retire(i);  // it may leave now
          runtime::merge_unit_done(run, u, *c.body_as_UnitDone());
          run.replica_finished(runtime::replicas_on(run, u));
        }
        break;
      default:
        break;
    }
    view.cv.notify_all();
  }

  template <class Pred>
  bool wait_cluster(Pred pred, int timeout_ms) {
    std::unique_lock<std::mutex> lock(cluster->mutex);
    return cluster->cv.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return pred(*cluster); });
  }

  void broadcast(const std::function<transport::ControlBuffer()>& make) {
    for (std::size_t u = 0; u < local.size(); ++u) {
      if (!local[u]) control_server->send(run->spec.units[u].id, make());
    }
  }

  // -- failure watch ----------------------------------------------------------

  /// Checks the failure detectors several times a heartbeat while the run
  /// lasts: in the coordinator those of the unit processes, in a unit process
  /// the coordinator's.
  void start_failure_watch() {
    const auto period = std::chrono::microseconds(std::max(1000, run->spec.failure.heartbeat_ms * 1000 / 5));
    watch_stopping = false;
    watch = std::thread([this, period] {
      auto next = std::chrono::steady_clock::now() + period;
      bool skipped = false;
      std::unique_lock<std::mutex> lock(watch_mutex);
      while (!watch_cv.wait_until(lock, next, [this] { return watch_stopping; })) {
        const auto woke = std::chrono::steady_clock::now();
        const bool late = woke - next > std::max<std::chrono::steady_clock::duration>(period, std::chrono::milliseconds(20));
        next = woke + period;
        // This thread woke long after its time, so the whole process may have
        // been stalled, with heartbeats waiting unread: trust the next check,
        // not this one.
        if (late && !skipped) {
          skipped = true;
          continue;
        }
        skipped = false;
        lock.unlock();
        if (options.coordinator) {
          watch_units();
        } else {
          watch_coordinator();
        }
        lock.lock();
      }
    });
  }

  void stop_failure_watch() {
    {
      std::lock_guard<std::mutex> lock(watch_mutex);
      watch_stopping = true;
    }
    watch_cv.notify_all();
    if (watch.joinable()) watch.join();
  }

  /// A unit declared dead has its replicas placed on the survivors (a new
  /// epoch, published here and sent to every unit process); its sources are
  /// lost. Before the run has started, or when some replica has no unit to
  /// go to, the run ends with an error that names the unit.
  void watch_units() {
    const std::int64_t now = steady_now_ns();
    std::unique_lock<std::mutex> lock(cluster->mutex);
    welcome_back(lock);
    const auto dead = cluster->detectors->declare_dead(now);
    std::vector<std::size_t> leavers;
    for (std::size_t u = 0; u < cluster->leaving.size(); ++u) {
      if (cluster->leaving[u] && !cluster->left[u] && !cluster->dead[u]) leavers.push_back(u);
    }
    if (dead.empty() && leavers.empty()) return;
    std::string who;
    for (const auto& d : dead) {
      cluster->dead[d.unit] = true;
      char phi[64];
      std::snprintf(phi, sizeof phi, "%.1f", d.phi);
      who += (who.empty() ? "" : "; ") + ("unit '" + run->spec.units[d.unit].id + "' is dead: nothing heard from it for " +
                                          std::to_string(d.silent_ns / 1'000'000) + " ms (phi " + phi +
                                          " reached failure.phi_threshold)");
    }
    for (std::size_t u : leavers) {
      // It hands its replicas over now; its detector stops watching it.
      cluster->left[u] = true;
      cluster->detectors->retire(u);
      who += (who.empty() ? "" : "; ") + ("unit '" + run->spec.units[u].id + "' is leaving (it was asked to stop)");
    }
    std::vector<bool> usable(local.size());
    for (std::size_t u = 0; u < usable.size(); ++u) {
      usable[u] = local[u] || (cluster->joined[u] && !cluster->done[u] && !cluster->dead[u] && !cluster->rejoining[u] &&
                               !cluster->left[u]);
    }
    std::vector<bool> is_source;
    for (const auto& node : run->graph.nodes) is_source.push_back(node.source());
    const auto table = run->table();
    const bool running = run->start_ns > 0 && !run->finished();
    // A source whose position is kept here restarts elsewhere from it.
    std::vector<std::vector<bool>> restartable(table->unit_of.size());
    for (std::size_t s = 0; s < restartable.size(); ++s) restartable[s].assign(table->unit_of[s].size(), false);
    for (const auto& [key, snapshot] : cluster->snapshots) {
      const auto s = static_cast<std::size_t>(key.first);
      const auto r = static_cast<std::size_t>(key.second);
      if (s < restartable.size() && r < restartable[s].size()) restartable[s][r] = true;
    }
    const placement::FailoverPlan plan =
        placement::place_after_failure(run->spec, is_source, table->unit_of, usable, restartable);
    if (!running || !plan.refused.empty()) {
      const std::string message =
          who + (running ? "; its work cannot be taken over (" + plan.refused + "), so the run ends"
                         : "; the run ends");
      if (cluster->lost.empty()) cluster->lost = message;
      run->abort(message);
      cluster->cv.notify_all();
      return;
    }
    const std::uint32_t epoch = table->epoch + 1;
    FailoverReport report;
    for (const auto& d : dead) {
      if (!report.unit.empty()) report.unit += ",";
      report.unit += run->spec.units[d.unit].id;
      report.silent_ms = std::max<std::int64_t>(report.silent_ms, d.silent_ns / 1'000'000);
    }
    for (std::size_t u : leavers) {
      if (!report.unit.empty()) report.unit += ",";
      report.unit += run->spec.units[u].id;
    }
    if (dead.empty()) report.cause = "left";
    report.detected_s = static_cast<double>(now - run->start_ns) / 1e9;
    report.epoch = epoch;
    const auto name = [&](const std::pair<int, int>& r) {
      return run->graph.nodes[static_cast<std::size_t>(r.first)].decl->id + "/" + std::to_string(r.second);
    };
    for (const auto& m : plan.moved) {
      report.moved.push_back(name(m) + " -> " +
                             run->spec.units[static_cast<std::size_t>(plan.unit_of[static_cast<std::size_t>(m.first)]
                                                                             [static_cast<std::size_t>(m.second)])]
                                 .id);
    }
    for (const auto& l : plan.lost) report.lost.push_back(name(l));
    lock.unlock();
    std::string moved;
    for (const auto& m : report.moved) moved += (moved.empty() ? "" : ", ") + m;
    std::string lost;
    for (const auto& l : report.lost) lost += (lost.empty() ? "" : ", ") + l;
    std::fprintf(stderr, "swarmflow: %s; placement epoch %u: %s%s%s\n", who.c_str(), epoch,
                 moved.empty() ? "nothing to move" : moved.c_str(), lost.empty() ? "" : "; lost: ", lost.c_str());
    run->record_failover(std::move(report), now, steady_now_ns());
    // A stateful replica moved to a unit process starts from its latest
    // snapshot, sent ahead of the plan on the same socket.
    for (const auto& m : plan.moved) {
      const int to = plan.unit_of[static_cast<std::size_t>(m.first)][static_cast<std::size_t>(m.second)];
      if (local[static_cast<std::size_t>(to)]) continue;
      if (auto snapshot = stored_snapshot(m.first, m.second)) {
        control_server->send(run->spec.units[static_cast<std::size_t>(to)].id,
                             runtime::encode_restore(epoch, m.first, m.second, *snapshot));
      }
    }
    apply_placement(plan.unit_of, epoch);
    broadcast([&] { return runtime::plan_message(*run); });
    // Lost replicas never report; nothing else counts them as ended.
    if (!plan.lost.empty()) run->replica_finished(static_cast<int>(plan.lost.size()));
  }

  /// A unit heard again after it was declared dead gets the plan in force
  /// (where none of its old replicas are any more) and, once it is Ready for
  /// that epoch, Go: from then on failover may place replicas on it.
  void welcome_back(std::unique_lock<std::mutex>& lock) {
    for (std::size_t u = 0; u < local.size(); ++u) {
      if (!cluster->rejoining[u]) continue;
      const std::string& id = run->spec.units[u].id;
      if (!cluster->plan_sent[u]) {
        cluster->plan_sent[u] = true;
        const std::uint32_t epoch = run->table()->epoch;
        lock.unlock();
        std::fprintf(stderr, "swarmflow: unit '%s' is back: it joins again without replicas (placement epoch %u)\n",
                     id.c_str(), epoch);
        control_server->send(id, runtime::plan_message(*run));
        lock.lock();
      } else if (cluster->ready[u]) {
        cluster->rejoining[u] = false;
        const std::uint32_t epoch = run->table()->epoch;
        lock.unlock();
        std::fprintf(stderr, "swarmflow: unit '%s' runs again: failover may place replicas on it\n", id.c_str());
        control_server->send(id, runtime::simple_message(schema::ControlBody::Go, epoch));
        lock.lock();
      }
    }
  }

  /// This coordinator was started again while its units run on: it takes
  /// the run over with the newest placement they report (UnitState). The
  /// replicas of its own units died with the coordinator before it, so a
  /// placement with any there cannot be taken over.
  Status take_over() {
    const bool all = wait_cluster(
        [](runtime::ClusterView& v) {
          for (std::size_t u = 0; u < v.remote.size(); ++u) {
            if (v.remote[u] && !v.unit_state[u]) return false;
          }
          return true;
        },
        options.join_timeout_ms);
    std::lock_guard<std::mutex> lock(cluster->mutex);
    std::string missing;
    const std::vector<std::vector<int>>* plan = nullptr;
    std::uint32_t epoch = 0;
    for (std::size_t u = 0; u < local.size(); ++u) {
      if (!cluster->remote[u]) continue;
      const auto& state = cluster->unit_state[u];
      if (!state) {
        missing += (missing.empty() ? "" : ", ") + run->spec.units[u].id;
      } else if (plan == nullptr || state->first > epoch) {
        epoch = state->first;
        plan = &state->second;
      }
    }
    if (!all || plan == nullptr) {
      return Status::error("the units run a pipeline already, but " + missing +
                               " did not say by which placement: cannot take it over",
                           StatusCode::unavailable);
    }
    for (std::size_t s = 0; s < plan->size(); ++s) {
      for (std::size_t r = 0; r < (*plan)[s].size(); ++r) {
        const int u = (*plan)[s][r];
        if (u != runtime::kLostUnit && local[static_cast<std::size_t>(u)]) {
          return Status::error("cannot take the running pipeline over: replica " + std::to_string(r) + " of stage '" +
                                   run->spec.stages[s].id + "' ran on unit '" + run->spec.units[static_cast<std::size_t>(u)].id +
                                   "' in the coordinator's process, and died with it",
                               StatusCode::failed_precondition);
        }
      }
    }
    auto table = std::make_shared<runtime::RoutingTable>();
    table->epoch = epoch;
    table->unit_of = *plan;
    run->publish(std::move(table));
    for (std::size_t u = 0; u < local.size(); ++u) {
      if (local[u] && run->transports[u]) run->transports[u]->set_epoch(epoch);
    }
    std::fprintf(stderr, "swarmflow: coordinator at %s: takes over the running pipeline at placement epoch %u\n",
                 run->spec.coordinator.c_str(), epoch);
    return {};
  }

  /// The snapshot a replica placed on a unit of this process starts from:
  /// the coordinator's latest, or the one it sent ahead of the plan.
  std::shared_ptr<const runtime::ReplicaSnapshot> stored_snapshot(int node, int replica) {
    const std::pair<int, int> key{node, replica};
    if (options.coordinator) {
      if (!cluster) return nullptr;
      std::lock_guard<std::mutex> lock(cluster->mutex);
      const auto it = cluster->snapshots.find(key);
      return it == cluster->snapshots.end() ? nullptr : it->second;
    }
    std::lock_guard<std::mutex> lock(unit_side->mutex);
    const auto it = unit_side->restores.find(key);
    if (it == unit_side->restores.end()) return nullptr;
    auto snapshot = it->second;
    unit_side->restores.erase(it);
    return snapshot;
  }

  /// Takes up a new placement in this process: hosts for the replicas placed
  /// here anew are spawned, the table is published, and every other local
  /// host is told (it replays to moved consumers, drops duplicates of moved
  /// producers and counts lost ones as ended).
  void apply_placement(std::vector<std::vector<int>> unit_of, std::uint32_t epoch) {
    const auto before = run->table();
    if (epoch <= before->epoch) return;
    auto placed = std::make_shared<runtime::RoutingTable>();
    placed->epoch = epoch;
    placed->unit_of = std::move(unit_of);
    auto table = std::make_shared<runtime::RoutingTable>(*placed);
    table->actors = before->actors;
    table->actors.resize(run->graph.nodes.size());
    std::vector<caf::actor> fresh;
    std::vector<caf::actor> fenced;  ///< hosts of replicas that live elsewhere now
    for (const auto& node : run->graph.nodes) {
      auto& actors = table->actors[static_cast<std::size_t>(node.index)];
      actors.resize(static_cast<std::size_t>(node.decl->replicas));
      for (int r = 0; r < node.decl->replicas; ++r) {
        const int u = placed->unit(node.index, r);
        const bool here = u != runtime::kLostUnit && local[static_cast<std::size_t>(u)];
        if (!here) {
          if (actors[static_cast<std::size_t>(r)]) fenced.push_back(actors[static_cast<std::size_t>(r)]);
          actors[static_cast<std::size_t>(r)] = caf::actor();
        } else if (before->unit(node.index, r) != u) {
          actors[static_cast<std::size_t>(r)] =
              runtime::spawn_stage_host(*systems[static_cast<std::size_t>(u)], run, placed, node.index, r,
                                        stored_snapshot(node.index, r), true);
          fresh.push_back(actors[static_cast<std::size_t>(r)]);
        }
      }
    }
    if (!fenced.empty()) {
      // This unit was declared dead while it was only paused, and its
      // replicas were placed elsewhere: they stop here, unfinished, and the
      // unit goes on as one without them (their work is their new hosts').
      std::fprintf(stderr, "swarmflow: %s: fenced at placement epoch %u: %zu replica%s now run elsewhere; stopped here\n",
                   local_unit_names().c_str(), epoch, fenced.size(), fenced.size() == 1 ? "" : "s");
      for (const auto& a : fenced) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
      if (!options.coordinator) run->reset_replicas(static_cast<int>(fresh.size()));
    } else if (!options.coordinator && !fresh.empty()) {
      run->adopt_replicas(static_cast<int>(fresh.size()));
    }
    std::shared_ptr<const runtime::RoutingTable> published = table;
    // The hosts hear of the change before the transport delivers anything of
    // the new epoch (it holds such messages until the table is published).
    for (const auto& actors : table->actors) {
      for (const auto& a : actors) {
        if (a && std::find(fresh.begin(), fresh.end(), a) == fresh.end()) {
          caf::anon_send(a, runtime::placement_atom::value, published);
        }
      }
    }
    run->publish(published);
    for (std::size_t u = 0; u < local.size(); ++u) {
      if (local[u] && run->transports[u]) run->transports[u]->set_epoch(epoch);
    }
    for (const auto& a : fresh) runtime::send_start(a);
  }

  /// A unit process that loses the coordinator says so once and carries on
  /// with its last placement (the coordinator holds only soft state).
  void watch_coordinator() {
    take_up_new_plan();
    tell_new_coordinator();
    const std::int64_t now = steady_now_ns();
    std::lock_guard<std::mutex> lock(unit_side->mutex);
    const placement::FailureDetector& d = *unit_side->coordinator;
    if (unit_side->shutdown || !d.heard()) return;
    if (!unit_side->coordinator_lost && d.suspected(now)) {
      unit_side->coordinator_lost = true;
      // No failover without it: snapshots need not wait to be stored.
      run->snapshots_local.store(true, std::memory_order_release);
      for (const auto& actors : run->table()->actors) {
        for (const auto& a : actors) {
          if (a) runtime::send_snapshot_stored(a, UINT64_MAX);
        }
      }
      std::fprintf(stderr,
                   "swarmflow: %s: lost the coordinator at %s: nothing heard from it for %lld ms; "
                   "carrying on with the placement of epoch %u\n",
                   local_unit_names().c_str(), run->spec.coordinator.c_str(),
                   static_cast<long long>(d.silence_ns(now) / 1'000'000), unit_side->epoch);
      unit_side->cv.notify_all();
    } else if (unit_side->coordinator_lost && d.available(now)) {
      unit_side->coordinator_lost = false;
      run->snapshots_local.store(false, std::memory_order_release);
      std::fprintf(stderr, "swarmflow: %s: the coordinator at %s is back\n", local_unit_names().c_str(),
                   run->spec.coordinator.c_str());
    }
  }

  /// A coordinator not heard before (one started again while the run goes
  /// on) is told the placement this unit runs by, so that it takes over.
  void tell_new_coordinator() {
    bool tell = false;
    bool running = false;
    {
      std::lock_guard<std::mutex> lock(unit_side->mutex);
      tell = unit_side->new_coordinator;
      unit_side->new_coordinator = false;
      running = unit_side->go;
    }
    if (!tell || !running) return;
    const auto table = run->table();
    for (std::size_t u = 0; u < local.size(); ++u) {
      if (!local[u]) continue;
      const std::string id = run->spec.units[u].id;
      run->transports[u]->send_control(runtime::unit_state_message(id, *table, running));
    }
  }

  /// A unit process takes up a plan of a newer epoch (a failover) and tells
  /// the coordinator it has.
  void take_up_new_plan() {
    std::vector<std::vector<int>> plan;
    std::uint32_t epoch = 0;
    {
      std::lock_guard<std::mutex> lock(unit_side->mutex);
      if (!unit_side->replan) return;
      unit_side->replan = false;
      plan = unit_side->plan;
      epoch = unit_side->epoch;
    }
    if (run->start_ns == 0) return;  // before the run: start() takes the plan up
    apply_placement(std::move(plan), epoch);
    for (std::size_t u = 0; u < local.size(); ++u) {
      if (!local[u]) continue;
      const std::string id = run->spec.units[u].id;
      run->transports[u]->send_control(runtime::ready_message(id, epoch));
    }
  }

  /// True when the coordinator's Shutdown ended this unit process's run.
  bool unit_side_shutdown_first() {
    std::lock_guard<std::mutex> lock(unit_side->mutex);
    return unit_side->shutdown && !unit_side->coordinator_lost;
  }

  /// The first unit declared dead, as an error; ok while there is none.
  Status lost_unit() {
    std::lock_guard<std::mutex> lock(cluster->mutex);
    if (cluster->lost.empty()) return {};
    return Status::error(cluster->lost, StatusCode::unavailable);
  }

  Status coordinator_lost_before_start() const {
    return Status::error("lost the coordinator at " + run->spec.coordinator + " before the run started",
                         StatusCode::unavailable);
  }

  /// "unit u1" (or "units u1, u2"): the units hosted here, for messages.
  std::string local_unit_names() const {
    std::string names;
    int count = 0;
    for (std::size_t u = 0; u < local.size(); ++u) {
      if (!local[u]) continue;
      names += (names.empty() ? "" : ", ") + run->spec.units[u].id;
      ++count;
    }
    return (count == 1 ? "unit " : "units ") + names;
  }

  // -- hosts ------------------------------------------------------------------

  void spawn_local_hosts() {
    const std::size_t units = run->spec.units.size();
    caf_configs.resize(units);
    systems.resize(units);
    for (std::size_t u = 0; u < units; ++u) {
      if (!local[u]) continue;
      caf_configs[u] = std::make_unique<caf::actor_system_config>();
      caf_configs[u]->set("scheduler.max-threads", static_cast<std::size_t>(thread_count(u)));
      // Idle workers go straight to the slow poll instead of spinning with
      // short sleeps, which on small machines took CPU from the transport's
      // I/O thread (measured with swarmflow_bench_transport).
      caf_configs[u]->set("work-stealing.moderate-poll-attempts", std::size_t{0});
      systems[u] = std::make_unique<caf::actor_system>(*caf_configs[u]);
    }
    auto placed = run->table();
    auto table = std::make_shared<runtime::RoutingTable>(*placed);
    table->actors.assign(run->graph.nodes.size(), {});
    int here = 0;
    for (const auto& node : run->graph.nodes) {
      auto& actors = table->actors[static_cast<std::size_t>(node.index)];
      for (int r = 0; r < node.decl->replicas; ++r) {
        const int u = placed->unit(node.index, r);
        if (u != runtime::kLostUnit && local[static_cast<std::size_t>(u)]) {
          actors.push_back(runtime::spawn_stage_host(*systems[static_cast<std::size_t>(u)], run, placed, node.index, r));
          ++here;
        } else {
          actors.emplace_back();
        }
      }
    }
    run->publish(std::move(table));
    if (!options.coordinator) run->reset_replicas(here);
    for (std::size_t u = 0; u < units; ++u) {
      if (!local[u]) continue;
      unit_actors.push_back(runtime::spawn_unit_actor(*systems[u], run, static_cast<int>(u), thread_count(u),
                                                     !options.coordinator));
    }
  }

  void start_local_hosts() {
    // Consumers first, so that sources find them ready.
    const auto table = run->table();
    for (auto it = table->actors.rbegin(); it != table->actors.rend(); ++it) {
      for (const auto& a : *it) {
        if (a) runtime::send_start(a);
      }
    }
  }

  /// Stops the unit actors (they also quit by themselves once the run ends).
  void stop_unit_actors() {
    for (const auto& a : unit_actors) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    unit_actors.clear();
  }

  /// Tears down whatever still runs after an abort.
  void kill_local_hosts() {
    for (const auto& actors : run->table()->actors) {
      for (const auto& a : actors) {
        if (a) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
      }
    }
  }
};

Runtime::Runtime(RuntimeOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = options;
  if (options.tune_allocator) keep_freed_frames_in_heap();
  register_builtin_stages(impl_->registry);
}

Runtime::~Runtime() {
  if (impl_->started && !impl_->waited) {
    request_stop();
    wait();
  }
}

Registry& Runtime::registry() { return impl_->registry; }

Status Runtime::load_file(const std::string& path, std::vector<Diagnostic>* diagnostics) {
  std::vector<Diagnostic> found;
  auto spec = config::load_pipeline_file(path, impl_->registry, found);
  return impl_->adopt(std::move(spec), found, diagnostics);
}

Status Runtime::load_string(const std::string& yaml, const std::string& name, std::vector<Diagnostic>* diagnostics) {
  std::vector<Diagnostic> found;
  auto spec = config::load_pipeline_string(yaml, name, impl_->registry, found);
  return impl_->adopt(std::move(spec), found, diagnostics);
}

Status Runtime::subscribe(const std::string& stage_port, Subscriber subscriber) {
  if (!impl_->run) return Status::error("load a pipeline first", StatusCode::failed_precondition);
  if (impl_->started) return Status::error("subscribe before start", StatusCode::failed_precondition);
  const auto slash = stage_port.find('/');
  if (slash == std::string::npos) {
    return Status::error("expected stage/port, got '" + stage_port + "'", StatusCode::invalid_argument);
  }
  const auto& g = impl_->run->graph;
  const int node = g.find(stage_port.substr(0, slash));
  if (node < 0) return Status::error("no stage '" + stage_port.substr(0, slash) + "'", StatusCode::not_found);
  const int port = g.nodes[static_cast<std::size_t>(node)].spec.output_index(stage_port.substr(slash + 1));
  if (port < 0) return Status::error("no output port '" + stage_port + "'", StatusCode::not_found);
  impl_->run->subscribers[static_cast<std::size_t>(node)][static_cast<std::size_t>(port)].push_back(
      std::move(subscriber));
  return {};
}

Status Runtime::start() {
  Impl& m = *impl_;
  if (!m.run) return Status::error("load a pipeline first", StatusCode::failed_precondition);
  if (m.started) return Status::error("already started", StatusCode::failed_precondition);
  static std::atomic<int> instances{0};
  m.instance = instances.fetch_add(1);
  if (Status s = m.choose_local_units(); !s.ok()) return s;
  auto fail = [&](Status s) {
    m.stop_failure_watch();
    m.stop_unit_actors();
    if (m.control_server) m.control_server->stop();
    m.stop_transports();
    m.kill_local_hosts();
    m.systems.clear();
    return s;
  };
  if (Status s = m.prepare_security(); !s.ok()) return s;
  if (!m.options.coordinator) {
    m.run->snapshots_with_coordinator = true;
    m.unit_side = std::make_shared<runtime::UnitSide>();
    m.unit_side->coordinator = std::make_unique<placement::FailureDetector>(m.run->spec.failure);
  }
  if (m.distributed && m.options.coordinator) {
    if (Status s = m.start_coordinator(); !s.ok()) return fail(s);
  }
  if (Status s = m.start_transports(); !s.ok()) return fail(s);
  if (m.distributed) m.start_failure_watch();

  bool takeover = false;  ///< the units are in a run already: this coordinator takes it over
  if (m.distributed && m.options.coordinator) {
    // Units join with their first heartbeat; then every unit gets the plan.
    // Every few seconds it says whom it is still waiting for.
    bool joined = false;
    const auto join_deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(m.options.join_timeout_ms);
    while (true) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(join_deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      joined = m.wait_cluster([&](runtime::ClusterView& v) { return v.all(v.joined) || !v.lost.empty(); },
                              static_cast<int>(std::min<std::int64_t>(left.count(), kJoinLogEveryMs)));
      if (joined) break;
      std::string missing;
      {
        std::lock_guard<std::mutex> lock(m.cluster->mutex);
        missing = m.cluster->missing(m.cluster->joined, m.run->spec);
      }
      const auto still =
          std::chrono::duration_cast<std::chrono::milliseconds>(join_deadline - std::chrono::steady_clock::now());
      if (still.count() >= 500) {
        std::fprintf(stderr, "swarmflow: coordinator at %s: waiting for %s to join (%lld s left)\n",
                     m.run->spec.coordinator.c_str(), missing.c_str(),
                     static_cast<long long>((still.count() + 999) / 1000));
      }
    }
    if (Status lost = m.lost_unit(); !lost.ok()) return fail(lost);
    if (!joined) {
      std::lock_guard<std::mutex> lock(m.cluster->mutex);
      return fail(Status::error("units did not join within " + std::to_string(m.options.join_timeout_ms) +
                                    " ms: " + m.cluster->missing(m.cluster->joined, m.run->spec),
                                StatusCode::unavailable));
    }
    {
      std::lock_guard<std::mutex> lock(m.cluster->mutex);
      for (std::size_t u = 0; u < m.local.size(); ++u) {
        takeover = takeover || (m.cluster->remote[u] && m.cluster->heard_epoch[u] > 0);
      }
    }
    if (takeover) {
      if (Status s = m.take_over(); !s.ok()) return fail(s);
    } else {
      m.broadcast([&] { return runtime::plan_message(*m.run); });
    }
  } else if (!m.options.coordinator) {
    bool lost = false;
    const bool planned = m.wait_unit_side(
        [&](runtime::UnitSide& s) {
          lost = !s.has_plan && s.coordinator_lost;
          return s.has_plan || lost;
        },
        m.options.join_timeout_ms);
    if (lost) return fail(m.coordinator_lost_before_start());
    if (!planned) {
      return fail(Status::error("no placement from the coordinator at " + m.run->spec.coordinator + " within " +
                                    std::to_string(m.options.join_timeout_ms) + " ms",
                                StatusCode::unavailable));
    }
    std::lock_guard<std::mutex> lock(m.unit_side->mutex);
    auto table = std::make_shared<runtime::RoutingTable>();
    table->unit_of = m.unit_side->plan;
    table->epoch = m.unit_side->epoch;
    m.run->publish(std::move(table));
  }

  m.spawn_local_hosts();

  if (m.distributed && m.options.coordinator && !takeover) {
    const bool ready = m.wait_cluster([&](runtime::ClusterView& v) { return v.all(v.ready) || !v.lost.empty(); },
                                      m.options.join_timeout_ms);
    if (Status lost = m.lost_unit(); !lost.ok()) return fail(lost);
    if (!ready) {
      std::lock_guard<std::mutex> lock(m.cluster->mutex);
      return fail(Status::error("units not ready: " + m.cluster->missing(m.cluster->ready, m.run->spec),
                                StatusCode::unavailable));
    }
    m.broadcast([&] { return runtime::simple_message(schema::ControlBody::Go, m.run->table()->epoch); });
  } else if (!m.options.coordinator) {
    for (std::size_t u = 0; u < m.local.size(); ++u) {
      if (!m.local[u]) continue;
      m.run->transports[u]->set_epoch(m.run->table()->epoch);
      const std::string id = m.run->spec.units[u].id;
      const std::uint32_t epoch = m.run->table()->epoch;
      m.run->transports[u]->send_control(runtime::ready_message(id, epoch));
    }
    bool lost = false;
    const bool go = m.wait_unit_side(
        [&](runtime::UnitSide& s) {
          lost = !s.go && !s.shutdown && s.coordinator_lost;
          return s.go || s.shutdown || lost;
        },
        m.options.join_timeout_ms);
    if (lost) return fail(m.coordinator_lost_before_start());
    if (!go) return fail(Status::error("the coordinator did not start the run", StatusCode::unavailable));
  }
  m.run->start_ns = steady_now_ns();
  m.started = true;
  m.start_local_hosts();
  return {};
}

void Runtime::request_stop() {
  Impl& m = *impl_;
  if (!m.run) return;
  m.run->stop_requested.store(true);
  if (!m.started) return;
  runtime::stop_local_sources(*m.run);
  if (m.distributed && m.options.coordinator) {
    m.broadcast([&] {
      return runtime::simple_message(schema::ControlBody::StopSources, m.run->table()->epoch);
    });
  }
}

void Runtime::abort(const std::string& reason) {
  if (impl_->run) impl_->run->abort(reason);
}

Status Runtime::leave() {
  Impl& m = *impl_;
  if (!m.started) return Status::error("not started", StatusCode::failed_precondition);
  if (m.options.coordinator) {
    return Status::error("the coordinator's process cannot leave its own run", StatusCode::failed_precondition);
  }
  {
    std::lock_guard<std::mutex> lock(m.unit_side->mutex);
    if (m.unit_side->coordinator_lost) {
      return Status::error("the coordinator is gone: nobody can take this unit's replicas over",
                           StatusCode::unavailable);
    }
    if (m.unit_side->leaving) return {};
    m.unit_side->leaving = true;
    m.unit_side->leave_epoch = m.unit_side->epoch;
  }
  m.unit_side->cv.notify_all();
  for (std::size_t u = 0; u < m.local.size(); ++u) {
    if (!m.local[u]) continue;
    const std::string id = m.run->spec.units[u].id;
    const std::uint32_t epoch = m.run->table()->epoch;
    m.run->transports[u]->send_control(runtime::leaving_message(id, epoch));
  }
  std::fprintf(stderr, "swarmflow: %s: leaving: the coordinator hands its replicas over to the other units\n",
               m.local_unit_names().c_str());
  return {};
}

Status Runtime::wait() {
  Impl& m = *impl_;
  if (!m.started) return Status::error("not started", StatusCode::failed_precondition);
  if (m.waited) return m.result;
  // The failure watch ends the run (abort) if a unit process dies.
  m.run->wait_finished(-1);
  // A unit process without replicas (one that joined again after it was
  // declared dead, say) stays available to failover until the coordinator
  // ends the run or is lost; replicas placed on it meanwhile are waited for.
  while (!m.options.coordinator && !m.run->aborted() && m.run->replicas_total() == 0) {
    if (m.wait_unit_side(
            [](runtime::UnitSide& s) {
              return s.shutdown || s.coordinator_lost || (s.leaving && s.epoch > s.leave_epoch);
            },
            100)) {
      break;
    }
    m.run->wait_finished(-1);
  }
  if (!m.options.coordinator) {
    // Hand this process's figures to the coordinator, then leave when it says
    // so, or when it is known to be gone, or after the leave timeout.
    // A failover while it waits (a newer epoch taken up) may place replicas
    // here, and makes the coordinator ignore a UnitDone of the old epoch:
    // then it waits for those replicas and says it again.
    while (!m.run->aborted()) {
      const std::uint32_t epoch = m.run->table()->epoch;
      for (std::size_t u = 0; u < m.local.size(); ++u) {
        if (m.local[u]) m.run->transports[u]->send_control(runtime::encode_unit_done(*m.run, static_cast<int>(u)));
      }
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(m.options.leave_timeout_ms);
      bool replanned = false;
      while (std::chrono::steady_clock::now() < deadline) {
        if (m.wait_unit_side([](runtime::UnitSide& s) { return s.shutdown || s.coordinator_lost; }, 50)) break;
        if (m.run->table()->epoch != epoch) {
          replanned = true;
          break;
        }
      }
      if (!replanned) break;
      m.run->wait_finished(-1);
    }
    if (m.run->aborted() && m.unit_side_shutdown_first()) {
      // The coordinator ended the run (a unit died): its report still gets
      // this unit's figures so far.
      for (std::size_t u = 0; u < m.local.size(); ++u) {
        if (m.local[u]) m.run->transports[u]->send_control(runtime::encode_unit_done(*m.run, static_cast<int>(u)));
      }
    }
  } else if (m.distributed) {
    m.broadcast([&] { return runtime::simple_message(schema::ControlBody::Shutdown, m.run->table()->epoch); });
    if (m.run->aborted()) {
      // The units still alive send what they have; the report covers them.
      m.wait_cluster(
          [](runtime::ClusterView& v) {
            for (std::size_t u = 0; u < v.remote.size(); ++u) {
              if (v.remote[u] && !v.done[u] && !v.dead[u]) return false;
            }
            return true;
          },
          m.options.leave_timeout_ms);
    }
  }
  m.stop_failure_watch();
  m.final_report = m.report_now();
  // Hosts stay after their replica has left (for a failover); stop them all.
  m.kill_local_hosts();
  m.stop_unit_actors();
  if (m.control_server) m.control_server->stop();
  m.stop_transports();
  {
    // Let the hosts' actors go: a table without them.
    auto table = std::make_shared<runtime::RoutingTable>(*m.run->table());
    table->actors.clear();
    m.run->publish(std::move(table));
  }
  m.systems.clear();
  m.waited = true;
  m.result = m.run->ok() ? Status() : Status::error(m.run->error());
  return m.result;
}

Status Runtime::run() {
  Status s = start();
  if (!s.ok()) return s;
  return wait();
}

RunReport Runtime::report() const {
  if (impl_->waited) return impl_->final_report;
  if (!impl_->run) return {};
  return impl_->report_now();
}

std::string Runtime::dot() const {
  if (!impl_->run) return {};
  return impl_->run->graph.to_dot(impl_->run->spec.name);
}

}  // namespace swarmflow
