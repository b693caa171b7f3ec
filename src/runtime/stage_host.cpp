// The host actor of one replica: delivers the actor messages it receives to
// the replica's core (the decisions, in replica_core.cpp) and carries out
// what the core asks for: messages to replicas on this unit as CAF messages,
// to other units through the unit's transport, and timers.

#include <chrono>
#include <cstdio>

#include <swarmflow/log.hpp>

#include "runtime/messages.hpp"
#include "runtime/replica_core.hpp"
#include "runtime/run_state.hpp"
#include "runtime/snapshot_codec.hpp"
#include "transport/transport.hpp"

namespace swarmflow::runtime {

namespace {

/// Most envelopes in one message to a local consumer.
constexpr std::size_t kMaxBatch = 32;
/// Messages for other units handed to the transport at once, at most.
constexpr std::size_t kMaxRemoteBatch = 256;
/// Payloads this large go to the transport as soon as they are made.
constexpr std::size_t kSendAloneBytes = 64u << 10;

ReplicaSetup make_setup(const std::shared_ptr<RunState>& run, const RoutingTable& table, int node, int replica,
                        std::shared_ptr<const ReplicaSnapshot> restore, bool successor) {
  const graph::Graph& g = run->graph;
  const graph::Node& n = g.nodes[static_cast<std::size_t>(node)];
  const auto r = static_cast<std::size_t>(replica);
  const int unit = table.unit(node, replica);
  ReplicaSetup s;
  s.graph = &run->graph;
  s.registry = run->registry;
  s.node = node;
  s.replica = replica;
  s.speed = run->unit_speed[static_cast<std::size_t>(unit)]->load(std::memory_order_relaxed);
  s.speed_now = run->unit_speed[static_cast<std::size_t>(unit)].get();
  s.stats = run->replica_stats[static_cast<std::size_t>(node)][r].get();
  s.unit = unit;
  s.trace = run->trace.get();
  s.hop_figures = run->hop_figures;
  s.in_stats.assign(g.edges.size(), nullptr);
  s.out_stats.assign(g.edges.size(), nullptr);
  s.remote_consumers.resize(g.edges.size());
  for (int e : n.in_edges) s.in_stats[static_cast<std::size_t>(e)] = run->edge_in[static_cast<std::size_t>(e)][r].get();
  for (int e : n.out_edges) {
    const auto ei = static_cast<std::size_t>(e);
    s.out_stats[ei] = run->edge_out[ei][r].get();
    const auto& consumers = table.unit_of[static_cast<std::size_t>(g.edges[ei].to_node)];
    for (int owner : consumers) s.remote_consumers[ei].push_back(owner != unit);
  }
  s.max_remote_payload_bytes = static_cast<std::size_t>(run->spec.transport.max_message_bytes);
  s.subscribers = &run->subscribers[static_cast<std::size_t>(node)];
  s.stop_requested = &run->stop_requested;
  s.clock = [] { return steady_now_ns(); };
  if (run->snapshots_with_coordinator) {
    s.snapshot_every = run->spec.failure.snapshot_every;
    s.snapshot_interval_ns = static_cast<std::int64_t>(run->spec.failure.snapshot_ms) * 1'000'000;
  }
  s.restore = std::move(restore);
  s.successor = successor;
  s.epoch = table.epoch;
  return s;
}

class StageHost final : public ReplicaEffects {
 public:
  StageHost(caf::event_based_actor* self, std::shared_ptr<RunState> run, std::shared_ptr<const RoutingTable> table,
            int node, int replica, std::shared_ptr<const ReplicaSnapshot> restore, bool replacement, bool successor)
      : self_(self),
        run_(std::move(run)),
        table_(std::move(table)),
        node_(node),
        replica_(replica),
        unit_(table_->unit(node, replica)),
        core_(make_setup(run_, *table_, node, replica, std::move(restore), successor), *this),
        first_step_pending_(replacement),
        spawned_ns_(steady_now_ns()) {}

