// The host actor of one replica: drives its Stage, routes its outputs with
// credit-based flow control, returns credits upstream, restarts the stage
// when it fails, and propagates end-of-stream.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <exception>
#include <unordered_map>

#include "runtime/messages.hpp"
#include "runtime/routing.hpp"
#include "runtime/run_state.hpp"
#include "transport/transport.hpp"

namespace swarmflow::runtime {

namespace {

/// How often one envelope may fail a stage before it is given up as a dead letter.
constexpr int kMaxAttempts = 3;
/// How often a source may fail in a row before the replica gives up.
constexpr int kMaxSourceFailures = 3;
/// Source steps per message, so that acks are not starved by a busy source.
constexpr int kPullBatch = 64;
constexpr std::int64_t kMaxBackoffNs = 1'000'000'000;
/// Most envelopes in one message to a local consumer.
constexpr std::size_t kMaxBatch = 32;
/// Messages for other units handed to the transport at once, at most.
constexpr std::size_t kMaxRemoteBatch = 256;
/// Payloads this large go to the transport as soon as they are made.
constexpr std::size_t kSendAloneBytes = 64u << 10;

/// Incomplete join sets a replica with this queue capacity may hold.
std::size_t join_set_limit(int capacity) { return kJoinSetsPerCredit * static_cast<std::size_t>(std::max(1, capacity)); }

class StageHost final : public StageContext {
 public:
  StageHost(caf::event_based_actor* self, std::shared_ptr<RunState> run, int node, int replica)
      : self_(self), run_(std::move(run)), node_(node), replica_(replica) {
    const graph::Graph& g = run_->graph;
    const graph::Node& n = g.nodes[static_cast<std::size_t>(node_)];
    stats_ = run_->replica_stats[static_cast<std::size_t>(node_)][static_cast<std::size_t>(replica_)].get();
    unit_ = run_->unit_of[static_cast<std::size_t>(node_)][static_cast<std::size_t>(replica_)];
    source_ = n.source();
    // A stage whose outputs feed nothing ends its envelopes' journey: latency is measured there.
    sink_ = n.out_edges.empty();
    in_index_.assign(g.edges.size(), -1);
    out_index_.assign(g.edges.size(), -1);
    for (int e : n.in_edges) {
      const graph::Edge& edge = g.edges[static_cast<std::size_t>(e)];
      const int upstream = g.nodes[static_cast<std::size_t>(edge.from_node)].decl->replicas;
      in_index_[static_cast<std::size_t>(e)] = static_cast<int>(in_.size());
      in_.push_back(InEdge{e, edge.to_port, ack_threshold(edge.capacity), std::vector<int>(upstream, 0),
                           std::vector<int>(upstream, 0),
                           run_->edge_in[static_cast<std::size_t>(e)][static_cast<std::size_t>(replica_)].get()});
      eos_remaining_ += upstream;
    }
    join_ = n.decl->join;
    join_limit_ = join_set_limit(n.decl->queue.capacity);
    if (join_.enabled) {
      join_ports_.assign(n.spec.inputs().size(), false);
      for (int e : n.in_edges) join_ports_[static_cast<std::size_t>(g.edges[static_cast<std::size_t>(e)].to_port)] = true;
    }
    for (int e : n.out_edges) {
      const graph::Edge& edge = g.edges[static_cast<std::size_t>(e)];
      const config::StageDecl& consumer = *g.nodes[static_cast<std::size_t>(edge.to_node)].decl;
      const int downstream = consumer.replicas;
      out_index_[static_cast<std::size_t>(e)] = static_cast<int>(out_.size());
      // A joining consumer holds releases while its sets are incomplete.
      const auto& consumer_inputs = g.nodes[static_cast<std::size_t>(edge.to_node)].in_edges;
      const std::size_t retain = retention_limit(
          edge.capacity, consumer.join.enabled ? consumer_inputs.size() * join_set_limit(consumer.queue.capacity) : 0);
      out_.push_back(OutEdge{e, edge.from_port, edge.to_node,
                             EdgeRouter(downstream, edge.capacity, edge.overflow, edge.keyed, edge.key, retain),
                             run_->edge_out[static_cast<std::size_t>(e)][static_cast<std::size_t>(replica_)].get()});
      std::vector<bool> remote(static_cast<std::size_t>(downstream));
      for (int r = 0; r < downstream; ++r) remote[static_cast<std::size_t>(r)] = unit_of(edge.to_node, r) != unit_;
      out_.back().router.set_remote(std::move(remote),
                                    static_cast<std::size_t>(run_->spec.transport.max_message_bytes));
    }
  }

