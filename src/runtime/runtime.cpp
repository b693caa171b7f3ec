#include <swarmflow/runtime.hpp>

#include <algorithm>
#include <thread>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include "runtime/run_state.hpp"

namespace swarmflow {
namespace runtime {

// -- ReplicaStats -------------------------------------------------------------

std::atomic<std::int64_t>& ReplicaStats::counter(std::string_view name) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = counters_.find(name);
  if (it == counters_.end()) {
    it = counters_.emplace(std::string(name), std::make_unique<std::atomic<std::int64_t>>(0)).first;
  }
  return *it->second;
}

std::map<std::string, std::int64_t> ReplicaStats::counters() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::map<std::string, std::int64_t> out;
  for (const auto& [name, value] : counters_) out[name] = value->load(std::memory_order_relaxed);
  return out;
}

void ReplicaStats::record_latency(std::int64_t ns) {
  std::lock_guard<std::mutex> lock(mutex_);
  latency_.record(ns);
}

metrics::LatencyHistogram ReplicaStats::latency() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return latency_;
}

// -- RunState -----------------------------------------------------------------

void RunState::replica_finished() {
  std::lock_guard<std::mutex> lock(mutex_);
  ++finished_;
  if (finished_ == total_replicas) {
    end_ns.store(steady_now_ns());
    cv_.notify_all();
  }
}

void RunState::fail(const std::string& message) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (error_.empty()) error_ = message;
}

bool RunState::wait_finished(std::int64_t timeout_ms) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto done = [this] { return finished_ >= total_replicas; };
  if (timeout_ms < 0) {
    cv_.wait(lock, done);
    return true;
  }
  return cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), done);
}

bool RunState::ok() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return error_.empty();
}

std::string RunState::error() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return error_;
}

bool RunState::finished() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return finished_ >= total_replicas;
}

namespace {

RunReport build_report(const RunState& run) {
  RunReport r;
  r.pipeline = run.spec.name;
  r.ok = run.ok();
  r.error = run.error();
  r.finished = run.finished();
  const std::int64_t end = r.finished ? run.end_ns.load() : steady_now_ns();
  r.duration_s = run.start_ns > 0 ? static_cast<double>(end - run.start_ns) / 1e9 : 0.0;
  const graph::Graph& g = run.graph;
  for (const auto& node : g.nodes) {
    StageReport s;
    s.id = node.decl->id;
    s.type = node.decl->type;
    s.replicas = node.decl->replicas;
    s.sink = node.sink();
    metrics::LatencyHistogram latency;
    for (const auto& stats : run.replica_stats[static_cast<std::size_t>(node.index)]) {
      s.processed += stats->processed.load(std::memory_order_relaxed);
      s.errors += stats->errors.load(std::memory_order_relaxed);
      s.restarts += stats->restarts.load(std::memory_order_relaxed);
      s.dead_letters += stats->dead_letters.load(std::memory_order_relaxed);
      s.queued += stats->queued.load(std::memory_order_relaxed);
      s.queue_peak = std::max<std::uint64_t>(s.queue_peak, stats->queue_peak.load(std::memory_order_relaxed));
      for (const auto& [name, value] : stats->counters()) s.counters[name] += value;
      latency.merge(stats->latency());
    }
    s.latency = latency.summary();
    r.stages.push_back(std::move(s));
  }
  for (const auto& edge : g.edges) {
    EdgeReport e;
    e.from = g.from_name(edge);
    e.to = g.to_name(edge);
    for (const auto& side : run.edge_out[static_cast<std::size_t>(edge.id)]) {
      e.sent += side->sent.load(std::memory_order_relaxed);
      e.dropped += side->dropped.load(std::memory_order_relaxed);
      e.waiting += side->waiting.load(std::memory_order_relaxed);
      e.peak_in_flight = std::max<std::uint64_t>(e.peak_in_flight, side->peak_in_flight.load(std::memory_order_relaxed));
    }
    for (const auto& side : run.edge_in[static_cast<std::size_t>(edge.id)]) {
      e.delivered += side->delivered.load(std::memory_order_relaxed);
    }
    r.edges.push_back(std::move(e));
  }
  return r;
}

template <class T>
std::vector<std::unique_ptr<T>> make_n(int n) {
  std::vector<std::unique_ptr<T>> v;
  for (int i = 0; i < n; ++i) v.push_back(std::make_unique<T>());
  return v;
}

}  // namespace
}  // namespace runtime

// -- Runtime ------------------------------------------------------------------

struct Runtime::Impl {
  RuntimeOptions options;
  Registry registry;
  std::shared_ptr<runtime::RunState> run;
  std::unique_ptr<caf::actor_system_config> caf_config;
  std::unique_ptr<caf::actor_system> system;
  bool started = false;
  bool waited = false;
  Status result;
  RunReport final_report;

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
    if (!run->spec.units.empty()) run->speed = run->spec.units.front().speed;
    return {};
  }

  int thread_count() const {
    if (options.threads > 0) return options.threads;
    if (run && !run->spec.units.empty() && run->spec.units.front().threads > 0) {
      return run->spec.units.front().threads;
    }
    return std::max(2, static_cast<int>(std::thread::hardware_concurrency()));
  }
};

Runtime::Runtime(RuntimeOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = options;
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
  if (!impl_->run) return Status::error("load a pipeline first", StatusCode::failed_precondition);
  if (impl_->started) return Status::error("already started", StatusCode::failed_precondition);
  auto& run = *impl_->run;
  impl_->caf_config = std::make_unique<caf::actor_system_config>();
  impl_->caf_config->set("scheduler.max-threads", static_cast<std::size_t>(impl_->thread_count()));
  impl_->system = std::make_unique<caf::actor_system>(*impl_->caf_config);
  run.actors.resize(run.graph.nodes.size());
  for (const auto& node : run.graph.nodes) {
    for (int r = 0; r < node.decl->replicas; ++r) {
      run.actors[static_cast<std::size_t>(node.index)].push_back(
          runtime::spawn_stage_host(*impl_->system, impl_->run, node.index, r));
    }
  }
  run.start_ns = steady_now_ns();
  impl_->started = true;
  // Consumers first, so that sources find them ready.
  for (auto it = run.actors.rbegin(); it != run.actors.rend(); ++it) {
    for (const auto& a : *it) runtime::send_start(a);
  }
  return {};
}

void Runtime::request_stop() {
  if (!impl_->run) return;
  impl_->run->stop_requested.store(true);
  if (!impl_->started) return;
  for (const auto& node : impl_->run->graph.nodes) {
    if (!node.source()) continue;
    for (const auto& a : impl_->run->actors[static_cast<std::size_t>(node.index)]) runtime::send_stop(a);
  }
}

Status Runtime::wait() {
  if (!impl_->started) return Status::error("not started", StatusCode::failed_precondition);
  if (impl_->waited) return impl_->result;
  impl_->run->wait_finished(-1);
  impl_->final_report = runtime::build_report(*impl_->run);
  impl_->run->actors.clear();
  impl_->system.reset();
  impl_->waited = true;
  impl_->result = impl_->run->ok() ? Status() : Status::error(impl_->run->error());
  return impl_->result;
}

Status Runtime::run() {
  Status s = start();
  if (!s.ok()) return s;
  return wait();
}

RunReport Runtime::report() const {
  if (impl_->waited) return impl_->final_report;
  if (!impl_->run) return {};
  return runtime::build_report(*impl_->run);
}

std::string Runtime::dot() const {
  if (!impl_->run) return {};
  return impl_->run->graph.to_dot(impl_->run->spec.name);
}

}  // namespace swarmflow