  // Every handler ends with flush_outbox(): envelopes made while handling one
  // message go to each local consumer as one batch message.
  caf::behavior make_behavior() {
    return {
        [this](start_atom) {
          // The table published once every host of its epoch was spawned,
          // which names their actors; a newer one (a failover meanwhile) is
          // taken up as a placement change once the stage runs.
          auto table = run_->table();
          PlacementChange change;
          const bool newer = table->epoch > table_->epoch;
          if (newer) change = placement_change(*table_, *table);
          if (table->epoch >= table_->epoch) table_ = std::move(table);
          stats().took_up(table_->epoch);
          core_.start();
          if (newer) core_.placement_changed(change);
          flush_outbox();
        },
        [this](deliver_atom, std::uint32_t edge, std::uint32_t from, Envelope& e) {
          refresh();
          core_.deliver(static_cast<int>(edge), static_cast<int>(from), std::move(e));
          flush_outbox();
        },
        [this](deliver_atom, std::uint32_t edge, std::uint32_t from, std::vector<Envelope>& batch) {
          refresh();
          core_.deliver(static_cast<int>(edge), static_cast<int>(from), batch);
          flush_outbox();
        },
        [this](ack_atom, std::uint32_t edge, std::uint32_t replica, std::uint32_t credits, std::uint32_t released,
               double service_ns) {
          refresh();
          core_.ack(static_cast<int>(edge), static_cast<int>(replica), static_cast<int>(credits),
                    static_cast<int>(released), service_ns);
          flush_outbox();
        },
        [this](eos_atom, std::uint32_t edge, std::uint32_t from) {
          refresh();
          core_.end_of_stream(static_cast<int>(edge), static_cast<int>(from));
          flush_outbox();
        },
        [this](pull_atom) {
          refresh();
          core_.tick(ReplicaCore::kPull);
          flush_outbox();
        },
        [this](resume_atom) {
          refresh();
          core_.tick(ReplicaCore::kResume);
          flush_outbox();
        },
        [this](stop_atom) {
          core_.stop_source();
          flush_outbox();
        },
        [this](join_atom) {
          refresh();
          core_.tick(ReplicaCore::kJoin);
          flush_outbox();
        },
        [this](flush_atom) {
          refresh();
          core_.tick(ReplicaCore::kFlush);
          flush_outbox();
        },
        [this](wake_atom) {
          refresh();
          core_.tick(ReplicaCore::kWake);
          flush_outbox();
        },
        [this](stored_atom, std::uint64_t id) {
          core_.snapshot_stored(id);
          flush_outbox();
        },
        [this](placement_atom, std::shared_ptr<const RoutingTable>& table) {
          if (table->epoch <= table_->epoch) return;
          take_up(std::move(table));
          flush_outbox();
        },
        [this](drain_atom, std::uint32_t edge, std::uint32_t from) {
          refresh();
          core_.drain_mark(static_cast<int>(edge), static_cast<int>(from));
          flush_outbox();
        },
        [this](owed_atom, std::uint32_t edge, std::uint32_t from) {
          refresh();
          core_.owed_mark(static_cast<int>(edge), static_cast<int>(from));
          flush_outbox();
        },
        [this](keys_atom, std::shared_ptr<const KeyStates>& keys) {
          refresh();
          core_.give_keys(*keys);
          flush_outbox();
        },
        [this](drained_atom, std::uint32_t edge, std::uint32_t replica) {
          refresh();
          core_.drained_mark(static_cast<int>(edge), static_cast<int>(replica));
          flush_outbox();
        },
    };
  }

  // -- ReplicaEffects -----------------------------------------------------

  void deliver(int node, int replica, int edge, Envelope&& e) override { post_deliver(node, replica, edge, std::move(e)); }
  void ack(int node, int replica, int edge, int credits, int released, double service_ns) override {
    post_ack(node, replica, edge, credits, released, service_ns);
  }
  void end_of_stream(int node, int replica, int edge) override { post_eos(node, replica, edge); }

  void schedule(int kind, std::int64_t at_ns) override {
    const std::int64_t delay = at_ns - steady_now_ns();
    auto send = [&](auto atom) {
      if (delay > 0) {
        self_->delayed_send(self_, std::chrono::nanoseconds(delay), atom);
      } else {
        self_->send(self_, atom);
      }
    };
    switch (kind) {
      case ReplicaCore::kPull: send(pull_atom::value); break;
      case ReplicaCore::kResume: send(resume_atom::value); break;
      case ReplicaCore::kJoin: send(join_atom::value); break;
      case ReplicaCore::kFlush: send(flush_atom::value); break;
      case ReplicaCore::kWake: send(wake_atom::value); break;
      default: break;
    }
  }

  void finished() override {
    // The replica has left, but its host stays until the run is torn down:
    // a producer placed anew after a failover may still send it what it had
    // (acknowledged at once), or a consumer placed anew need its end of
    // stream again.
    flush_outbox();
    run_->replica_finished();
  }

  void failed(const std::string& message) override {
    run_->fail(message);
    run_->stop_requested.store(true);
  }

  void log(const std::string& line) override { swarmflow::log::warn("%s", line.c_str()); }