  // Every handler ends with flush_outbox(): envelopes made while handling one
  // message go to each local consumer as one batch message.
  caf::behavior make_behavior() {
    return {
        [this](start_atom) {
          on_start();
          flush_outbox();
        },
        [this](deliver_atom, std::uint32_t edge, std::uint32_t from, Envelope& e) {
          const std::int64_t now = steady_now_ns();
          enqueue(static_cast<int>(edge), static_cast<int>(from), std::move(e), now);
          after_input(now);
        },
        [this](deliver_atom, std::uint32_t edge, std::uint32_t from, std::vector<Envelope>& batch) {
          const std::int64_t now = steady_now_ns();
          for (auto& e : batch) enqueue(static_cast<int>(edge), static_cast<int>(from), std::move(e), now);
          after_input(now);
        },
        [this](ack_atom, std::uint32_t edge, std::uint32_t replica, std::uint32_t credits, std::uint32_t released,
               double service_ns) {
          on_ack(static_cast<int>(edge), static_cast<int>(replica), static_cast<int>(credits),
                 static_cast<int>(released), service_ns);
          flush_outbox();
        },
        [this](eos_atom, std::uint32_t edge, std::uint32_t from) {
          on_eos(static_cast<int>(edge), static_cast<int>(from));
          flush_outbox();
        },
        [this](pull_atom) {
          pull_scheduled_ = false;
          pull();
          flush_outbox();
        },
        [this](resume_atom) {
          backoff_ = false;
          resume();
          flush_outbox();
        },
        [this](stop_atom) {
          if (source_) source_done_ = true;
          maybe_finish();
          flush_outbox();
        },
        [this](join_atom) {
          join_tick_scheduled_ = false;
          expire_joins(steady_now_ns(), false);
          maybe_finish();
          flush_outbox();
        },
    };
  }

  // -- StageContext -------------------------------------------------------

  const std::string& stage_id() const override { return decl().id; }
  int replica() const override { return replica_; }
  int replica_count() const override { return decl().replicas; }
  std::int64_t now_ns() const override { return steady_now_ns(); }
  double speed() const override { return run_->unit_speed[static_cast<std::size_t>(unit_)]; }
  bool stop_requested() const override { return run_->stop_requested.load(std::memory_order_relaxed); }
  void defer_until(std::int64_t t_ns) override { defer_until_ = t_ns; }
  void set_live(bool live) override { live_ = live; }
  std::atomic<std::int64_t>& counter(std::string_view name) override { return stats_->counter(name); }

 private:
  struct InEdge {
    int edge;
    int port;
    int threshold;
    std::vector<int> unacked;     ///< per upstream replica: processed, credit not yet returned
    std::vector<int> releasable;  ///< per upstream replica: released here, release not yet sent
    EdgeSideStats* stats;
  };
  struct OutEdge {
    int edge;
    int port;
    int to_node;
    EdgeRouter router;
    EdgeSideStats* stats;
  };
  struct Item {
    int in;    ///< index into in_
    int from;  ///< upstream replica
    Envelope envelope;
    bool eos;
  };

  const config::StageDecl& decl() const { return *run_->graph.nodes[static_cast<std::size_t>(node_)].decl; }

  // -- life cycle ---------------------------------------------------------

  void on_start() {
    Status s = make_stage();
    if (!s.ok()) {
      fail_permanently("stage '" + decl().id + "' failed to start: " + s.message());
    }
    started_ = true;
    resume();
  }

  Status make_stage() {
    const StageType* type = run_->registry->find(decl().type);
    if (type == nullptr) return Status::error("unknown stage type " + decl().type);
    try {
      stage_ = type->make();
      spec_ = StageSpec();
      stage_->setup(spec_);
      for (const auto& p : decl().params) {
        Status s = spec_.set(p.name, p.value);
        if (!s.ok()) {
          stage_.reset();
          return s;
        }
      }
      Status s = stage_->start(*this);
      // A stage whose start failed is never called again, not even stop().
      if (!s.ok()) stage_.reset();
      return s;
    } catch (const std::exception& ex) {
      stage_.reset();
      return Status::error(ex.what());
    } catch (...) {
      stage_.reset();
      return Status::error("unknown exception");
    }
  }

  void stop_stage() {
    if (!stage_) return;
    try {
      stage_->stop(*this);
    } catch (const std::exception& ex) {
      log("stop() threw: " + std::string(ex.what()));
    } catch (...) {
      log("stop() threw");
    }
    stage_.reset();
  }

  void resume() {
    if (!started_ || finished_) return;
    drain();
    if (source_) pull();
    maybe_finish();
  }

  void maybe_finish() {
    if (finished_ || !started_) return;
    const bool inputs_done = source_ ? source_done_ : eos_remaining_ == 0;
    if (inputs_done && !joins_.empty() && !blocked()) expire_joins(0, true);
    if (!inputs_done || !queue_.empty() || !joins_.empty() || any_waiting() || backoff_) return;
    finish();
  }

