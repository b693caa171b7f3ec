#include <swarmflow/runtime.hpp>

#include <swarmflow/library_threads.hpp>
#include <swarmflow/log.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <thread>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include "placement/coordinator.hpp"
#include "placement/failure_detector.hpp"
#include "placement/static_placement.hpp"
#include "runtime/inbound_batcher.hpp"
#include "runtime/messages.hpp"
#include "runtime/placer.hpp"
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


/// Steps a trace keeps at most (about 60 bytes each).
constexpr std::size_t kTraceSteps = 200'000;

template <class T>
std::vector<std::unique_ptr<T>> make_n(int n) {
  std::vector<std::unique_ptr<T>> v;
  for (int i = 0; i < n; ++i) v.push_back(std::make_unique<T>());
  return v;
}

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

struct Runtime::Impl : placement::CoordinatorEffects {
  RuntimeOptions options;
  Registry registry;
  std::shared_ptr<runtime::RunState> run;
  /// One actor system per unit hosted here, by unit index (null elsewhere).
  std::vector<std::unique_ptr<caf::actor_system_config>> caf_configs;
  std::vector<std::unique_ptr<caf::actor_system>> systems;
  std::vector<caf::actor> unit_actors;  ///< one per unit hosted here
  /// OpenCV's threads as the pipeline asks, while the run lasts (hold_opencv_threads).
  LibraryThreadsHold opencv_threads;
  /// What the unit processes said of their figures (the coordinator actor's thread only).
  runtime::LiveFigures live_figures;
  int instance = 0;
  std::atomic<bool> started{false};  // read by other threads (the web API)
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
    if (coordinator_figures) r.coordinator.stale_refused += coordinator_figures->stale_messages.load();
    return r;
  }
  /// The coordinator actor (distributed, in the coordinator's process), on
  /// its own thread in the system of the first unit hosted here.
  caf::actor coordinator;
  caf::actor_system* coordinator_system = nullptr;
  std::shared_ptr<placement::CoordinatorFigures> coordinator_figures;
  std::shared_ptr<runtime::UnitSide> unit_side;
  /// Moves while the run goes on (every unit in this process).
  std::shared_ptr<runtime::Placer> placer;

  // -- the unit process's failure watch thread (start_failure_watch)
  std::thread watch;
  std::mutex watch_mutex;
  std::condition_variable watch_cv;
  bool watch_stopping = false;
  bool plan_waiting = false;  ///< a newer plan came: the watch thread takes it up now

  ~Impl() override {
    if (placer) placer->stop();
    stop_scenario();
    stop_failure_watch();
    stop_coordinator();
  }

  // -- scenario: emulated load changes (start_scenario)
  std::thread scenario;
  std::mutex scenario_mutex;
  std::condition_variable scenario_cv;
  bool scenario_stopping = false;

  /// Applies `scenario:` to the units of this process, each step at its
  /// time since the run started, on a thread of its own.
  void start_scenario() {
    std::vector<std::pair<std::int64_t, std::pair<int, double>>> steps;
    for (const auto& step : run->spec.scenario) {
      const int u = runtime::unit_index(run->spec, step.unit);
      // The coordinator also follows the speeds of units in other processes,
      // which apply them there: its placement policy plans with them.
      if (u < 0 || (!local[static_cast<std::size_t>(u)] && !(distributed && options.coordinator))) continue;
      steps.push_back({run->start_ns.load() + static_cast<std::int64_t>(step.at_s * 1e9), {u, step.speed}});
    }
    if (steps.empty()) return;
    std::stable_sort(steps.begin(), steps.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    scenario_stopping = false;
    scenario = std::thread([this, steps = std::move(steps)] {
      std::unique_lock<std::mutex> lock(scenario_mutex);
      for (const auto& [at, change] : steps) {
        const auto when = std::chrono::steady_clock::time_point(std::chrono::nanoseconds(at));
        if (scenario_cv.wait_until(lock, when, [this] { return scenario_stopping; })) return;
        run->unit_speed[static_cast<std::size_t>(change.first)]->store(change.second, std::memory_order_relaxed);
        if (!local[static_cast<std::size_t>(change.first)]) continue;
        swarmflow::log::info("scenario: unit '%s' runs at speed %g from %.2f s",
                             run->spec.units[static_cast<std::size_t>(change.first)].id.c_str(), change.second,
                             static_cast<double>(at - run->start_ns.load()) / 1e9);
      }
    });
  }

  void stop_scenario() {
    {
      std::lock_guard<std::mutex> lock(scenario_mutex);
      scenario_stopping = true;
    }
    scenario_cv.notify_all();
    if (scenario.joinable()) scenario.join();
  }

  /// Loads what a definition's `plugins:` names into this runtime's registry.
  config::PluginLoader plugin_loader() {
    return [this](const std::string& path) { return registry.load_plugin(path); };
  }

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
    run->hop_figures = options.hop_figures;
    if (options.trace_every > 0) {
      run->trace = std::make_shared<runtime::TraceBuffer>(options.trace_every, runtime::kTraceSteps);
    }
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
    for (const auto& node : g.nodes) {
      table->active.push_back(node.decl->min_replicas);  // the rest stand by (`replicas: {min, max}`)
      table->ring.push_back(node.decl->min_replicas);
    }
    run->publish(std::move(table));
    for (const auto& u : run->spec.units) run->unit_speed.push_back(std::make_unique<std::atomic<double>>(u.speed));
    for (std::size_t u = 0; u < run->spec.units.size(); ++u) run->remote_units.push_back(std::make_unique<runtime::RunState::RemoteUnit>());
    for (std::size_t u = 0; u < run->spec.units.size(); ++u) {
      run->clock_offset_ns.push_back(std::make_unique<std::atomic<std::int64_t>>(0));
      run->clock_delay_ns.push_back(std::make_unique<std::atomic<std::int64_t>>(-1));
    }
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
        {
          std::lock_guard<std::mutex> lock(side->mutex);
          ++side->local_units;
        }
        t->on_control([weak, side, beats, u](const schema::Control& c) {
          auto r = weak.lock();
          if (r) runtime::on_coordinator_message(*r, *side, c, beats, static_cast<int>(u));
        });
      }
      Status s = t->start();
      if (!s.ok()) return s;
      run->transports[u] = std::move(t);
    }
    run->direct_units.assign(units, 0);
    if (run->spec.transport.in_process_direct) {
      for (std::size_t u = 0; u < units; ++u) run->direct_units[u] = local[u] ? 1 : 0;
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
    const std::size_t n = spec.units.size();
    transport::ControlServerConfig cfg;
    cfg.endpoint = spec.coordinator;
    cfg.public_key = own_keys.public_key;
    cfg.secret_key = own_keys.secret_key;
    cfg.heartbeat_ms = spec.failure.heartbeat_ms;
    for (std::size_t u = 0; u < n; ++u) {
      if (!local[u]) cfg.heartbeat_to.push_back(spec.units[u].id);
    }
    placement::CoordinatorSetup setup;
    setup.spec = &run->spec;
    setup.graph = &run->graph;
    for (std::size_t u = 0; u < n; ++u) setup.remote.push_back(!local[u]);
    setup.effects = this;
    setup.clock = [] { return steady_now_ns(); };
    setup.limits = cfg.limits;
    setup.check_period_us = placement::check_period_us(spec.failure.heartbeat_ms);
    coordinator_figures = setup.figures;
    for (std::size_t u = 0; u < n && coordinator_system == nullptr; ++u) {
      if (local[u]) coordinator_system = systems[u].get();
    }
    coordinator = placement::spawn_coordinator(*coordinator_system, std::move(setup));
    // The server's thread hands every verified message to the coordinator
    // actor; `coordinator` is set before it starts and reset after it stops.
    control_server = std::make_unique<transport::ControlServer>(
        transport::process_context(), cfg,
        transport::ControlServer::BytesHandler([this](const std::string& unit_id, const schema::Control&,
                                                      const std::uint8_t* data, std::size_t size) {
          placement::forward_control(coordinator, unit_id, data, size);
        }));
    return control_server->start();
  }

  /// Stops the coordinator actor (no decision of it acts after this).
  void stop_coordinator() {
    if (!coordinator) return;
    placement::stop_coordinator(*coordinator_system, coordinator);
  }

  /// Lets go of the coordinator actor, once the control server has stopped.
  void release_coordinator() {
    stop_coordinator();
    coordinator = caf::actor();
  }

  // -- what the coordinator does to this process (CoordinatorEffects) --------

  std::shared_ptr<const runtime::RoutingTable> table() const override { return run->table(); }
  std::int64_t run_started_ns() const override { return run->start_ns.load(); }
  bool run_finished() const override { return run->finished(); }
  void send(int unit, transport::ControlBuffer message) override {
    control_server->send(run->spec.units[static_cast<std::size_t>(unit)].id, std::move(message));
  }
  void apply_placement(std::vector<std::vector<int>> unit_of, std::uint32_t epoch,
                       const placement::Snapshots& snapshots) override {
    // A failover: the replicas that take work stay; keys go back to the hash
    // ring. A move's placement may have taken the epoch meanwhile: this one
    // comes after it, and goes to the unit processes before any later one.
    std::lock_guard<std::mutex> guard(run->publish_mutex);
    const auto before = run->table();
    runtime::RoutingTable placed;
    placed.epoch = std::max(epoch, before->epoch + 1);
    placed.unit_of = std::move(unit_of);
    placed.active = before->active;
    placed.ring = before->ring;
    apply_placement(placed, &snapshots);
    if (distributed) broadcast([&] { return runtime::plan_message(*run->table()); });
  }
  void drained(int node, int replica, std::shared_ptr<const runtime::ReplicaSnapshot> handover) override {
    if (run->on_drained) run->on_drained(node, replica, std::move(handover));
  }
  void unit_ready(int unit, std::uint32_t epoch) override {
    auto& e = run->remote_units[static_cast<std::size_t>(unit)]->epoch;
    std::uint32_t was = e.load();
    while (was < epoch && !e.compare_exchange_weak(was, epoch)) {
    }
  }
  void unit_lost(int unit) override { run->remote_units[static_cast<std::size_t>(unit)]->gone.store(true); }
  void unit_back(int unit) override {
    run->remote_units[static_cast<std::size_t>(unit)]->done.store(false);
    run->remote_units[static_cast<std::size_t>(unit)]->gone.store(false);
  }
  void record_load_report(int unit, const schema::LoadReport& report) override {
    run->record_load(unit, std::clamp(static_cast<double>(report.utilisation()), 0.0, 1.0));
    runtime::take_remote_load(*run, unit, report);
  }
  void take_over(std::vector<std::vector<int>> unit_of, std::uint32_t epoch) override {
    runtime::RoutingTable placed;
    placed.epoch = epoch;
    placed.unit_of = std::move(unit_of);
    take_over_placement(placed);
  }
  void take_over_placement(const runtime::RoutingTable& placed) override {
    const std::uint32_t epoch = placed.epoch;
    auto table = std::make_shared<runtime::RoutingTable>(placed);
    table->actors.clear();
    table->draining = {-1, -1};  // a move under way died with the coordinator before
    table->draining_keys.clear();
    table->draining_all_keys = false;
    run->publish(std::move(table));
    // The units run by it: moves begin from it.
    for (auto& u : run->remote_units) u->epoch.store(epoch);
    for (std::size_t u = 0; u < local.size(); ++u) {
      if (local[u] && run->transports[u]) run->transports[u]->set_epoch(epoch);
    }
  }
  void record_load(int unit, double utilisation) override { run->record_load(unit, utilisation); }
  void merge_unit_done(int unit, const schema::UnitDone& done) override {
    run->remote_units[static_cast<std::size_t>(unit)]->done.store(true);
    runtime::merge_unit_done(*run, live_figures, unit, done);
  }
  void merge_unit_figures(int unit, const schema::UnitFigures& figures) override {
    runtime::merge_unit_figures(*run, live_figures, unit, figures);
  }
  void carried_over(int node, int replica, int unit) override { live_figures.carried_over(node, replica, unit); }
  void record_clock(int unit, std::int64_t offset_ns, std::int64_t delay_ns) override {
    run->set_clock_offset(unit, offset_ns, delay_ns);
  }
  void replicas_finished(int count) override { run->replica_finished(count); }
  void record_failover(FailoverReport failover, std::int64_t detected_ns, std::int64_t planned_ns) override {
    run->record_failover(std::move(failover), detected_ns, planned_ns);
  }
  void record_first_output(std::uint32_t epoch, std::int64_t after_ns) override {
    run->record_first_output(epoch, after_ns, true);
  }
  void abort(const std::string& message) override { run->abort(message); }

  void broadcast(const std::function<transport::ControlBuffer()>& make) {
    for (std::size_t u = 0; u < local.size(); ++u) {
      if (!local[u]) control_server->send(run->spec.units[u].id, make());
    }
  }

  // -- failure watch ----------------------------------------------------------

  /// Checks the coordinator's failure detector several times a heartbeat
  /// while the run lasts (a unit process; the coordinator actor checks those
  /// of the unit processes itself).
  void start_failure_watch() {
    const auto period = std::chrono::microseconds(std::max(1000, run->spec.failure.heartbeat_ms * 1000 / 5));
    watch_stopping = false;
    watch = std::thread([this, period] {
      auto next = std::chrono::steady_clock::now() + period;
      bool skipped = false;
      std::unique_lock<std::mutex> lock(watch_mutex);
      while (true) {
        watch_cv.wait_until(lock, next, [this] { return watch_stopping || plan_waiting; });
        if (watch_stopping) break;
        if (plan_waiting) {
          // A plan came (a move or a failover): taken up at once, as a move
          // waits for it; the failure check keeps its own period.
          plan_waiting = false;
          lock.unlock();
          take_up_new_plan();
          lock.lock();
          if (std::chrono::steady_clock::now() < next) continue;
        }
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
        watch_coordinator();
        report_load();
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

  /// The snapshot a replica placed on a unit of this process starts from:
  /// the coordinator's latest, or the one it sent ahead of the plan.
  std::shared_ptr<const runtime::ReplicaSnapshot> stored_snapshot(int node, int replica,
                                                                  const placement::Snapshots* snapshots) {
    const std::pair<int, int> key{node, replica};
    if (snapshots != nullptr) {
      const auto it = snapshots->find(key);
      return it == snapshots->end() ? nullptr : it->second;
    }
    if (!unit_side) return nullptr;
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
  /// producers and counts lost ones as ended, or takes up a move's drain and
  /// hand-over). A replica that drained here and now runs in another
  /// process stops here; one placed here after it drained elsewhere starts
  /// from its hand-over (sent ahead of the plan) as its successor.
  /// `snapshots`: the coordinator's (in its process), else those the
  /// coordinator sent this unit process ahead of the plan.
  void apply_placement(const runtime::RoutingTable& plan, const placement::Snapshots* snapshots) {
    const auto before = run->table();
    const std::uint32_t epoch = plan.epoch;
    if (epoch <= before->epoch) return;
    auto placed = std::make_shared<runtime::RoutingTable>(plan);
    placed->actors.clear();
    auto table = std::make_shared<runtime::RoutingTable>(*placed);
    table->actors = before->actors;
    table->actors.resize(run->graph.nodes.size());
    std::vector<caf::actor> fresh;
    std::vector<caf::actor> fenced;     ///< hosts of replicas that live elsewhere now
    std::vector<caf::actor> moved_out;  ///< hosts of replicas that drained here and moved
    int moved_in = 0;
    for (const auto& node : run->graph.nodes) {
      auto& actors = table->actors[static_cast<std::size_t>(node.index)];
      actors.resize(static_cast<std::size_t>(node.decl->replicas));
      for (int r = 0; r < node.decl->replicas; ++r) {
        const int u = placed->unit(node.index, r);
        const bool here = u != runtime::kLostUnit && local[static_cast<std::size_t>(u)];
        const int was = before->unit(node.index, r);
        const bool handed_over = placed->was_handed_over(node.index, r);
        // It drained for a move (a clean hand-over; its successor may stay
        // on the same unit, as when it gave keys away).
        // (One that had finished before it drained stays as it is.)
        const bool succeeded =
            handed_over && before->is_draining(node.index, r) &&
            !(was == u && run->replica_stats[static_cast<std::size_t>(node.index)][static_cast<std::size_t>(r)]->finished.load());
        caf::actor& a = actors[static_cast<std::size_t>(r)];
        if ((was != u || succeeded) && a) {
          // Drained, or this unit was fenced after a failover.
          (succeeded ? moved_out : fenced).push_back(a);
          // Its figures stay in this process's (one host for the coordinator)
          // when it moved to another unit here.
          if (succeeded && was != u && !here) run->record_drained_on(node.index, r, was);
          a = caf::actor();
        }
        if (here && (was != u || succeeded)) {
          a = runtime::spawn_stage_host(*systems[static_cast<std::size_t>(u)], run, placed, node.index, r,
                                        stored_snapshot(node.index, r, snapshots), !handed_over, handed_over);
          fresh.push_back(a);
          if (handed_over) ++moved_in;
        }
      }
    }
    for (const auto& a : moved_out) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    if (!moved_out.empty() && !options.coordinator) {
      // What the drained replicas did here, whole: this unit may have no
      // replica left, and then sends no figures until the run ends.
      for (std::size_t u = 0; u < local.size(); ++u) {
        if (local[u] && run->transports[u]) {
          run->transports[u]->send_control(
              runtime::encode_unit_figures(*run, static_cast<int>(u), runtime::process_incarnation()));
        }
      }
    }
    if (!fenced.empty()) {
      // This unit was declared dead while it was only paused, and its
      // replicas were placed elsewhere: they stop here, unfinished, and the
      // unit goes on as one without them (their work is their new hosts').
      swarmflow::log::warn("%s: fenced at placement epoch %u: %zu replica%s now run elsewhere; stopped here",
                   local_unit_names().c_str(), epoch, fenced.size(), fenced.size() == 1 ? "" : "s");
      for (const auto& a : fenced) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
      if (!options.coordinator) run->reset_replicas(static_cast<int>(fresh.size()));
    } else if (!options.coordinator) {
      if (!fresh.empty()) run->adopt_replicas(static_cast<int>(fresh.size()));
      if (!moved_out.empty()) run->release_replicas(static_cast<int>(moved_out.size()));
    }
    swarmflow::log::debug("%s: placement epoch %u taken up%s", local_unit_names().c_str(), epoch,
                          placed->draining.first >= 0
                              ? (" (" + run->graph.nodes[static_cast<std::size_t>(placed->draining.first)].decl->id + "/" +
                                 std::to_string(placed->draining.second) + " drains)")
                                    .c_str()
                              : "");
    if (moved_in > 0 || !moved_out.empty()) {
      swarmflow::log::info("%s: placement epoch %u: %d replica%s moved here, %zu moved away", local_unit_names().c_str(),
                           epoch, moved_in, moved_in == 1 ? "" : "s", moved_out.size());
    }
    std::shared_ptr<const runtime::RoutingTable> published = table;
    // The hosts hear of the change before the transport delivers anything of
    // the new epoch (it holds such messages until the table is published).
    for (const auto& actors : table->actors) {
      for (const auto& a : actors) {
        // By identity: actors of different units may have the same id.
        const bool is_fresh = std::any_of(fresh.begin(), fresh.end(), [&](const caf::actor& f) {
          return caf::actor_cast<caf::actor_control_block*>(f) == caf::actor_cast<caf::actor_control_block*>(a);
        });
        if (a && !is_fresh) {
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

  /// A unit process's load reports, every placement interval, from its watch
  /// thread: busy workers cannot hold them up (a unit actor on a unit whose
  /// only worker runs a long step could not send them).
  std::vector<std::unique_ptr<runtime::LoadReporter>> load_reporters;
  std::int64_t next_load_ns = 0;
  std::int64_t next_figures_ns = 0;
  void report_load() {
    // A unit process whose replicas all moved away still reports: more may
    // be placed here.
    if (run->start_ns.load() == 0 || (run->finished() && run->replicas_total() > 0)) return;
    const std::int64_t now = steady_now_ns();
    if (options.figures_ms > 0 && now >= next_figures_ns) {
      // Its figures so far, for the coordinator's live views (UnitDone
      // carries the rest at the end).
      if (next_figures_ns != 0) {
        for (std::size_t u = 0; u < local.size(); ++u) {
          if (local[u] && run->transports[u]) {
            run->transports[u]->send_control(
                runtime::encode_unit_figures(*run, static_cast<int>(u), runtime::process_incarnation()));
          }
        }
      }
      next_figures_ns = now + static_cast<std::int64_t>(options.figures_ms) * 1'000'000;
    }
    if (now < next_load_ns) return;
    next_load_ns = now + static_cast<std::int64_t>(std::max(1, run->spec.placement.interval_ms)) * 1'000'000;
    if (load_reporters.empty()) {
      for (std::size_t u = 0; u < local.size(); ++u) {
        load_reporters.push_back(local[u] ? std::make_unique<runtime::LoadReporter>(static_cast<int>(u), thread_count(u))
                                          : nullptr);
      }
    }
    for (std::size_t u = 0; u < local.size(); ++u) {
      if (load_reporters[u] && run->transports[u]) {
        run->transports[u]->send_control(load_reporters[u]->report(*run, nullptr));
      }
    }
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
      swarmflow::log::warn("%s: lost the coordinator at %s: nothing heard from it for %lld ms; "
                "carrying on with the placement of epoch %u",
                   local_unit_names().c_str(), run->spec.coordinator.c_str(),
                   static_cast<long long>(d.silence_ns(now) / 1'000'000), unit_side->epoch);
      unit_side->cv.notify_all();
    } else if (unit_side->coordinator_lost && d.available(now)) {
      unit_side->coordinator_lost = false;
      run->snapshots_local.store(false, std::memory_order_release);
      swarmflow::log::info("%s: the coordinator at %s is back", local_unit_names().c_str(),
                   run->spec.coordinator.c_str());
    }
  }

  /// How often a running unit tells the coordinator its placement anyway.
  static constexpr std::int64_t kUnitStateEveryNs = 1'000'000'000;
  std::int64_t state_told_ns = 0;

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
    // Also once a second: a coordinator started again takes over from what
    // the units say, and one UnitState may be lost while it connects.
    const std::int64_t now = steady_now_ns();
    if (!running || (!tell && now - state_told_ns < kUnitStateEveryNs)) return;
    state_told_ns = now;
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
    std::deque<runtime::RoutingTable> plans;
    {
      std::lock_guard<std::mutex> lock(unit_side->mutex);
      if (!unit_side->replan) return;
      if (run->start_ns == 0) return;  // before the run: start() takes the plan up
      unit_side->replan = false;
      plans = std::move(unit_side->plans);
      unit_side->plans.clear();
    }
    // One epoch at a time, as the hosts take them up: a move's drain, then
    // its hand-over.
    for (const auto& plan : plans) {
      apply_placement(plan, nullptr);
      for (std::size_t u = 0; u < local.size(); ++u) {
        if (!local[u]) continue;
        const std::string id = run->spec.units[u].id;
        run->transports[u]->send_control(runtime::ready_message(id, plan.epoch));
      }
    }
  }

  /// True when the coordinator's Shutdown ended this unit process's run.
  bool unit_side_shutdown_first() {
    std::lock_guard<std::mutex> lock(unit_side->mutex);
    return unit_side->shutdown && !unit_side->coordinator_lost;
  }

  Status coordinator_lost_before_start() const {
    return Status::error("lost the coordinator at " + run->spec.coordinator + " before the run started",
                         StatusCode::unavailable);
  }

  /// "unit u1" (or "units u1, u2"): the units hosted here, for messages.
  /// The units of this process as every log line names them: "u1", or
  /// "u0,u1,u2,u3"; past four, the first three and how many more.
  std::string log_units() const {
    constexpr int kNamed = 4;
    std::vector<std::string> ids;
    for (std::size_t u = 0; u < local.size(); ++u) {
      if (local[u]) ids.push_back(run->spec.units[u].id);
    }
    std::string out;
    const std::size_t shown = ids.size() <= kNamed ? ids.size() : kNamed - 1;
    for (std::size_t i = 0; i < shown; ++i) out += (i == 0 ? "" : ",") + ids[i];
    if (shown < ids.size()) out += "+" + std::to_string(ids.size() - shown);
    return out;
  }

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

  /// Messages an actor handles before yielding its thread (make_systems).
  static constexpr std::size_t kMaxThroughput = 16;

  /// One actor system per unit hosted here.
  void make_systems() {
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
      // An actor runs at most this many messages before the others waiting
      // for its unit's threads get theirs (CAF's default lets one that is
      // always fed keep a one-thread unit to itself: a replica beside it
      // would wait for a drain mark, an ack or a placement for seconds).
      caf_configs[u]->set("scheduler.max-throughput", kMaxThroughput);
      systems[u] = std::make_unique<caf::actor_system>(*caf_configs[u]);
    }
  }

  void spawn_local_hosts() {
    const std::size_t units = run->spec.units.size();
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
      // A unit process's figures go from its watch thread (report_load).
      unit_actors.push_back(runtime::spawn_unit_actor(*systems[u], run, static_cast<int>(u), thread_count(u),
                                                     !options.coordinator, options.coordinator ? options.figures_ms : 0));
    }
  }

  /// The placer of a run whose units are all in this process: the adaptive
  /// policy's moves, and those asked for (Runtime::move_replica).
  void make_placer() {
    runtime::PlacerHooks hooks;
    hooks.spawn = [this](int unit, std::shared_ptr<const runtime::RoutingTable> placed, int node, int replica,
                         std::shared_ptr<const runtime::ReplicaSnapshot> restore) {
      return runtime::spawn_stage_host(*systems[static_cast<std::size_t>(unit)], run, std::move(placed), node, replica,
                                       std::move(restore), false, true);
    };
    hooks.set_epoch = [this](std::uint32_t epoch) {
      for (std::size_t u = 0; u < local.size(); ++u) {
        if (local[u] && run->transports[u]) run->transports[u]->set_epoch(epoch);
      }
    };
    hooks.threads = [this](int unit) { return thread_count(static_cast<std::size_t>(unit)); };
    if (distributed) {
      hooks.remote = [this](int unit) { return !local[static_cast<std::size_t>(unit)]; };
      hooks.figures_lag_ms = std::max(0, options.figures_ms);
      hooks.send_plan = [this](const runtime::RoutingTable& table) {
        broadcast([&] { return runtime::plan_message(table); });
      };
      hooks.send_restore = [this](int unit, std::uint32_t epoch, int node, int replica,
                                  const runtime::ReplicaSnapshot& state) {
        control_server->send(run->spec.units[static_cast<std::size_t>(unit)].id,
                             runtime::encode_restore(epoch, node, replica, state));
      };
      hooks.send_keys = [this](int unit, std::uint32_t epoch, int node, int replica, const runtime::KeyStates& keys) {
        control_server->send(run->spec.units[static_cast<std::size_t>(unit)].id,
                             runtime::encode_key_states(epoch, node, replica, keys));
      };
    }
    placer = std::make_shared<runtime::Placer>(run, std::move(hooks),
                                               placement::PolicySettings::from(run->spec.placement),
                                               run->spec.placement.policy == "adaptive");
    // A host may drain while the runtime is torn down: the placer may be gone.
    run->on_drained = [weak = std::weak_ptr<runtime::Placer>(placer)](
                          int node, int replica, std::shared_ptr<const runtime::ReplicaSnapshot> handover) {
      if (auto p = weak.lock()) p->drained(node, replica, std::move(handover));
    };
  }

  /// A unit process: a replica that drained for a move hands its state over
  /// to the coordinator, whose placer places its successor.
  void hand_drained_to_coordinator() {
    run->on_drained = [run = run](int node, int replica, std::shared_ptr<const runtime::ReplicaSnapshot> handover) {
      const auto table = run->table();
      const int unit = table->unit(node, replica);
      if (unit == runtime::kLostUnit || !run->transports[static_cast<std::size_t>(unit)]) return;
      swarmflow::log::debug("%s/%d drained at placement epoch %u: hand-over sent to the coordinator",
                            run->graph.nodes[static_cast<std::size_t>(node)].decl->id.c_str(), replica, table->epoch);
      run->transports[static_cast<std::size_t>(unit)]->send_control(runtime::encode_snapshot(
          run->spec.units[static_cast<std::size_t>(unit)].id, table->epoch, node, replica, *handover));
    };
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
  auto spec = config::load_pipeline_file(path, impl_->registry, found, impl_->plugin_loader());
  return impl_->adopt(std::move(spec), found, diagnostics);
}

Status Runtime::load_string(const std::string& yaml, const std::string& name, std::vector<Diagnostic>* diagnostics) {
  std::vector<Diagnostic> found;
  auto spec = config::load_pipeline_string(yaml, name, impl_->registry, found, impl_->plugin_loader());
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

namespace {
/// Holds OpenCV's threads at the pipeline's `opencv: {threads}` (1 unless it
/// says otherwise) for the run: the units' workers run its loops themselves,
/// one per core, not a pool of its own beside them (docs/design.md, "OpenCV's
/// threads in a unit").
/// Without OpenCV in the process only a file that asks for it is refused.
Status hold_opencv_threads(const config::PipelineSpec& spec, LibraryThreadsHold& hold) {
  const config::OpenCvDecl& cv = spec.opencv;
  if (cv.threads == 0 || (!cv.given && !library_threads_registered("opencv"))) return {};
  if (Status s = hold.hold("opencv", cv.threads); !s.ok()) {
    return Status::error(spec.file + ":" + std::to_string(cv.loc.line) + ":" + std::to_string(cv.loc.column) +
                             ": 'opencv' is set, but " + s.message() +
                             ": register a pack built on OpenCV (video, vision, ...), or remove `opencv:`",
                         StatusCode::failed_precondition);
  }
  return {};
}
}  // namespace

Status Runtime::start() {
  Impl& m = *impl_;
  if (!m.run) return Status::error("load a pipeline first", StatusCode::failed_precondition);
  if (m.started) return Status::error("already started", StatusCode::failed_precondition);
  static std::atomic<int> instances{0};
  m.instance = instances.fetch_add(1);
  if (Status s = m.choose_local_units(); !s.ok()) return s;
  // The coordinator's own units read its clock; the others' offsets come
  // from heartbeats (docs/observability.md, clock offsets).
  if (m.options.coordinator) {
    for (std::size_t u = 0; u < m.local.size(); ++u) {
      if (m.local[u]) m.run->set_clock_offset(static_cast<int>(u), 0, 0);
    }
  }
  swarmflow::log::set_units(m.log_units());
  auto fail = [&](Status s) {
    m.opencv_threads.release();
    m.stop_failure_watch();
    m.stop_coordinator();
    m.stop_unit_actors();
    if (m.control_server) m.control_server->stop();
    m.release_coordinator();
    m.stop_transports();
    m.kill_local_hosts();
    m.systems.clear();
    return s;
  };
  if (Status s = m.prepare_security(); !s.ok()) return s;
  if (Status s = hold_opencv_threads(m.run->spec, m.opencv_threads); !s.ok()) return s;
  if (!m.options.coordinator) {
    m.run->snapshots_with_coordinator = true;
    m.unit_side = std::make_shared<runtime::UnitSide>();
    m.unit_side->coordinator = std::make_unique<placement::FailureDetector>(m.run->spec.failure);
    m.unit_side->on_plan = [impl = &m] {
      {
        std::lock_guard<std::mutex> lock(impl->watch_mutex);
        impl->plan_waiting = true;
      }
      impl->watch_cv.notify_all();
    };
  }
  m.make_systems();
  if (m.distributed && m.options.coordinator) {
    if (Status s = m.start_coordinator(); !s.ok()) return fail(s);
  }
  if (Status s = m.start_transports(); !s.ok()) return fail(s);
  // The coordinator actor checks its detectors itself.
  if (m.distributed && !m.options.coordinator) m.start_failure_watch();

  bool takeover = false;  ///< the units are in a run already: this coordinator takes it over
  if (m.distributed && m.options.coordinator) {
    // Units join with their first heartbeat; then every unit gets the plan.
    // Every few seconds it says whom it is still waiting for.
    bool joined = false;
    const auto join_deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(m.options.join_timeout_ms);
    while (true) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(join_deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      const placement::AwaitStatus status =
          placement::await(*m.coordinator_system, m.coordinator, placement::Await::joined,
                           std::min<std::int64_t>(left.count(), kJoinLogEveryMs));
      joined = status.met;
      if (joined) break;
      const std::string& missing = status.missing;
      const auto still =
          std::chrono::duration_cast<std::chrono::milliseconds>(join_deadline - std::chrono::steady_clock::now());
      if (still.count() >= 500) {
        swarmflow::log::info("coordinator at %s: waiting for %s to join (%lld s left)",
                     m.run->spec.coordinator.c_str(), missing.c_str(),
                     static_cast<long long>((still.count() + 999) / 1000));
      }
    }
    const placement::AwaitStatus status = placement::status(*m.coordinator_system, m.coordinator, placement::Await::joined);
    if (!status.lost.empty()) return fail(Status::error(status.lost, StatusCode::unavailable));
    if (!joined) {
      return fail(Status::error("units did not join within " + std::to_string(m.options.join_timeout_ms) +
                                    " ms: " + status.missing,
                                StatusCode::unavailable));
    }
    takeover = placement::units_in_a_run(*m.coordinator_system, m.coordinator);
    if (takeover) {
      // Every unit says by which placement it runs (UnitState); the newest
      // is taken over.
      placement::await(*m.coordinator_system, m.coordinator, placement::Await::unit_states,
                       m.options.join_timeout_ms);
      if (Status s = placement::take_over(*m.coordinator_system, m.coordinator); !s.ok()) return fail(s);
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
    m.run->publish(std::make_shared<runtime::RoutingTable>(m.unit_side->plan));
    m.unit_side->plans.clear();  // taken up here
  }

  if (!m.distributed || m.options.coordinator) m.make_placer();
  if (m.distributed && !m.options.coordinator) m.hand_drained_to_coordinator();
  m.spawn_local_hosts();

  if (m.distributed && m.options.coordinator && !takeover) {
    const placement::AwaitStatus ready =
        placement::await(*m.coordinator_system, m.coordinator, placement::Await::ready, m.options.join_timeout_ms);
    if (!ready.lost.empty()) return fail(Status::error(ready.lost, StatusCode::unavailable));
    if (!ready.met) return fail(Status::error("units not ready: " + ready.missing, StatusCode::unavailable));
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
  m.start_scenario();
  m.start_local_hosts();
  if (m.placer) m.placer->start();
  return {};
}

Status Runtime::set_unit_speed(const std::string& unit, double speed) {
  Impl& m = *impl_;
  if (!m.run) return Status::error("load a pipeline first", StatusCode::failed_precondition);
  if (!(speed > 0) || speed > 1000) return Status::error("a unit's speed must be in (0, 1000]", StatusCode::invalid_argument);
  const int u = runtime::unit_index(m.run->spec, unit);
  if (u < 0) return Status::error("no unit '" + unit + "' in this pipeline", StatusCode::not_found);
  if (!m.local[static_cast<std::size_t>(u)]) {  // before start too: it applies from the start
    return Status::error("unit '" + unit + "' does not run in this process", StatusCode::failed_precondition);
  }
  m.run->unit_speed[static_cast<std::size_t>(u)]->store(speed, std::memory_order_relaxed);
  swarmflow::log::info("unit '%s' runs at speed %g from now", unit.c_str(), speed);
  return {};
}

namespace {

/// Queues `move` of stage `stage` with a started run's placer (null: its
/// units are not all in this process), its stage index filled in; or says
/// why it cannot be.
Status ask_placer(runtime::Placer* placer, const runtime::RunState& run, const std::string& stage,
                  placement::Move move) {
  if (placer == nullptr) {
    return Status::error("moves are made in a run whose units are all in one process", StatusCode::failed_precondition);
  }
  move.stage = run.graph.find(stage);
  if (move.stage < 0) return Status::error("no stage '" + stage + "'", StatusCode::not_found);
  std::string why;
  if (!placer->request(std::move(move), &why)) return Status::error(why, StatusCode::failed_precondition);
  return {};
}

/// The index of unit `unit` in `move.to_unit` (empty: -1, none asked for).
Status to_unit(const runtime::RunState& run, const std::string& unit, placement::Move& move) {
  move.to_unit = -1;
  if (unit.empty()) return {};
  move.to_unit = runtime::unit_index(run.spec, unit);
  if (move.to_unit < 0) return Status::error("no unit '" + unit + "'", StatusCode::not_found);
  return {};
}

}  // namespace

Status Runtime::move_replica(const std::string& stage, int replica, const std::string& unit) {
  placement::Move move;
  move.kind = placement::MoveKind::move_replica;
  move.replica = replica;
  if (!impl_->started) return Status::error("not started", StatusCode::failed_precondition);
  if (unit.empty()) return Status::error("no unit given", StatusCode::invalid_argument);
  if (Status s = to_unit(*impl_->run, unit, move); !s.ok()) return s;
  return ask_placer(impl_->placer.get(), *impl_->run, stage, std::move(move));
}

Status Runtime::reassign_keys(const std::string& stage, const std::vector<std::pair<std::uint64_t, int>>& keys) {
  placement::Move move;
  move.kind = placement::MoveKind::reassign_keys;
  move.keys = keys;
  if (!impl_->started) return Status::error("not started", StatusCode::failed_precondition);
  return ask_placer(impl_->placer.get(), *impl_->run, stage, std::move(move));
}

Status Runtime::add_replica(const std::string& stage, const std::string& unit) {
  placement::Move move;
  move.kind = placement::MoveKind::add_replica;  // the placer picks the replica: its first standing by
  if (!impl_->started) return Status::error("not started", StatusCode::failed_precondition);
  if (Status s = to_unit(*impl_->run, unit, move); !s.ok()) return s;
  return ask_placer(impl_->placer.get(), *impl_->run, stage, std::move(move));
}

Status Runtime::remove_replica(const std::string& stage) {
  placement::Move move;
  move.kind = placement::MoveKind::remove_replica;  // the placer picks the replica: its last taking work
  if (!impl_->started) return Status::error("not started", StatusCode::failed_precondition);
  return ask_placer(impl_->placer.get(), *impl_->run, stage, std::move(move));
}

std::uint64_t Runtime::moves_completed() const {
  return impl_->placer ? impl_->placer->completed() : 0;
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
  swarmflow::log::info("%s: leaving: the coordinator hands its replicas over to the other units",
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
      placement::await(*m.coordinator_system, m.coordinator, placement::Await::done, m.options.leave_timeout_ms);
    }
  }
  if (m.placer) m.placer->stop();
  m.stop_scenario();
  m.stop_failure_watch();
  m.stop_coordinator();
  m.final_report = m.report_now();
  // Hosts stay after their replica has left (for a failover); stop them all.
  m.kill_local_hosts();
  m.stop_unit_actors();
  if (m.control_server) m.control_server->stop();
  m.release_coordinator();
  m.stop_transports();
  {
    // Let the hosts' actors go: a table without them.
    auto table = std::make_shared<runtime::RoutingTable>(*m.run->table());
    table->actors.clear();
    m.run->publish(std::move(table));
  }
  m.systems.clear();
  m.opencv_threads.release();
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

std::string Runtime::trace() const {
  const auto& run = impl_->run;
  if (!run || !run->trace) return {};
  std::vector<std::string> stages;
  for (const auto& node : run->graph.nodes) stages.push_back(node.decl->id);
  std::vector<std::string> units;
  for (const auto& u : run->spec.units) units.push_back(u.id);
  // A unit process writes its times on the coordinator's clock, so that the
  // files of a cluster line up.
  std::int64_t shift = 0;
  for (std::size_t u = 0; u < run->transports.size() && u < run->clock_offset_ns.size(); ++u) {
    if (run->transports[u] && run->clock_delay_ns[u]->load() >= 0) {
      shift = run->clock_offset_ns[u]->load();
      break;
    }
  }
  return runtime::trace_json(run->trace->steps(), stages, units, shift, run->trace->dropped());
}

std::string Runtime::dot() const {
  if (!impl_->run) return {};
  return impl_->run->graph.to_dot(impl_->run->spec.name);
}

}  // namespace swarmflow