  void drain_mark(int node, int replica, int edge) override {
    const int unit = unit_of(node, replica);
    if (direct(unit, node, replica)) {
      flush_outbox();  // the mark follows everything sent before it
      tell(unit, local_actor(node, replica), drain_atom::value, static_cast<std::uint32_t>(edge),
           static_cast<std::uint32_t>(replica_));
      return;
    }
    post_remote(unit, transport::FrameKind::drain, node, replica, edge);
  }

  void owed_mark(int node, int replica, int edge) override {
    const int unit = unit_of(node, replica);
    if (direct(unit, node, replica)) {
      flush_outbox();  // behind the last outputs
      tell(unit, local_actor(node, replica), owed_atom::value, static_cast<std::uint32_t>(edge),
           static_cast<std::uint32_t>(replica_));
      return;
    }
    post_remote(unit, transport::FrameKind::owed, node, replica, edge);
  }

  void drained_mark(int node, int replica, int edge) override {
    const int unit = unit_of(node, replica);
    if (direct(unit, node, replica)) {
      tell(unit, local_actor(node, replica), drained_atom::value, static_cast<std::uint32_t>(edge),
           static_cast<std::uint32_t>(replica_));
      return;
    }
    post_remote(unit, transport::FrameKind::drained, node, replica, edge);
  }

  void drained(ReplicaSnapshot&& handover) override {
    flush_outbox();
    if (run_->on_drained) {
      run_->on_drained(node_, replica_, std::make_shared<const ReplicaSnapshot>(std::move(handover)));
    }
  }

  void snapshot(ReplicaSnapshot&& snapshot) override {
    if (run_->snapshots_local.load(std::memory_order_acquire)) {
      self_->send(self_, stored_atom::value, snapshot.id);
      return;
    }
    transport().send_control(encode_snapshot(run_->spec.units[static_cast<std::size_t>(unit_)].id, table_->epoch,
                                             node_, replica_, snapshot));
  }

 private:
  // -- messages to other replicas: direct within the unit, else the transport

  int unit_of(int node, int replica) const { return table_->unit(node, replica); }
  caf::actor local_actor(int node, int replica) const { return table_->actor(node, replica); }

  /// Messages to replica `node/replica` on `unit` go straight to its actor:
  /// it is on this unit, or on another unit of this process when the run
  /// hands messages between the units of one process directly
  /// (`transport: {in_process: direct}`, docs/design.md).
  bool direct(int unit, int node, int replica) const {
    if (unit == unit_) return true;
    if (unit < 0 || static_cast<std::size_t>(unit) >= run_->direct_units.size() ||
        run_->direct_units[static_cast<std::size_t>(unit)] == 0) {
      return false;
    }
    return static_cast<bool>(local_actor(node, replica));
  }

  /// Sends to a replica's actor; one on another unit runs on that unit's
  /// workers (a message sent with self_ would run it on this unit's).
  template <class... Ts>
  void tell(int unit, const caf::actor& to, Ts&&... xs) {
    if (unit == unit_) {
      self_->send(to, std::forward<Ts>(xs)...);
    } else {
      caf::anon_send(to, std::forward<Ts>(xs)...);
    }
  }

  /// Takes up the published table when it is newer than this host's (a host
  /// may hear of a new placement from a message made under it first).
  void refresh() {
    if (run_->epoch() <= table_->epoch) return;
    take_up(run_->table());
  }

  /// Takes placements up to `table` one epoch at a time where they are
  /// kept (a move is a drain and then a hand-over: skipping one would miss
  /// a mark), else at once.
  void take_up(std::shared_ptr<const RoutingTable> table) {
    while (table_->epoch + 1 < table->epoch) {
      auto next = run_->table_at(table_->epoch + 1);
      if (!next) break;
      step_to(std::move(next));
    }
    step_to(std::move(table));
  }

  void step_to(std::shared_ptr<const RoutingTable> table) {
    if (table->epoch <= table_->epoch) return;
    PlacementChange change = placement_change(*table_, *table);
    table_ = std::move(table);
    core_.placement_changed(change);
    stats().took_up(table_->epoch);
  }

  ReplicaStats& stats() {
    return *run_->replica_stats[static_cast<std::size_t>(node_)][static_cast<std::size_t>(replica_)];
  }