  void finish() {
    finished_ = true;
    stop_stage();
    for (auto& in : in_) flush_acks(in, true);
    for (auto& out : out_) {
      const int consumers = static_cast<int>(run_->unit_of[static_cast<std::size_t>(out.to_node)].size());
      for (int r = 0; r < consumers; ++r) post_eos(out.to_node, r, out.edge);
    }
    run_->replica_finished();
    self_->quit();
  }

  // -- input side ---------------------------------------------------------

  /// Queues an arrived envelope, stamping its arrival time `now`.
  void enqueue(int edge, int from, Envelope&& e, std::int64_t now) {
    const int in = in_index_[static_cast<std::size_t>(edge)];
    if (in < 0) return;
    EnvelopeHeader h = e.header();
    h.add_hop(now);
    // No payload: another unit's envelope whose payload this unit's transport
    // refused (counted there); it is acknowledged in its turn, not processed.
    auto& counter = e.payload() ? in_[static_cast<std::size_t>(in)].stats->delivered
                                : in_[static_cast<std::size_t>(in)].stats->refused;
    counter.fetch_add(1, std::memory_order_relaxed);
    queue_.push_back(Item{in, from, std::move(e).with_header(h), false});
    ++data_queued_;
    if (data_queued_ > stats_->queue_peak.load(std::memory_order_relaxed)) {
      stats_->queue_peak.store(data_queued_, std::memory_order_relaxed);
    }
  }

  void after_input(std::int64_t now) {
    drain(now);
    maybe_finish();
    flush_outbox();
  }

  void on_eos(int edge, int from) {
    const int in = in_index_[static_cast<std::size_t>(edge)];
    if (in < 0) return;
    queue_.push_back(Item{in, from, Envelope(), true});
    drain();
    maybe_finish();
  }

  bool blocked() const { return backoff_ || any_blocked(); }

  /// Processes queued envelopes until the queue is empty or the host is
  /// blocked. `now` is a recent clock reading; each step's end time is the
  /// next one's start, so a step costs one clock read.
  void drain(std::int64_t now = 0) {
    if (!started_) return;
    if (queue_.empty()) return;
    std::int64_t t = now != 0 ? now : steady_now_ns();
    while (!queue_.empty() && !blocked()) {
      Item& item = queue_.front();
      if (item.eos) {
        --eos_remaining_;
        flush_acks(in_[static_cast<std::size_t>(item.in)], true);
      } else if (!item.envelope.payload()) {
        acknowledge(item.in, item.from);
        --data_queued_;
      } else if (join_.enabled) {
        join_insert(item, t);
        acknowledge(item.in, item.from);
        --data_queued_;
      } else if (origin_ = next_ordinal_; !process_item(item, t)) {
        break;  // failed; retried after the backoff
      } else {
        acknowledge(item.in, item.from);
        --data_queued_;
      }
      queue_.pop_front();
    }
    stats_->queued.store(data_queued_, std::memory_order_relaxed);
  }

  /// Runs the stage on one envelope; false when it must be retried later.
  /// `t` is the start time on entry and the end time on return.
  bool process_item(Item& item, std::int64_t& t) {
    if (failed_) {
      stats_->dead_letters.fetch_add(1, std::memory_order_relaxed);
      return true;
    }
    InEdge& in = in_[static_cast<std::size_t>(item.in)];
    inputs_.reset(in.port, &item.envelope);
    outputs_.reset(item.envelope.header());
    const std::int64_t t0 = t;
    Status s = call_process();
    const std::int64_t t1 = steady_now_ns();
    t = t1;
    if (s.is_error()) return on_failure(s);
    attempts_ = 0;
    consecutive_failures_ = 0;
    const double service = static_cast<double>(t1 - t0);
    service_ns_ = service_ns_ > 0 ? 0.8 * service_ns_ + 0.2 * service : service;
    stats_->processed.fetch_add(1, std::memory_order_relaxed);
    stats_->busy_ns.fetch_add(t1 - t0, std::memory_order_relaxed);
    stats_->service_ns.store(static_cast<std::int64_t>(service_ns_), std::memory_order_relaxed);
    if (sink_) stats_->record_latency(t1 - item.envelope.header().capture_ns);
    emit_outputs();
    return true;
  }

  // -- joins --------------------------------------------------------------

  /// Envelopes of one key, one per input port, waiting for the rest.
  struct JoinSet {
    std::vector<Envelope> by_port;
    std::int64_t created_ns = 0;
    std::uint64_t origin = 0;  ///< ordinal of its first envelope: it holds the release of all from there
  };