  /// What changed for this replica between two placements.
  PlacementChange placement_change(const RoutingTable& before, const RoutingTable& after) const {
    const graph::Graph& g = run_->graph;
    const graph::Node& n = g.nodes[static_cast<std::size_t>(node_)];
    PlacementChange change;
    change.epoch = after.epoch;
    change.remote_consumers.resize(g.edges.size());
    for (int e : n.out_edges) {
      const int to = g.edges[static_cast<std::size_t>(e)].to_node;
      const int consumers = static_cast<int>(after.unit_of[static_cast<std::size_t>(to)].size());
      for (int r = 0; r < consumers; ++r) {
        const int now = after.unit(to, r);
        change.remote_consumers[static_cast<std::size_t>(e)].push_back(now != unit_);
        if (after.is_draining(to, r) && !before.is_draining(to, r)) change.draining_consumers.emplace_back(e, r);
        if (before.is_draining(to, r) && !after.is_draining(to, r)) {
          change.handed_over_consumers.emplace_back(e, r);
        } else if (now != before.unit(to, r) && now != kLostUnit) {
          change.moved_consumers.emplace_back(e, r);
        }
      }
      if (after.key_map(to) != before.key_map(to)) change.key_maps.emplace_back(e, after.key_map(to));
    }
    change.drain = after.is_draining(node_, replica_) && !before.is_draining(node_, replica_);
    if (change.drain) change.leaving_keys = after.draining_keys;
    for (int e : n.in_edges) {
      const int from = g.edges[static_cast<std::size_t>(e)].from_node;
      const int producers = static_cast<int>(after.unit_of[static_cast<std::size_t>(from)].size());
      for (int r = 0; r < producers; ++r) {
        const int now = after.unit(from, r);
        if (now == before.unit(from, r) || after.was_handed_over(from, r)) continue;
        (now == kLostUnit ? change.lost_producers : change.moved_producers).emplace_back(e, r);
      }
    }
    return change;
  }
  transport::Transport& transport() { return *run_->transports[static_cast<std::size_t>(unit_)]; }

  /// Envelopes for one local consumer replica on one edge, sent as one
  /// message when the current handler ends (or when the batch is full).
  struct Batch {
    int node;
    int replica;
    int edge;
    std::vector<Envelope> envelopes;
    bool timed = false;  ///< holds an envelope that gets its send time as the batch leaves
  };

  /// The envelopes the core chose to carry a send time (it stamps one in
  /// kHopSampleEvery as it hands them over, hop_figures.hpp) get the time
  /// they really leave this replica: after the rest of the handler's work.
  static void stamp_leaving(std::vector<Envelope>& envelopes) {
    const std::int64_t now = steady_now_ns();
    for (auto& e : envelopes) {
      if (e.header().sent_ns == 0) continue;
      EnvelopeHeader h = e.header();
      h.sent_ns = now;
      e = std::move(e).with_header(h);
    }
  }

  void post_deliver(int node, int replica, int edge, Envelope&& e) {
    const int unit = unit_of(node, replica);
    if (direct(unit, node, replica)) {
      Batch* batch = nullptr;
      for (auto& b : outbox_) {
        if (b.node == node && b.replica == replica && b.edge == edge) batch = &b;
      }
      if (batch == nullptr) {
        outbox_.push_back(Batch{node, replica, edge, {}});
        batch = &outbox_.back();
      }
      if (batch->envelopes.empty()) batch->envelopes.reserve(kMaxBatch);  // one allocation a batch
      if (e.header().sent_ns != 0) batch->timed = true;
      // A large payload for another unit leaves at once, as through the
      // transport: that unit's workers start on it while this handler makes
      // the next (a source makes several in one pull).
      const bool alone = unit != unit_ && e.payload() && e.payload()->size() >= kSendAloneBytes;
      batch->envelopes.push_back(std::move(e));
      if (alone || batch->envelopes.size() >= kMaxBatch) send_batch(*batch);
      return;
    }
    transport::OutboundMessage& m = post_remote(unit, transport::FrameKind::deliver, node, replica, edge);
    m.header.envelope = e.header();
    if (m.header.envelope.sent_ns != 0) remote_timed_ = true;
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
                                           table_->epoch};
    m.header.edge = static_cast<std::uint32_t>(edge);
    m.header.from_replica = static_cast<std::uint32_t>(replica_);
    m.header.epoch = table_->epoch;
    return m;
  }

  void flush_remote() {
    if (remote_timed_) {
      // As stamp_leaving: the time they are handed to the transport thread.
      const std::int64_t now = steady_now_ns();
      for (auto& m : remote_) {
        if (m.destination.kind == transport::FrameKind::deliver && m.header.envelope.sent_ns != 0) {
          m.header.envelope.sent_ns = now;
        }
      }
      remote_timed_ = false;
    }
    if (!remote_.empty()) transport().send(remote_);
  }