  std::uint64_t join_key(const EnvelopeHeader& h) const {
    switch (join_.key) {
      case config::KeyField::part_id: return h.part_id;
      case config::KeyField::stream: return h.stream;
      case config::KeyField::seq: break;
    }
    return h.seq;
  }

  void join_insert(Item& item, std::int64_t& t) {
    const std::uint64_t key = join_key(item.envelope.header());
    auto it = joins_.find(key);
    if (it == joins_.end()) {
      if (joins_.size() >= join_limit_) expire_oldest_join(t);
      it = joins_.emplace(key, JoinSet{std::vector<Envelope>(join_ports_.size()), t, next_ordinal_}).first;
      schedule_join_tick();
    }
    const auto port = static_cast<std::size_t>(in_[static_cast<std::size_t>(item.in)].port);
    JoinSet& set = it->second;
    if (set.by_port[port].payload()) stats_->counter("join_replaced").fetch_add(1, std::memory_order_relaxed);
    set.by_port[port] = std::move(item.envelope);
    for (std::size_t p = 0; p < join_ports_.size(); ++p) {
      if (join_ports_[p] && !set.by_port[p].payload()) return;
    }
    JoinSet done = std::move(set);
    joins_.erase(it);
    stats_->counter("join_complete").fetch_add(1, std::memory_order_relaxed);
    process_joined(done, false, t);
  }

  /// Sets past their deadline (or all, at the end of the input) are
  /// delivered flagged partial, or dropped if the stage asked for that.
  void expire_joins(std::int64_t now, bool all) {
    const std::int64_t timeout = static_cast<std::int64_t>(join_.timeout_ms) * 1'000'000;
    std::vector<std::uint64_t> due;
    for (const auto& [key, set] : joins_) {
      if (all || now - set.created_ns >= timeout) due.push_back(key);
    }
    std::sort(due.begin(), due.end(), [this](std::uint64_t a, std::uint64_t b) {
      return joins_.at(a).created_ns < joins_.at(b).created_ns;
    });
    std::int64_t t = now != 0 ? now : steady_now_ns();
    for (std::uint64_t key : due) {
      JoinSet set = std::move(joins_.at(key));
      joins_.erase(key);
      expire(set, t);
    }
    if (!joins_.empty()) schedule_join_tick();
  }

  void expire_oldest_join(std::int64_t& t) {
    auto oldest = joins_.begin();
    for (auto it = joins_.begin(); it != joins_.end(); ++it) {
      if (it->second.created_ns < oldest->second.created_ns) oldest = it;
    }
    JoinSet set = std::move(oldest->second);
    joins_.erase(oldest);
    expire(set, t);
  }

  void expire(JoinSet& set, std::int64_t& t) {
    if (spec_.drops_partial_joins()) {
      stats_->counter("join_dropped").fetch_add(1, std::memory_order_relaxed);
      return;
    }
    stats_->counter("join_partial").fetch_add(1, std::memory_order_relaxed);
    process_joined(set, true, t);
  }

  void schedule_join_tick() {
    if (join_tick_scheduled_) return;
    join_tick_scheduled_ = true;
    const auto period = std::chrono::milliseconds(std::clamp(join_.timeout_ms / 2, 1, 100));
    self_->delayed_send(self_, period, join_atom::value);
  }

  /// Runs the stage on a joined set. A set that fails is retried at once
  /// with a fresh stage, and given up as a dead letter after kMaxAttempts.
  void process_joined(JoinSet& set, bool partial, std::int64_t& t) {
    if (failed_) {
      stats_->dead_letters.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    std::vector<const Envelope*> by_port(set.by_port.size(), nullptr);
    const Envelope* first = nullptr;
    for (std::size_t p = 0; p < set.by_port.size(); ++p) {
      if (!set.by_port[p].payload()) continue;
      by_port[p] = &set.by_port[p];
      if (first == nullptr) first = by_port[p];
    }
    if (first == nullptr) return;
    origin_ = set.origin;
    for (int attempt = 1;; ++attempt) {
      inputs_.reset_joined(&by_port, partial);
      outputs_.reset(first->header());
      const std::int64_t t0 = t;
      Status s = call_process();
      t = steady_now_ns();
      if (!s.is_error()) {
        stats_->processed.fetch_add(1, std::memory_order_relaxed);
        stats_->busy_ns.fetch_add(t - t0, std::memory_order_relaxed);
        if (sink_) stats_->record_latency(t - first->header().capture_ns);
        emit_outputs();
        return;
      }
      stats_->errors.fetch_add(1, std::memory_order_relaxed);
      log("replica " + std::to_string(replica_) + " failed on a joined set: " + s.message());
      stats_->restarts.fetch_add(1, std::memory_order_relaxed);
      stop_stage();
      if (Status r = make_stage(); !r.ok()) {
        fail_permanently("stage '" + decl().id + "' failed to restart: " + r.message());
        return;
      }
      if (attempt >= kMaxAttempts) {
        stats_->dead_letters.fetch_add(1, std::memory_order_relaxed);
        return;
      }
    }
  }

  Status call_process() {
    try {
      return stage_->process(inputs_, outputs_, *this);
    } catch (const std::exception& ex) {
      return Status::error(std::string("threw: ") + ex.what());
    } catch (...) {
      return Status::error("threw an unknown exception");
    }
  }

  /// Counts a failed step and restarts the stage. Returns true when the
  /// envelope is given up (dead letter), false when it is to be retried.
  bool on_failure(const Status& s) {
    stats_->errors.fetch_add(1, std::memory_order_relaxed);
    log("replica " + std::to_string(replica_) + " failed: " + s.message());
    ++attempts_;
    const bool give_up = attempts_ >= kMaxAttempts;
    restart_with_backoff();
    if (give_up) {
      // The poison envelope is gone; the next one starts with a short backoff.
      attempts_ = 0;
      consecutive_failures_ = 0;
      stats_->dead_letters.fetch_add(1, std::memory_order_relaxed);
    }
    return give_up;
  }

  void restart_with_backoff() {
    ++consecutive_failures_;
    stats_->restarts.fetch_add(1, std::memory_order_relaxed);
    stop_stage();
    Status s = make_stage();
    if (!s.ok()) {
      fail_permanently("stage '" + decl().id + "' failed to restart: " + s.message());
      return;
    }
    const int shift = std::min(consecutive_failures_ - 1, 30);
    const std::int64_t delay = std::min<std::int64_t>(kMaxBackoffNs, 1'000'000LL << shift);
    backoff_ = true;
    self_->delayed_send(self_, std::chrono::nanoseconds(delay), resume_atom::value);
  }

  /// The stage cannot run: the run fails and is stopped; what reaches this
  /// replica from now on is counted as dead letters so nothing upstream stalls.
  void fail_permanently(const std::string& message) {
    failed_ = true;
    source_done_ = true;
    log(message);
    run_->fail(message);
    run_->stop_requested.store(true);
  }

  // -- credits and releases ------------------------------------------------
  //
  // Every envelope taken from the queue gets the next ordinal and enters the
  // release ledger in that order (per producer, the order it was sent in).
  // Its credit returns at once (batched); its release waits until nothing made
  // from it waits in an output router or a join set: the oldest such origin is
  // the frontier, and the ledger's entries before it are released, in order.

  /// Returns credit for one processed envelope of `from` on in-edge `in`.
  void acknowledge(int in_index, int from) {
    InEdge& in = in_[static_cast<std::size_t>(in_index)];
    ledger_.push_back(Held{next_ordinal_++, in_index, from});
    if (++in.unacked[static_cast<std::size_t>(from)] >= in.threshold) {
      settle_ledger();
      send_ack(in, from);
    }
  }

  std::uint64_t oldest_join_origin() const {
    std::uint64_t oldest = EdgeRouter::kNoOrigin;
    for (const auto& [key, set] : joins_) oldest = std::min(oldest, set.origin);
    return oldest;
  }

  /// The oldest origin still held by a waiting output or a join set.
  std::uint64_t release_frontier() const {
    std::uint64_t frontier = EdgeRouter::kNoOrigin;
    for (const auto& out : out_) frontier = std::min(frontier, out.router.oldest_waiting_origin());
    return std::min(frontier, oldest_join_origin());
  }

  /// Moves the ledger's entries before the frontier to the releasable counts.
  void settle_ledger() {
    if (ledger_.empty()) return;
    const std::uint64_t frontier = release_frontier();
    while (!ledger_.empty() && ledger_.front().ordinal < frontier) {
      const Held& h = ledger_.front();
      ++in_[static_cast<std::size_t>(h.in)].releasable[static_cast<std::size_t>(h.from)];
      ledger_.pop_front();
    }
  }

  /// Sends releases that have reached an ack's batch size (with any credits
  /// due): called as each handler ends, so releases held by waiting outputs
  /// go upstream once those outputs leave.
  void flush_releases() {
    if (ledger_.empty()) return;
    settle_ledger();
    // An incomplete set that holds back the release of more envelopes than
    // the join may hold sets expires early (as when there are too many sets),
    // so its producers stay within their retention limit.
    const std::size_t join_holds = join_limit_ * in_.size();
    if (!joins_.empty() && ledger_.size() > join_holds && !blocked()) {
      std::int64_t t = steady_now_ns();
      while (!joins_.empty() && ledger_.size() > join_holds && oldest_join_origin() <= ledger_.front().ordinal) {
        stats_->counter("join_expired_early").fetch_add(1, std::memory_order_relaxed);
        expire_oldest_join(t);
        settle_ledger();
      }
    }
    for (auto& in : in_) {
      for (std::size_t f = 0; f < in.releasable.size(); ++f) {
        if (in.releasable[f] >= in.threshold) send_ack(in, static_cast<int>(f));
      }
    }
  }

  void send_ack(InEdge& in, int from) {
    const auto f = static_cast<std::size_t>(from);
    post_ack(run_->graph.edges[static_cast<std::size_t>(in.edge)].from_node, from, in.edge, in.unacked[f],
             in.releasable[f]);
    in.unacked[f] = 0;
    in.releasable[f] = 0;
  }

  void flush_acks(InEdge& in, bool all) {
    settle_ledger();
    for (std::size_t f = 0; f < in.unacked.size(); ++f) {
      if (in.unacked[f] > 0 || (all && in.releasable[f] > 0)) send_ack(in, static_cast<int>(f));
    }
  }

  // -- output side --------------------------------------------------------

  bool any_blocked() const {
    for (const auto& out : out_) {
      if (out.router.blocked()) return true;
    }
    return false;
  }

  bool any_waiting() const {
    for (const auto& out : out_) {
      if (out.router.waiting() > 0) return true;
    }
    return false;
  }

  void emit_outputs() {
    auto& items = outputs_.items();
    for (auto& item : items) {
      if (!item.envelope.payload()) {
        // A consumer would take it for one refused on arrival: never sent.
        stats_->errors.fetch_add(1, std::memory_order_relaxed);
        log("replica " + std::to_string(replica_) + " emitted an envelope without a payload: dropped");
        continue;
      }
      const auto& subs = run_->subscribers[static_cast<std::size_t>(node_)][static_cast<std::size_t>(item.port)];
      for (const auto& sub : subs) sub(item.envelope);
      for (auto& out : out_) {
        if (out.port != item.port) continue;
        dispatches_.clear();
        out.router.offer(item.envelope, dispatches_, !live_, origin_);
        send_dispatches(out);
      }
    }
    items.clear();
  }

  void send_dispatches(OutEdge& out) {
    for (auto& d : dispatches_) post_deliver(out.to_node, d.replica, out.edge, std::move(d.envelope));
    dispatches_.clear();
    out.stats->sent.store(out.router.offered(), std::memory_order_relaxed);
    out.stats->dropped.store(out.router.dropped(), std::memory_order_relaxed);
    if (out.router.too_large() != out.stats->too_large.load(std::memory_order_relaxed)) {
      out.stats->too_large.store(out.router.too_large(), std::memory_order_relaxed);
      const graph::Edge& edge = run_->graph.edges[static_cast<std::size_t>(out.edge)];
      log("an envelope on " + run_->graph.from_name(edge) + " -> " + run_->graph.to_name(edge) +
          " has a payload over transport.max_message_bytes (" +
          std::to_string(run_->spec.transport.max_message_bytes) +
          ") and could only go to a consumer replica on another unit: dropped (" +
          std::to_string(out.router.too_large()) + " so far)");
    }
    out.stats->waiting.store(out.router.waiting(), std::memory_order_relaxed);
    out.stats->peak_in_flight.store(static_cast<std::uint64_t>(out.router.peak_outstanding()),
                                    std::memory_order_relaxed);
    out.stats->peak_retained.store(out.router.peak_retained(), std::memory_order_relaxed);
  }

  void on_ack(int edge, int replica, int credits, int released, double service_ns) {
    const int index = out_index_[static_cast<std::size_t>(edge)];
    if (index < 0) return;
    OutEdge& out = out_[static_cast<std::size_t>(index)];
    dispatches_.clear();
    out.router.on_ack(replica, credits, released, service_ns, dispatches_);
    send_dispatches(out);
    if (!blocked()) resume();
  }

  // -- messages to other replicas: direct within the unit, else the transport

  int unit_of(int node, int replica) const {
    return run_->unit_of[static_cast<std::size_t>(node)][static_cast<std::size_t>(replica)];
  }
  const caf::actor& local_actor(int node, int replica) const {
    return run_->actors[static_cast<std::size_t>(node)][static_cast<std::size_t>(replica)];
  }
  transport::Transport& transport() { return *run_->transports[static_cast<std::size_t>(unit_)]; }

  /// Envelopes for one local consumer replica on one edge, sent as one
  /// message when the current handler ends (or when the batch is full).
  struct Batch {
    int node;
    int replica;
    int edge;
    std::vector<Envelope> envelopes;
  };

  void post_deliver(int node, int replica, int edge, Envelope&& e) {
    const int unit = unit_of(node, replica);
    if (unit == unit_) {
      Batch* batch = nullptr;
      for (auto& b : outbox_) {
        if (b.node == node && b.replica == replica && b.edge == edge) batch = &b;
      }
      if (batch == nullptr) {
        outbox_.push_back(Batch{node, replica, edge, {}});
        batch = &outbox_.back();
      }
      if (batch->envelopes.empty()) batch->envelopes.reserve(kMaxBatch);  // one allocation a batch
      batch->envelopes.push_back(std::move(e));
      if (batch->envelopes.size() >= kMaxBatch) send_batch(*batch);
      return;
    }
    transport::OutboundMessage& m = post_remote(unit, transport::FrameKind::deliver, node, replica, edge);
    m.header.envelope = e.header();
    m.header.payload_id = std::string(e.payload()->identifier());
    m.payload = e.payload();
    // A large payload leaves at once, so that it is on its way while the
    // handler makes the next; handing it over alone costs it nothing.
    if (m.payload->size() >= kSendAloneBytes) flush_remote();
  }

  /// A message for another unit, queued to go with the others this handler
  /// makes (in order, one hand-over to the transport thread).
  transport::OutboundMessage& post_remote(int unit, transport::FrameKind kind, int node, int replica, int edge) {
    if (remote_.size() >= kMaxRemoteBatch) flush_remote();
    transport::OutboundMessage& m = remote_.emplace_back();
    m.unit = unit;
    m.destination = transport::Destination{kind, static_cast<std::uint32_t>(node), static_cast<std::uint32_t>(replica),
                                           run_->epoch};
    m.header.edge = static_cast<std::uint32_t>(edge);
    m.header.from_replica = static_cast<std::uint32_t>(replica_);
    m.header.epoch = run_->epoch;
    return m;
  }

  void flush_remote() {
    if (!remote_.empty()) transport().send(remote_);
  }

  void send_batch(Batch& b) {
    const caf::actor& to = local_actor(b.node, b.replica);
    if (b.envelopes.size() == 1) {
      self_->send(to, deliver_atom::value, static_cast<std::uint32_t>(b.edge), static_cast<std::uint32_t>(replica_),
                  std::move(b.envelopes.front()));
    } else {
      self_->send(to, deliver_atom::value, static_cast<std::uint32_t>(b.edge), static_cast<std::uint32_t>(replica_),
                  std::move(b.envelopes));
    }
    b.envelopes = {};
  }

  void flush_outbox() {
    flush_releases();
    for (auto& b : outbox_) {
      if (!b.envelopes.empty()) send_batch(b);
    }
    flush_remote();
  }

  void post_eos(int node, int replica, int edge) {
    const int unit = unit_of(node, replica);
    if (unit == unit_) {
      flush_outbox();  // the end-of-stream mark must follow the envelopes

      self_->send(local_actor(node, replica), eos_atom::value, static_cast<std::uint32_t>(edge),
                  static_cast<std::uint32_t>(replica_));
      return;
    }
    post_remote(unit, transport::FrameKind::eos, node, replica, edge);
  }

  void post_ack(int node, int replica, int edge, int credits, int released) {
    const int unit = unit_of(node, replica);
    if (unit == unit_) {
      self_->send(local_actor(node, replica), ack_atom::value, static_cast<std::uint32_t>(edge),
                  static_cast<std::uint32_t>(replica_), static_cast<std::uint32_t>(credits),
                  static_cast<std::uint32_t>(released), service_ns_);
      return;
    }
    transport::OutboundMessage& m = post_remote(unit, transport::FrameKind::ack, node, replica, edge);
    m.header.credits = static_cast<std::uint32_t>(credits);
    m.header.released = static_cast<std::uint32_t>(released);
    m.header.service_ns = service_ns_;
  }

  // -- sources ------------------------------------------------------------

  void schedule_pull(std::int64_t at_ns) {
    if (pull_scheduled_) return;
    pull_scheduled_ = true;
    const std::int64_t delay = at_ns - steady_now_ns();
    if (delay > 0) {
      self_->delayed_send(self_, std::chrono::nanoseconds(delay), pull_atom::value);
    } else {
      self_->send(self_, pull_atom::value);
    }
  }

  void pull() {
    if (!started_ || finished_ || source_done_ || !source_ || pull_scheduled_) return;
    // A source is busy from the start of a pull to its end (its steps and
    // handing on their outputs): two clock reads a pull, not two a step.
    struct BusyUntilReturn {
      ReplicaStats* stats;
      std::int64_t since = steady_now_ns();
      ~BusyUntilReturn() { stats->busy_ns.fetch_add(steady_now_ns() - since, std::memory_order_relaxed); }
    } busy{stats_};
    for (int k = 0; k < kPullBatch; ++k) {
      if (stop_requested()) {
        source_done_ = true;
        break;
      }
      if (backoff_ || (!live_ && any_blocked())) return;  // resumed by an ack or the backoff
      defer_until_ = 0;
      inputs_.reset(-1, nullptr);
      outputs_.reset(EnvelopeHeader{});
      Status s = call_process();
      if (s.is_end_of_stream()) {
        source_done_ = true;
        break;
      }
      if (s.is_error()) {
        stats_->errors.fetch_add(1, std::memory_order_relaxed);
        log("source replica " + std::to_string(replica_) + " failed: " + s.message());
        if (consecutive_failures_ + 1 >= kMaxSourceFailures) {
          fail_permanently("source '" + decl().id + "' failed " + std::to_string(kMaxSourceFailures) +
                           " times in a row: " + s.message());
          break;
        }
        restart_with_backoff();
        return;
      }
      consecutive_failures_ = 0;
      if (!outputs_.items().empty()) stats_->processed.fetch_add(1, std::memory_order_relaxed);
      emit_outputs();
      if (defer_until_ > 0) {
        schedule_pull(defer_until_);
        return;
      }
    }
    if (source_done_) {
      maybe_finish();
    } else {
      schedule_pull(0);
    }
  }

  // -- logging ------------------------------------------------------------

  /// Logs to stderr at most once a second per replica; the rest are counted.
  void log(const std::string& message) {
    const std::int64_t now = steady_now_ns();
    if (now - last_log_ns_ < 1'000'000'000 && last_log_ns_ != 0) {
      ++suppressed_logs_;
      return;
    }
    std::string extra;
    if (suppressed_logs_ > 0) extra = " (" + std::to_string(suppressed_logs_) + " similar messages suppressed)";
    std::fprintf(stderr, "swarmflow: %s: %s%s\n", decl().id.c_str(), message.c_str(), extra.c_str());
    last_log_ns_ = now;
    suppressed_logs_ = 0;
  }

  caf::event_based_actor* self_;
  std::shared_ptr<RunState> run_;
  int node_;
  int replica_;
  ReplicaStats* stats_ = nullptr;
  int unit_ = 0;
  bool source_ = false;
  bool sink_ = false;

  std::unique_ptr<Stage> stage_;
  StageSpec spec_;
  Inputs inputs_;
  Outputs outputs_;

  std::vector<int> in_index_;
  std::vector<int> out_index_;
  std::vector<InEdge> in_;
  std::vector<OutEdge> out_;
  std::vector<Dispatch> dispatches_;
  std::vector<Batch> outbox_;
  std::vector<transport::OutboundMessage> remote_;  // for other units, sent by flush_outbox
  RingQueue<Item> queue_;

  /// A processed envelope whose release has not been sent.
  struct Held {
    std::uint64_t ordinal;
    int in;    ///< index into in_
    int from;  ///< upstream replica
  };
  RingQueue<Held> ledger_;
  std::uint64_t next_ordinal_ = 0;
  std::uint64_t origin_ = 0;  ///< ordinal of the input whose outputs are being emitted

  std::uint64_t data_queued_ = 0;  ///< envelopes in queue_, not counting end-of-stream marks
  config::JoinDecl join_;
  std::vector<bool> join_ports_;  ///< input ports a complete set must have
  std::unordered_map<std::uint64_t, JoinSet> joins_;
  bool join_tick_scheduled_ = false;
  std::size_t join_limit_ = 0;
  int eos_remaining_ = 0;
  bool started_ = false;
  bool finished_ = false;
  bool failed_ = false;
  bool source_done_ = false;
  bool live_ = false;
  bool backoff_ = false;
  bool pull_scheduled_ = false;
  std::int64_t defer_until_ = 0;
  int attempts_ = 0;
  int consecutive_failures_ = 0;
  double service_ns_ = 0;
  std::int64_t last_log_ns_ = 0;
  std::uint64_t suppressed_logs_ = 0;
};

}  // namespace

caf::actor spawn_stage_host(caf::actor_system& system, std::shared_ptr<RunState> run, int node, int replica) {
  return system.spawn([run = std::move(run), node, replica](caf::event_based_actor* self) {
    auto host = std::make_shared<StageHost>(self, run, node, replica);
    caf::behavior b = host->make_behavior();
    // The behavior's handlers use `host`; keep it alive as long as the actor.
    self->attach_functor([host] {});
    return b;
  });
}

void send_start(const caf::actor& host) { caf::anon_send(host, start_atom::value); }
void send_stop(const caf::actor& host) { caf::anon_send(host, stop_atom::value); }

}  // namespace swarmflow::runtime