  void send_batch(Batch& b) {
    if (b.timed) {
      stamp_leaving(b.envelopes);
      b.timed = false;
    }
    const caf::actor to = local_actor(b.node, b.replica);
    const int unit = unit_of(b.node, b.replica);
    if (b.envelopes.size() == 1) {
      tell(unit, to, deliver_atom::value, static_cast<std::uint32_t>(b.edge), static_cast<std::uint32_t>(replica_),
           std::move(b.envelopes.front()));
    } else {
      tell(unit, to, deliver_atom::value, static_cast<std::uint32_t>(b.edge), static_cast<std::uint32_t>(replica_),
           std::move(b.envelopes));
    }
    b.envelopes = {};
  }

  void flush_outbox() {
    if (first_step_pending_ && core_.steps() > 0) report_first_step();
    for (auto& b : outbox_) {
      if (!b.envelopes.empty()) send_batch(b);
    }
    flush_remote();
  }

  void post_eos(int node, int replica, int edge) {
    const int unit = unit_of(node, replica);
    if (direct(unit, node, replica)) {
      flush_outbox();  // the end-of-stream mark must follow the envelopes
      tell(unit, local_actor(node, replica), eos_atom::value, static_cast<std::uint32_t>(edge),
           static_cast<std::uint32_t>(replica_));
      return;
    }
    post_remote(unit, transport::FrameKind::eos, node, replica, edge);
  }

  void post_ack(int node, int replica, int edge, int credits, int released, double service_ns) {
    const int unit = unit_of(node, replica);
    if (direct(unit, node, replica)) {
      tell(unit, local_actor(node, replica), ack_atom::value, static_cast<std::uint32_t>(edge),
           static_cast<std::uint32_t>(replica_), static_cast<std::uint32_t>(credits),
           static_cast<std::uint32_t>(released), service_ns);
      return;
    }
    transport::OutboundMessage& m = post_remote(unit, transport::FrameKind::ack, node, replica, edge);
    m.header.credits = static_cast<std::uint32_t>(credits);
    m.header.released = static_cast<std::uint32_t>(released);
    m.header.service_ns = service_ns;
  }

  /// A replica placed by a failover finished its first step: the failover's
  /// time to first output (its coordinator's process records it).
  void report_first_step() {
    first_step_pending_ = false;
    const std::int64_t now = steady_now_ns();
    if (!run_->snapshots_with_coordinator) {
      run_->record_first_output(table_->epoch, now, false);
      return;
    }
    const std::string& unit = run_->spec.units[static_cast<std::size_t>(unit_)].id;
    const std::uint32_t epoch = table_->epoch;
    const std::int64_t after = now - spawned_ns_;
    transport().send_control(transport::make_control([&](flatbuffers::FlatBufferBuilder& fbb) {
      return std::make_pair(schema::ControlBody::FirstOutput,
                            schema::CreateFirstOutput(fbb, fbb.CreateString(unit), epoch, static_cast<std::uint32_t>(node_),
                                                      static_cast<std::uint32_t>(replica_), after)
                                .Union());
    }));
  }

  caf::event_based_actor* self_;
  std::shared_ptr<RunState> run_;
  std::shared_ptr<const RoutingTable> table_;  ///< the placement this host routes by
  int node_;
  int replica_;
  int unit_;
  std::vector<Batch> outbox_;
  std::vector<transport::OutboundMessage> remote_;  // for other units, sent by flush_outbox
  bool remote_timed_ = false;  // remote_ holds an envelope that gets its send time as it leaves
  ReplicaCore core_;
  bool first_step_pending_;
  std::int64_t spawned_ns_;
};

}  // namespace

caf::actor spawn_stage_host(caf::actor_system& system, std::shared_ptr<RunState> run,
                             std::shared_ptr<const RoutingTable> table, int node, int replica,
                             std::shared_ptr<const ReplicaSnapshot> restore, bool replacement, bool successor) {
  return system.spawn([run = std::move(run), table = std::move(table), node, replica, restore = std::move(restore),
                       replacement, successor](caf::event_based_actor* self) {
    auto host = std::make_shared<StageHost>(self, run, table, node, replica, restore, replacement, successor);
    caf::behavior b = host->make_behavior();
    // The behavior's handlers use `host`; keep it alive as long as the actor.
    self->attach_functor([host] {});
    return b;
  });
}

void send_start(const caf::actor& host) { caf::anon_send(host, start_atom::value); }
void send_snapshot_stored(const caf::actor& host, std::uint64_t id) { caf::anon_send(host, stored_atom::value, id); }
void send_stop(const caf::actor& host) { caf::anon_send(host, stop_atom::value); }

}  // namespace swarmflow::runtime
