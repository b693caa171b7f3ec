// The decisions of one replica, without actors (see replica_core.hpp).

#include "runtime/replica_core.hpp"

#include <algorithm>
#include <chrono>
#include <exception>
#include <thread>

namespace swarmflow::runtime {

void ReplicaEffects::hold(std::int64_t ns) { std::this_thread::sleep_for(std::chrono::nanoseconds(ns)); }

namespace {

/// How often one envelope may fail a stage before it is given up as a dead letter.
constexpr int kMaxAttempts = 3;
/// How often a source may fail in a row before the replica gives up.
constexpr int kMaxSourceFailures = 3;
/// Source steps per event, so that acks are not starved by a busy source.
constexpr int kPullBatch = 64;
constexpr std::int64_t kMaxBackoffNs = 1'000'000'000;
/// Snapshots of a stateful stage taken and not yet stored, at most.
constexpr std::size_t kMaxPendingSnapshots = 3;
/// Envelopes given up in a row, with no success between, after which a
/// stage counts as failing for good and fails the run.
constexpr int kMaxDeadLetterStreak = 5;
/// Processed keys remembered per producer replica, per envelope it may retain.
constexpr std::size_t kDedupWindowPerRetained = 4;

/// Envelopes a replica of `n` may hold unreleased because what it made from
/// them is not accepted downstream yet: per out-edge, what may wait there
/// (its capacity) and what each consumer replica has not credited (its
/// capacity each).
std::size_t output_hold(const graph::Graph& g, const graph::Node& n) {
  std::size_t hold = 0;
  for (int e : n.out_edges) {
    const graph::Edge& edge = g.edges[static_cast<std::size_t>(e)];
    const int consumers = g.nodes[static_cast<std::size_t>(edge.to_node)].decl->replicas;
    // What may wait: `capacity`, or `capacity` copies per replica under `fanout: all`.
    const int waiting = edge.fanout_all ? consumers : 1;
    hold += static_cast<std::size_t>(std::max(1, edge.capacity)) * static_cast<std::size_t>(consumers + waiting);
  }
  return hold;
}

}  // namespace

std::size_t join_set_limit(int capacity) { return kJoinSetsPerCredit * static_cast<std::size_t>(std::max(1, capacity)); }

namespace {

/// Keys a consumer remembers per producer replica on `edge` for duplicate
/// detection: 4 x what the producer may retain for it.
std::size_t dedup_window(const graph::Graph& g, const graph::Edge& edge) {
  const graph::Node& n = g.nodes[static_cast<std::size_t>(edge.to_node)];
  return kDedupWindowPerRetained *
         (retention_limit(edge.capacity,
                          n.decl->join.enabled ? n.in_edges.size() * join_set_limit(n.decl->queue.capacity) : 0) +
          output_hold(g, n));
}

}  // namespace


ReplicaCore::ReplicaCore(ReplicaSetup setup, ReplicaEffects& effects) : setup_(std::move(setup)), effects_(effects) {
  const graph::Graph& g = *setup_.graph;
  const graph::Node& n = g.nodes[static_cast<std::size_t>(setup_.node)];
  source_ = n.source();
  // A stage whose outputs feed nothing ends its envelopes' journey: latency is measured there.
  sink_ = n.out_edges.empty();
  in_index_.assign(g.edges.size(), -1);
  out_index_.assign(g.edges.size(), -1);
  for (int e : n.in_edges) {
    const graph::Edge& edge = g.edges[static_cast<std::size_t>(e)];
    const int upstream = g.nodes[static_cast<std::size_t>(edge.from_node)].decl->replicas;
    in_index_[static_cast<std::size_t>(e)] = static_cast<int>(in_.size());
    in_.push_back(InEdge{e, edge.to_port, ack_threshold(edge.capacity), edge.feedback, std::vector<int>(upstream, 0),
                         std::vector<int>(upstream, 0), setup_.in_stats[static_cast<std::size_t>(e)], {}});
    const std::size_t window = dedup_window(g, edge);
    in_.back().upstream.resize(static_cast<std::size_t>(upstream));
    for (auto& up : in_.back().upstream) up.seen.resize(window);
    // End of stream waits on forward inputs only: a feedback edge's producer
    // ends after this replica does (it is downstream of it), so waiting for
    // it would hang every cycle.
    if (!edge.feedback) eos_remaining_ += upstream;
    producer_ids_.push_back(g.nodes[static_cast<std::size_t>(edge.from_node)].decl->id);
  }
  join_ = n.decl->join;
  join_limit_ = join_set_limit(n.decl->queue.capacity);
  if (join_.enabled) {
    join_ports_.assign(n.spec.inputs().size(), false);
    for (int e : n.in_edges) join_ports_[static_cast<std::size_t>(g.edges[static_cast<std::size_t>(e)].to_port)] = true;
  }
  // A source restarted from its snapshot sends again what it made after it
  // (up to kMaxPendingSnapshots of them taken and not yet stored, and what
  // its consumers had not accepted): its consumers must recognise all of
  // that as duplicates, so it snapshots every eighth of what they remember.
  source_snapshot_every_ = static_cast<std::uint64_t>(std::max(1, setup_.snapshot_every));
  for (int e : n.out_edges) {
    const graph::Edge& edge = g.edges[static_cast<std::size_t>(e)];
    if (source_) {
      source_snapshot_every_ =
          std::min<std::uint64_t>(source_snapshot_every_, std::max<std::size_t>(1, dedup_window(g, edge) / 8));
    }
    const graph::Node& to = g.nodes[static_cast<std::size_t>(edge.to_node)];
    const int downstream = to.decl->replicas;
    out_index_[static_cast<std::size_t>(e)] = static_cast<int>(out_.size());
    // A joining consumer holds releases while its sets are incomplete.
    const std::size_t retain =
        retention_limit(edge.capacity,
                        to.decl->join.enabled ? to.in_edges.size() * join_set_limit(to.decl->queue.capacity) : 0) +
        output_hold(g, to);
    out_.push_back(OutEdge{e, edge.from_port, edge.to_node, downstream,
                           EdgeRouter(downstream, edge.capacity, edge.overflow, edge.keyed, edge.key, retain),
                           setup_.out_stats[static_cast<std::size_t>(e)],
                           std::vector<bool>(static_cast<std::size_t>(downstream), false),
                           std::vector<bool>(static_cast<std::size_t>(downstream), false),
                           std::vector<std::uint8_t>(static_cast<std::size_t>(downstream), 0),
                           std::vector<bool>(static_cast<std::size_t>(downstream), false)});
    out_.back().router.set_fanout(edge.fanout_all);
    if (setup_.successor && out_.back().stats != nullptr) {
      const EdgeSideStats& st = *out_.back().stats;
      out_.back().router.carry_counts(st.sent.load(), st.dropped.load(), st.too_large.load(), st.replayed.load());
    }
    if (static_cast<std::size_t>(e) < setup_.remote_consumers.size()) {
      out_.back().router.set_remote(setup_.remote_consumers[static_cast<std::size_t>(e)],
                                    setup_.max_remote_payload_bytes);
    }
    if (static_cast<std::size_t>(e) < setup_.consumer_serving.size()) {
      const auto [active, ring] = setup_.consumer_serving[static_cast<std::size_t>(e)];
      if (active > 0) out_.back().router.set_serving(active, ring, dispatches_);  // nothing waits yet
    }
  }
}

ReplicaCore::~ReplicaCore() = default;

const config::StageDecl& ReplicaCore::decl() const {
  return *setup_.graph->nodes[static_cast<std::size_t>(setup_.node)].decl;
}

const std::string& ReplicaCore::stage_id() const { return decl().id; }
int ReplicaCore::replica_count() const { return decl().replicas; }
int ReplicaCore::producers(int port) const {
  int n = 0;
  for (const auto& in : in_) {
    if (in.port == port) n += static_cast<int>(in.upstream.size());
  }
  return n;
}

bool ReplicaCore::stop_requested() const {
  return setup_.stop_requested != nullptr && setup_.stop_requested->load(std::memory_order_relaxed);
}

std::size_t ReplicaCore::unreleased() const {
  std::size_t n = ledger_count_;
  for (const auto& in : in_) {
    for (int r : in.releasable) n += static_cast<std::size_t>(r);
  }
  return n;
}

const EdgeRouter* ReplicaCore::router(int edge) const {
  if (edge < 0 || static_cast<std::size_t>(edge) >= out_index_.size()) return nullptr;
  const int index = out_index_[static_cast<std::size_t>(edge)];
  return index < 0 ? nullptr : &out_[static_cast<std::size_t>(index)].router;
}

// -- events -------------------------------------------------------------

void ReplicaCore::deliver(int edge, int from, Envelope&& envelope) {
  const std::int64_t now = setup_.clock();
  enqueue(edge, from, std::move(envelope), now);
  after_input(now);
}

void ReplicaCore::deliver(int edge, int from, std::vector<Envelope>& batch) {
  const std::int64_t now = setup_.clock();
  for (auto& e : batch) enqueue(edge, from, std::move(e), now);
  after_input(now);
}

void ReplicaCore::tick(int kind) {
  switch (kind) {
    case kPull:
      pull_scheduled_ = false;
      pull();
      break;
    case kResume:
      backoff_ = false;
      resume();
      break;
    case kJoin:
      join_tick_scheduled_ = false;
      expire_joins(setup_.clock(), false);
      maybe_finish();
      break;
    case kWake:
      wake_scheduled_at_ = 0;
      wake();
      break;
    case kFlush:
      flush_scheduled_ = false;
      if (queue_.empty()) {
        maybe_snapshot(true);
        for (auto& in : in_) flush_acks(in, true);
      }
      break;
    default:
      break;
  }
  end_event();
}

void ReplicaCore::stop_source() {
  if (source_) source_done_ = true;
  maybe_finish();
  end_event();
}

void ReplicaCore::end_event() {
  if (draining_ && !drained_) check_drained();
  if (drained_) return;
  // A blocked replica is woken by what unblocks it (an ack, the backoff).
  if (wake_at_ > 0 && !blocked()) schedule_wake();
  maybe_snapshot(false);
  if (!snapshots_pending_.empty()) send_snapshots();
  flush_releases();
  if (finished_ && !left_) maybe_leave();
  const bool snapshot_owed = stateful_ && !source_ && snapshot_taken_ < next_ordinal_;
  if (!flush_scheduled_ && queue_.empty() && (owes_acks() || snapshot_owed)) {
    if ((last_step_ns_ >= kIdleFlushNs || input_gap_ns_ >= kIdleFlushNs) && !snapshot_owed) {
      // Its last step took longer than the wait would, or its inputs came
      // further apart: what it is fed comes slower still, so waiting to
      // gather more acks would only hold its producers' credits back, and
      // the timer costs two thread wake-ups (a frame stage, or one fed a
      // frame's results at a time: several a frame). It returns what it
      // owes now.
      for (auto& in : in_) flush_acks(in, true);
    } else {
      flush_scheduled_ = true;
      effects_.schedule(kFlush, setup_.clock() + kIdleFlushNs);
    }
  }
}

bool ReplicaCore::owes_acks() const {
  for (const auto& in : in_) {
    for (std::size_t f = 0; f < in.unacked.size(); ++f) {
      if (in.unacked[f] > 0 || in.releasable[f] > 0) return true;
    }
  }
  return false;
}

// -- life cycle ---------------------------------------------------------

void ReplicaCore::start() {
  Status s = make_stage();
  if (!s.ok()) {
    fail_permanently("stage '" + decl().id + "' failed to start: " + s.message());
  } else if (setup_.restore && !restore_state()) {
    stop_stage();
  } else if (!source_) {
    // A stage is stateful when it can snapshot its state: it hands it over
    // when it moves, and snapshots for failover where a coordinator keeps them.
    std::string probe;
    try {
      can_snapshot_ = stage_->snapshot(probe);
    } catch (...) {
      can_snapshot_ = false;
    }
    setup_.stats->stateful.store(can_snapshot_, std::memory_order_relaxed);
    const char* by = stage_->state_key();
    setup_.stats->state_per_key.store(can_snapshot_ && by != nullptr && decl().keyed && !decl().fanout_all &&
                                          std::string(by) == config::to_string(decl().key),
                                      std::memory_order_relaxed);
    if (setup_.stats->state_per_key.load(std::memory_order_relaxed)) {
      std::vector<std::uint64_t> held;
      try {
        setup_.stats->lists_keys.store(stage_->held_keys(held), std::memory_order_relaxed);
      } catch (...) {
        setup_.stats->lists_keys.store(false, std::memory_order_relaxed);
      }
    }
    stateful_ = can_snapshot_ && setup_.snapshot_every > 0;
    snapshot_ns_ = setup_.clock();
  } else if (setup_.snapshot_every > 0) {
    std::string probe;
    try {
      stateful_ = stage_->snapshot(probe);
    } catch (...) {
      stateful_ = false;
    }
    snapshot_ns_ = setup_.clock();
  }
  key_figures_ = !source_ && decl().keyed && !decl().fanout_all && decl().max_replicas > 1;
  started_ = true;
  resume();
  end_event();
}

Status ReplicaCore::make_stage() {
  wake_at_ = 0;  // a new instance has no work in hand
  const StageType* type = setup_.registry->find(decl().type);
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

void ReplicaCore::stop_stage() {
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

void ReplicaCore::resume() {
  if (!started_ || finished_) return;
  drain();
  if (source_) {
    pull();
  } else {
    wake();
  }
  maybe_finish();
}

void ReplicaCore::maybe_finish() {
  if (finished_ || !started_) return;
  // A draining replica hands over instead; its successor gets the marks again.
  if (draining_) return;
  const bool inputs_done = source_ ? source_done_ : eos_remaining_ == 0;
  if (inputs_done && !joins_.empty() && !blocked()) expire_joins(0, true);
  if (!inputs_done || !queue_.empty() || !joins_.empty() || any_waiting() || backoff_) return;
  // A stage with work in hand finishes it first (a failed one has none left).
  if (wake_at_ > 0 && !failed_ && stage_) return;
  finish();
}

/// Stops the stage, returns every credit and release, and ends every
/// out-edge. The replica leaves (effects_.finished()) once its consumers have
/// released all it sent them (maybe_leave): until then a consumer's unit may
/// die and what it had not released is replayed from here.
void ReplicaCore::finish() {
  finished_ = true;
  setup_.stats->finished.store(true, std::memory_order_relaxed);
  // The last state, before stop() (which may write files or print).
  if (stateful_ && snapshot_taken_ < next_ordinal_) take_snapshot();
  stop_stage();
  for (auto& in : in_) flush_acks(in, true);
  for (auto& out : out_) {
    for (int r = 0; r < out.consumers; ++r) {
      effects_.end_of_stream(out.to_node, r, out.edge);
      out.eos_sent[static_cast<std::size_t>(r)] = true;
    }
  }
}

void ReplicaCore::maybe_leave() {
  if (!finished_ || left_) return;
  if (!snapshots_pending_.empty()) return;  // its inputs are released once it is stored
  for (const auto& out : out_) {
    if (out.router.retained() > 0) return;
    for (bool due : out.eos_due) {
      if (due) return;
    }
  }
  // Everything made was accepted downstream: every input is released now,
  // and the producers get it before this replica goes.
  for (auto& in : in_) flush_acks(in, true);
  left_ = true;
  effects_.finished();
}

void ReplicaCore::send_due_marks() {
  for (auto& out : out_) {
    for (int r = 0; r < out.consumers; ++r) {
      const auto i = static_cast<std::size_t>(r);
      if (!out.eos_due[i] || out.router.replaying(r) > 0 || out.router.waiting() > 0) continue;
      effects_.end_of_stream(out.to_node, r, out.edge);
      out.eos_due[i] = false;
      out.eos_sent[i] = true;
    }
  }
}

// -- placement changes --------------------------------------------------

void ReplicaCore::give_keys(const KeyStates& keys) {
  if (!stage_ || failed_) return;
  for (const auto& [key, state] : keys) {
    Status s;
    try {
      s = stage_->give_key(key, state);
    } catch (const std::exception& ex) {
      s = Status::error(std::string("threw: ") + ex.what());
    } catch (...) {
      s = Status::error("threw an unknown exception");
    }
    if (!s.ok()) {
      fail_permanently("stage '" + decl().id + "' could not take over key " + std::to_string(key) + ": " + s.message());
      return;
    }
  }
}

void ReplicaCore::placement_changed(const PlacementChange& change) {
  if (drained_) return;  // its successor runs the stage now
  for (auto& out : out_) {
    const auto e = static_cast<std::size_t>(out.edge);
    if (e < change.remote_consumers.size() && !change.remote_consumers[e].empty()) {
      out.router.set_remote(change.remote_consumers[e], setup_.max_remote_payload_bytes);
    }
  }
  for (const auto& [edge, keys] : change.key_maps) {
    if (OutEdge* out = out_edge(edge)) out->router.set_key_map(keys);
  }
  for (const auto& [edge, serving] : change.serving) {
    OutEdge* out = out_edge(edge);
    if (out == nullptr) continue;
    dispatches_.clear();
    out->router.set_serving(serving.first, serving.second, dispatches_);
    send_dispatches(*out);
  }
  for (const auto& [edge, replica] : change.draining_consumers) {
    OutEdge* out = out_edge(edge);
    if (out == nullptr || replica < 0 || replica >= out->consumers) continue;
    const auto r = static_cast<std::size_t>(replica);
    if ((out->handover[r] & kPaused) != 0) {
      // Its last hand-over is not done here yet (its drained mark is still
      // on its way): it drains again right after, from its successor.
      out->handover[r] |= kAgain;
      continue;
    }
    out->router.pause(replica);
    out->handover[r] = kPaused;
    // An end of stream sent already is its mark.
    if (!out->eos_sent[r]) effects_.drain_mark(out->to_node, replica, out->edge);
  }
  for (const auto& [edge, replica] : change.handed_over_consumers) {
    OutEdge* out = out_edge(edge);
    if (out == nullptr || replica < 0 || replica >= out->consumers) continue;
    const auto r = static_cast<std::size_t>(replica);
    const auto e = static_cast<std::size_t>(edge);
    if ((out->handover[r] & kPaused) == 0) continue;
    out->handover[r] |= kSwitched;
    out->handover_remote[r] =
        e < change.remote_consumers.size() && r < change.remote_consumers[e].size() && change.remote_consumers[e][r];
    maybe_resume_consumer(*out, replica);
  }
  if (change.drain) {
    draining_ = true;
    leaving_keys_ = change.leaving_keys;
    leaving_all_keys_ = change.leaving_all_keys;
  }
  for (const auto& [edge, replica] : change.moved_consumers) {
    if (edge < 0 || static_cast<std::size_t>(edge) >= out_index_.size()) continue;
    const int index = out_index_[static_cast<std::size_t>(edge)];
    if (index < 0) continue;
    OutEdge& out = out_[static_cast<std::size_t>(index)];
    if (replica < 0 || replica >= out.consumers) continue;
    const auto r = static_cast<std::size_t>(replica);
    const auto e = static_cast<std::size_t>(edge);
    const bool remote = e < change.remote_consumers.size() && r < change.remote_consumers[e].size() &&
                        change.remote_consumers[e][r];
    dispatches_.clear();
    const std::uint64_t before = out.router.replayed();
    out.router.replace(replica, remote, dispatches_);
    if (change.epoch > 0) {
      const auto again = out.router.replayed() - before + out.router.replaying(replica);
      setup_.stats->counter("failover." + std::to_string(change.epoch) + ".replayed")
          .fetch_add(static_cast<std::int64_t>(again), std::memory_order_relaxed);
    }
    send_dispatches(out);
    // The new placement has not seen the mark: it follows the replay.
    if (out.eos_sent[r]) {
      out.eos_sent[r] = false;
      out.eos_due[r] = true;
    }
  }
  auto in_edge = [this](int edge, int from) {
    if (edge < 0 || static_cast<std::size_t>(edge) >= in_index_.size()) return -1;
    const int index = in_index_[static_cast<std::size_t>(edge)];
    if (index < 0 || from < 0) return -1;
    return static_cast<std::size_t>(from) < in_[static_cast<std::size_t>(index)].upstream.size() ? index : -1;
  };
  for (const auto& [edge, from] : change.moved_producers) {
    const int index = in_edge(edge, from);
    if (index < 0) continue;
    forget_producer(index, from);
    // Its new incarnation makes again what its inputs' replay makes: what
    // this replica processed of that is recognised by (stream, seq).
    expect_duplicates(in_[static_cast<std::size_t>(index)].upstream[static_cast<std::size_t>(from)], change.epoch);
  }
  for (const auto& [edge, from] : change.lost_producers) {
    const int index = in_edge(edge, from);
    if (index < 0) continue;
    forget_producer(index, from);
    InEdge& in = in_[static_cast<std::size_t>(index)];
    Upstream& up = in.upstream[static_cast<std::size_t>(from)];
    if (!up.ended) {
      up.ended = true;
      if (!in.feedback) --eos_remaining_;
    }
  }
  if (finished_) {
    send_due_marks();
  } else if (!blocked()) {
    resume();
  }
  end_event();
}

// -- moves ----------------------------------------------------------------
//
// A move drains a replica before its work goes elsewhere: its producers stop
// sending it anything (drain marks follow their last envelope), it does all
// it was sent, its outputs are accepted and released downstream, and it
// returns every credit and release. Then it hands its state over (drained)
// and tells its producers (drained marks after its last acks); each takes
// the replica up again at its new placement, or sends its keys to their new
// replicas, once it has both the mark and the new placement. Nothing is in
// flight to or from the old replica then, so nothing is lost or sent twice,
// and a key's envelopes are processed in the order they were sent.

ReplicaCore::OutEdge* ReplicaCore::out_edge(int edge) {
  if (edge < 0 || static_cast<std::size_t>(edge) >= out_index_.size()) return nullptr;
  const int index = out_index_[static_cast<std::size_t>(edge)];
  return index < 0 ? nullptr : &out_[static_cast<std::size_t>(index)];
}

void ReplicaCore::maybe_resume_consumer(OutEdge& out, int replica) {
  const auto r = static_cast<std::size_t>(replica);
  const std::uint8_t all = kPaused | kMarkIn | kSwitched;
  if ((out.handover[r] & all) != all) return;
  const bool again = (out.handover[r] & kAgain) != 0;
  out.handover[r] = 0;
  dispatches_.clear();
  out.router.resume(replica, out.handover_remote[r], dispatches_);
  send_dispatches(out);
  // Its successor has not seen the end of stream the drained one had.
  if (out.eos_sent[r]) {
    out.eos_sent[r] = false;
    out.eos_due[r] = true;
  }
  if (again) {
    // The successor drains in its turn: what waited went to it first.
    out.router.pause(replica);
    out.handover[r] = kPaused;
    if (out.eos_due[r] && out.router.waiting() == 0) {
      send_due_marks();  // its end of stream is its mark
    } else {
      effects_.drain_mark(out.to_node, replica, out.edge);
    }
  }
  if (finished_) {
    send_due_marks();
  } else if (!blocked()) {
    resume();
  }
}

void ReplicaCore::drain_mark(int edge, int from) {
  if (edge >= 0 && static_cast<std::size_t>(edge) < in_index_.size()) {
    const int index = in_index_[static_cast<std::size_t>(edge)];
    if (index >= 0 && from >= 0 &&
        static_cast<std::size_t>(from) < in_[static_cast<std::size_t>(index)].upstream.size()) {
      // It may come before this replica has taken up the placement that
      // drains it (the producer took it up first): it counts then too.
      in_[static_cast<std::size_t>(index)].upstream[static_cast<std::size_t>(from)].marked = true;
    }
  }
  end_event();
}

void ReplicaCore::owed_mark(int edge, int from) {
  if (edge >= 0 && static_cast<std::size_t>(edge) < in_index_.size()) {
    const int index = in_index_[static_cast<std::size_t>(edge)];
    if (index >= 0 && from >= 0 &&
        static_cast<std::size_t>(from) < in_[static_cast<std::size_t>(index)].upstream.size()) {
      // The producer drains: it waits for what this replica owes it, so
      // that goes back now and as soon as more is due.
      InEdge& in = in_[static_cast<std::size_t>(index)];
      in.upstream[static_cast<std::size_t>(from)].prompt = true;
      flush_acks(in, true);
    }
  }
  end_event();
}

void ReplicaCore::drained_mark(int edge, int replica) {
  OutEdge* out = out_edge(edge);
  if (out != nullptr && replica >= 0 && replica < out->consumers &&
      (out->handover[static_cast<std::size_t>(replica)] & kPaused) != 0) {
    out->handover[static_cast<std::size_t>(replica)] |= kMarkIn;
    maybe_resume_consumer(*out, replica);
  }
  end_event();
}

void ReplicaCore::check_drained() {
  if (!started_ || drained_) return;
  for (const auto& in : in_) {
    if (in.feedback) continue;
    for (const auto& up : in.upstream) {
      if (!up.marked && !up.ended) return;
    }
  }
  if (!queue_.empty() || !joins_.empty() || wake_at_ > 0 || backoff_ || !snapshots_pending_.empty()) return;
  if (!drain_marks_sent_) {
    // Nothing more comes in, so nothing more goes out: the consumers hear
    // it behind the last output, and return what they owe it at once.
    drain_marks_sent_ = true;
    for (const auto& out : out_) {
      for (int c = 0; c < out.consumers; ++c) {
        if (!out.eos_sent[static_cast<std::size_t>(c)]) effects_.owed_mark(out.to_node, c, out.edge);
      }
    }
  }
  for (const auto& out : out_) {
    if (out.router.waiting() > 0 || out.router.retained() > 0) return;
    for (bool due : out.eos_due) {
      if (due) return;
    }
  }
  // Everything made was accepted and released downstream: every input is
  // released now, and the producers get it before the drained marks.
  settle_ledger();
  if (ledger_count_ > 0) return;
  for (auto& in : in_) flush_acks(in, true);
  drained_ = true;
  ReplicaSnapshot handover;
  handover.handover = true;
  handover.finished = finished_;
  if (stage_ && can_snapshot_ && setup_.stats->state_per_key.load(std::memory_order_relaxed)) {
    // Keys given away take their state along; what stays is snapshotted.
    if (leaving_all_keys_) {
      leaving_keys_.clear();
      try {
        if (!stage_->held_keys(leaving_keys_)) log("held_keys() failed while handing over: its keys' state stays");
      } catch (...) {
        log("held_keys() threw while handing over: its keys' state stays");
      }
    }
    for (std::uint64_t key : leaving_keys_) {
      std::string state;
      try {
        if (stage_->take_key(key, state)) handover.keys.emplace_back(key, std::move(state));
      } catch (const std::exception& ex) {
        log(std::string("take_key() threw while handing over: ") + ex.what());
      } catch (...) {
        log("take_key() threw while handing over");
      }
    }
  }
  if (stage_ && can_snapshot_) {
    try {
      if (!stage_->snapshot(handover.state)) handover.state.clear();
    } catch (const std::exception& ex) {
      log(std::string("snapshot() threw while handing over: ") + ex.what());
    } catch (...) {
      log("snapshot() threw while handing over");
    }
  }
  handover.processed = setup_.stats->processed.load(std::memory_order_relaxed);
  for (const auto& [name, value] : setup_.stats->counters()) handover.counters.emplace_back(name, value);
  flush_key_figures();
  // Its successor runs the stage from here; this instance just goes.
  stage_.reset();
  // The marks go before the placer hears of it (it stops this host soon after).
  for (const auto& in : in_) {
    const int from_node = (*setup_.graph).edges[static_cast<std::size_t>(in.edge)].from_node;
    for (std::size_t f = 0; f < in.upstream.size(); ++f) effects_.drained_mark(from_node, static_cast<int>(f), in.edge);
  }
  effects_.drained(std::move(handover));
}

void ReplicaCore::record_key(const EnvelopeHeader& h, std::int64_t ns, std::int64_t now) {
  std::uint64_t key = h.stream;
  if (decl().key == config::KeyField::part_id) key = h.part_id;
  if (decl().key == config::KeyField::seq) key = h.seq;
  auto it = key_busy_.find(key);
  if (it != key_busy_.end()) {
    it->second += ns;
  } else if (key_busy_.size() < kTrackedKeys) {
    key_busy_.emplace(key, ns);
  } else {
    key_overflow_ = true;
  }
  // Published often enough for the policy's interval, seldom enough to cost nothing.
  if (++key_steps_ % 64 == 0 || now - key_published_ns_ >= 50'000'000) flush_key_figures();
}

void ReplicaCore::flush_key_figures() {
  if (!key_figures_) return;
  ReplicaStats::KeyFigures figures;
  figures.busy_ns.assign(key_busy_.begin(), key_busy_.end());
  figures.overflow = key_overflow_;
  setup_.stats->publish_keys(std::move(figures));
  key_published_ns_ = setup_.clock();
}

void ReplicaCore::expect_duplicates(Upstream& up, std::uint32_t epoch) {
  up.dedup = std::make_unique<Dedup>();
  if (epoch > 0) up.dedup->counter = &setup_.stats->counter("failover." + std::to_string(epoch) + ".duplicates");
  up.dedup->left = up.seen.size();
  up.dedup->processed.reserve(up.filled);
  for (std::size_t i = 0; i < up.filled; ++i) ++up.dedup->processed[up.seen[i]];
}

void ReplicaCore::forget_producer(int in_index, int from) {
  InEdge& in = in_[static_cast<std::size_t>(in_index)];
  const auto f = static_cast<std::size_t>(from);
  in.unacked[f] = 0;
  in.releasable[f] = 0;
  for (std::size_t n = ledger_.size(); n > 0; --n) {
    const Held h = ledger_.front();
    ledger_.pop_front();
    if (h.in == in_index && h.from == from) {
      ledger_count_ -= h.count;
    } else {
      ledger_.push_back(h);
    }
  }
  // What is still queued from the old incarnation is processed, but its
  // credit and release are owed to no one.
  ++in.upstream[f].generation;
}

// -- input side ---------------------------------------------------------

/// Queues an arrived envelope, stamping its arrival time `now`.
void ReplicaCore::enqueue(int edge, int from, Envelope&& e, std::int64_t now) {
  const int in = in_index_[static_cast<std::size_t>(edge)];
  if (in < 0) return;
  EnvelopeHeader h = e.header();
  h.add_hop(now);
  // No payload: another unit's envelope whose payload this unit's transport
  // refused (counted there); it is acknowledged in its turn, not processed.
  auto& counter = e.payload() ? in_[static_cast<std::size_t>(in)].stats->delivered
                              : in_[static_cast<std::size_t>(in)].stats->refused;
  counter.fetch_add(1, std::memory_order_relaxed);
  Upstream& up = in_[static_cast<std::size_t>(in)].upstream[static_cast<std::size_t>(from)];
  up.prompt = false;
  const std::uint32_t generation = up.generation;
  queue_.push_back(Item{in, from, std::move(e).with_header(h), false, generation});
  ++data_queued_;
  if (data_queued_ > setup_.stats->queue_peak.load(std::memory_order_relaxed)) {
    setup_.stats->queue_peak.store(data_queued_, std::memory_order_relaxed);
  }
}

void ReplicaCore::after_input(std::int64_t now) {
  if (last_input_ns_ >= 0) input_gap_ns_ = now - last_input_ns_;
  last_input_ns_ = now;
  drain(now);
  maybe_finish();
  end_event();
}

void ReplicaCore::end_of_stream(int edge, int from) {
  const int in = in_index_[static_cast<std::size_t>(edge)];
  if (in >= 0) {
    queue_.push_back(Item{in, from, Envelope(), true, 0});
    drain();
    maybe_finish();
  }
  end_event();
}

bool ReplicaCore::blocked() const { return backoff_ || any_blocked(); }

/// Processes queued envelopes until the queue is empty or the host is
/// blocked. `now` is a recent clock reading; each step's end time is the
/// next one's start, so a step costs one clock read.
void ReplicaCore::drain(std::int64_t now) {
  if (!started_) return;
  if (queue_.empty()) return;
  std::int64_t t = now != 0 ? now : setup_.clock();
  while (!queue_.empty() && !blocked()) {
    Item& item = queue_.front();
    InEdge& in = in_[static_cast<std::size_t>(item.in)];
    Upstream& up = in.upstream[static_cast<std::size_t>(item.from)];
    if (item.eos) {
      // A new incarnation of a producer may end its stream again.
      if (!up.ended) {
        up.ended = true;
        if (!in.feedback) --eos_remaining_;
      }
      flush_acks(in, true);
    } else if (!item.envelope.payload()) {
      settle_item(item);
      --data_queued_;
    } else if (up.dedup && item.generation == up.generation && is_duplicate(up, item.envelope.header())) {
      // Acknowledged, so the sender's credits and retention stay right.
      ++duplicates_dropped_;
      if (duplicates_counter_ == nullptr) duplicates_counter_ = &setup_.stats->counter("duplicates_dropped");
      duplicates_counter_->fetch_add(1, std::memory_order_relaxed);
      acknowledge(item.in, item.from);
      --data_queued_;
    } else if (in.feedback && (finished_ || (eos_remaining_ == 0 && (wake_at_ == 0 || failed_ || !stage_)))) {
      // Still circulating when the forward inputs ended and the stage has
      // no work in hand: acknowledged and counted, not processed, so that
      // the cycle drains (docs/design.md, "Cycles"). A stage still working
      // on what it holds (defer_until) takes it: it is about that work.
      setup_.stats->counter("feedback_after_end").fetch_add(1, std::memory_order_relaxed);
      remember(up, item);
      settle_item(item);
      --data_queued_;
    } else if (finished_) {
      // The stage is stopped: only a duplicate was to be expected here.
      setup_.stats->dead_letters.fetch_add(1, std::memory_order_relaxed);
      remember(up, item);
      settle_item(item);
      --data_queued_;
    } else if (join_.enabled) {
      remember(up, item);
      join_insert(item, t);
      settle_item(item);
      --data_queued_;
    } else if (origin_ = next_ordinal_; !process_item(item, t)) {
      break;  // failed; retried after the backoff
    } else {
      remember(up, item);
      settle_item(item);
      --data_queued_;
    }
    queue_.pop_front();
  }
  setup_.stats->queued.store(data_queued_, std::memory_order_relaxed);
  // A replica that has ended takes only what a new incarnation of a
  // producer sends again: nothing of it waits, so it is acknowledged at once.
  if (finished_) {
    for (auto& in : in_) flush_acks(in, true);
  }
}

void ReplicaCore::remember(Upstream& up, const Item& item) {
  const EnvelopeHeader& h = item.envelope.header();
  const Key key{h.stream, h.seq};
  up.seen[up.next] = key;
  if (++up.next == up.seen.size()) up.next = 0;
  if (up.filled < up.seen.size()) ++up.filled;
  // While a producer placed anew may send again what was processed here,
  // every key processed counts: one from the old incarnation processed
  // after the move (queued, or arriving late from a unit that was told
  // later), and one the old incarnation sent that got here stamped as the
  // new one's (a late message the receiving unit let through before it
  // took the new placement up). Each key is processed once.
  if (up.dedup) ++up.dedup->processed[key];
}

bool ReplicaCore::is_duplicate(Upstream& up, const EnvelopeHeader& h) {
  Dedup& d = *up.dedup;
  bool duplicate = false;
  const auto it = d.processed.find(Key{h.stream, h.seq});
  if (it != d.processed.end() && it->second > 0) {
    --it->second;
    duplicate = true;
    if (d.counter != nullptr) d.counter->fetch_add(1, std::memory_order_relaxed);
  }
  if (--d.left == 0) up.dedup.reset();
  return duplicate;
}

void ReplicaCore::settle_item(const Item& item) {
  const InEdge& in = in_[static_cast<std::size_t>(item.in)];
  if (item.generation == in.upstream[static_cast<std::size_t>(item.from)].generation) {
    acknowledge(item.in, item.from);
  } else {
    ++next_ordinal_;  // its outputs name it as their origin; nothing to release upstream
  }
}

/// Runs the stage on one envelope; false when it must be retried later.
/// `t` is the start time on entry and the end time on return.
bool ReplicaCore::process_item(Item& item, std::int64_t& t) {
  if (failed_) {
    setup_.stats->dead_letters.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  InEdge& in = in_[static_cast<std::size_t>(item.in)];
  inputs_.reset(in.port, &item.envelope);
  inputs_.set_producer(&producer_ids_[static_cast<std::size_t>(item.in)], item.from);
  outputs_.reset(item.envelope.header());
  const std::int64_t t0 = t;
  Status s = call_process(t0);
  const std::int64_t t1 = setup_.clock();
  t = t1;
  if (s.is_error()) return on_failure(s);
  attempts_ = 0;
  consecutive_failures_ = 0;
  dead_letter_streak_ = 0;
  const double service = static_cast<double>(t1 - t0);
  service_ns_ = service_ns_ > 0 ? 0.8 * service_ns_ + 0.2 * service : service;
  last_step_ns_ = t1 - t0;
  ++steps_;
  setup_.stats->processed.fetch_add(1, std::memory_order_relaxed);
  setup_.stats->busy_ns.fetch_add(t1 - t0, std::memory_order_relaxed);
  setup_.stats->record_service(t1 - t0);
  setup_.stats->service_ns.store(static_cast<std::int64_t>(service_ns_), std::memory_order_relaxed);
  if (key_figures_) record_key(item.envelope.header(), t1 - t0, t1);
  if (sink_) setup_.stats->record_latency(t1 - item.envelope.header().capture_ns);
  if (setup_.hop_figures || setup_.trace != nullptr) {
    EdgeSideStats* in_stats = setup_.hop_figures ? in_[static_cast<std::size_t>(item.in)].stats : nullptr;
    record_hops(setup_.hop_figures ? &setup_.stats->residence : nullptr, in_stats != nullptr ? &in_stats->hops : nullptr,
                in_stats != nullptr ? &in_stats->held : nullptr, setup_.trace,
                TraceStep{setup_.node, setup_.replica, setup_.unit}, item.envelope.header(), t1);
  }
  emit_outputs(t1);
  return true;
}

// -- joins --------------------------------------------------------------


std::uint64_t ReplicaCore::join_key(const EnvelopeHeader& h) const {
  switch (join_.key) {
    case config::KeyField::part_id: return h.part_id;
    case config::KeyField::stream: return h.stream;
    case config::KeyField::seq: break;
  }
  return h.seq;
}

void ReplicaCore::join_insert(Item& item, std::int64_t& t) {
  const std::uint64_t key = join_key(item.envelope.header());
  auto it = joins_.find(key);
  if (it == joins_.end()) {
    if (joins_.size() >= join_limit_) expire_oldest_join(t);
    it = joins_.emplace(key, JoinSet{std::vector<Envelope>(join_ports_.size()), t, next_ordinal_}).first;
    schedule_join_tick();
  }
  const auto port = static_cast<std::size_t>(in_[static_cast<std::size_t>(item.in)].port);
  JoinSet& set = it->second;
  if (set.by_port[port].payload()) setup_.stats->counter("join_replaced").fetch_add(1, std::memory_order_relaxed);
  set.by_port[port] = std::move(item.envelope);
  for (std::size_t p = 0; p < join_ports_.size(); ++p) {
    if (join_ports_[p] && !set.by_port[p].payload()) return;
  }
  JoinSet done = std::move(set);
  joins_.erase(it);
  setup_.stats->counter("join_complete").fetch_add(1, std::memory_order_relaxed);
  process_joined(done, false, t);
}

/// Sets past their deadline (or all, at the end of the input) are
/// delivered flagged partial, or dropped if the stage asked for that.
void ReplicaCore::expire_joins(std::int64_t now, bool all) {
  const std::int64_t timeout = static_cast<std::int64_t>(join_.timeout_ms) * 1'000'000;
  std::vector<std::uint64_t> due;
  for (const auto& [key, set] : joins_) {
    if (all || now - set.created_ns >= timeout) due.push_back(key);
  }
  std::sort(due.begin(), due.end(), [this](std::uint64_t a, std::uint64_t b) {
    return joins_.at(a).created_ns < joins_.at(b).created_ns;
  });
  std::int64_t t = now != 0 ? now : setup_.clock();
  for (std::uint64_t key : due) {
    JoinSet set = std::move(joins_.at(key));
    joins_.erase(key);
    expire(set, t);
  }
  if (!joins_.empty()) schedule_join_tick();
}

void ReplicaCore::expire_oldest_join(std::int64_t& t) {
  auto oldest = joins_.begin();
  for (auto it = joins_.begin(); it != joins_.end(); ++it) {
    if (it->second.created_ns < oldest->second.created_ns) oldest = it;
  }
  JoinSet set = std::move(oldest->second);
  joins_.erase(oldest);
  expire(set, t);
}

void ReplicaCore::expire(JoinSet& set, std::int64_t& t) {
  if (spec_.drops_partial_joins()) {
    setup_.stats->counter("join_dropped").fetch_add(1, std::memory_order_relaxed);
    return;
  }
  setup_.stats->counter("join_partial").fetch_add(1, std::memory_order_relaxed);
  process_joined(set, true, t);
}

void ReplicaCore::schedule_join_tick() {
  if (join_tick_scheduled_) return;
  join_tick_scheduled_ = true;
  const auto period = std::chrono::milliseconds(std::clamp(join_.timeout_ms / 2, 1, 100));
  effects_.schedule(kJoin, setup_.clock() + std::chrono::nanoseconds(period).count());
}

/// Runs the stage on a joined set. A set that fails is retried at once
/// with a fresh stage, and given up as a dead letter after kMaxAttempts.
void ReplicaCore::process_joined(JoinSet& set, bool partial, std::int64_t& t) {
  if (failed_) {
    setup_.stats->dead_letters.fetch_add(1, std::memory_order_relaxed);
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
    Status s = call_process(t0);
    t = setup_.clock();
    last_step_ns_ = t - t0;
    if (!s.is_error()) {
      dead_letter_streak_ = 0;
      ++steps_;
      setup_.stats->processed.fetch_add(1, std::memory_order_relaxed);
      setup_.stats->busy_ns.fetch_add(t - t0, std::memory_order_relaxed);
      setup_.stats->record_service(t - t0);
      if (sink_) setup_.stats->record_latency(t - first->header().capture_ns);
      if (setup_.hop_figures || setup_.trace != nullptr) {
        record_hops(setup_.hop_figures ? &setup_.stats->residence : nullptr, nullptr, nullptr, setup_.trace,
                    TraceStep{setup_.node, setup_.replica, setup_.unit}, first->header(), t);
      }
      emit_outputs(t);
      return;
    }
    setup_.stats->errors.fetch_add(1, std::memory_order_relaxed);
    log("replica " + std::to_string(setup_.replica) + " failed on a joined set: " + s.message());
    setup_.stats->restarts.fetch_add(1, std::memory_order_relaxed);
    stop_stage();
    if (Status r = make_stage(); !r.ok()) {
      fail_permanently("stage '" + decl().id + "' failed to restart: " + r.message());
      return;
    }
    if (attempt >= kMaxAttempts) {
      give_up(s);
      return;
    }
  }
}

Status ReplicaCore::call_process(std::int64_t t0) {
  Status s;
  defer_called_ = false;
  // A unit slower than nominal takes 1/speed as long over every step: what
  // the stage took, then the rest held (docs/pipelines.md "scenario").
  const double speed_now =
      setup_.speed_now != nullptr ? setup_.speed_now->load(std::memory_order_relaxed) : setup_.speed;
  if (t0 < 0 && speed_now < 1.0) t0 = setup_.clock();
  // The step under way counts as busy while it lasts (a sample taken in
  // the middle of a long step sees it), a source's pull as a whole.
  if (!source_) setup_.stats->step_since_ns.store(t0, std::memory_order_relaxed);
  speed_asked_ = false;
  try {
    s = stage_->process(inputs_, outputs_, *this);
  } catch (const std::exception& ex) {
    s = Status::error(std::string("threw: ") + ex.what());
  } catch (...) {
    s = Status::error("threw an unknown exception");
  }
  if (speed_now < 1.0 && !speed_asked_) {
    const double took = static_cast<double>(setup_.clock() - t0);
    const auto rest = static_cast<std::int64_t>(took * (1.0 / std::max(speed_now, 1e-3) - 1.0));
    if (rest > 0) effects_.hold(rest);
  }
  if (!source_) setup_.stats->step_since_ns.store(0, std::memory_order_relaxed);
  if (!source_) take_wake_request();
  return s;
}

/// Counts a failed step and restarts the stage. Returns true when the
/// envelope is given up (dead letter), false when it is to be retried.
bool ReplicaCore::on_failure(const Status& s) {
  setup_.stats->errors.fetch_add(1, std::memory_order_relaxed);
  log("replica " + std::to_string(setup_.replica) + " failed: " + s.message());
  ++attempts_;
  const bool last_attempt = attempts_ >= kMaxAttempts;
  restart_with_backoff();
  if (last_attempt) {
    // The poison envelope is gone; the next one starts with a short backoff.
    attempts_ = 0;
    consecutive_failures_ = 0;
    give_up(s);
  }
  return last_attempt;
}

void ReplicaCore::give_up(const Status& last) {
  setup_.stats->dead_letters.fetch_add(1, std::memory_order_relaxed);
  if (++dead_letter_streak_ >= kMaxDeadLetterStreak && !failed_) {
    fail_permanently("stage '" + decl().id + "' keeps failing: " + std::to_string(dead_letter_streak_) +
                     " envelopes in a row were given up as dead letters after " + std::to_string(kMaxAttempts) +
                     " attempts each; the last failed with: " + last.message());
  }
}

void ReplicaCore::restart_with_backoff() {
  ++consecutive_failures_;
  setup_.stats->restarts.fetch_add(1, std::memory_order_relaxed);
  stop_stage();
  Status s = make_stage();
  if (!s.ok()) {
    fail_permanently("stage '" + decl().id + "' failed to restart: " + s.message());
    return;
  }
  const int shift = std::min(consecutive_failures_ - 1, 30);
  const std::int64_t delay = std::min<std::int64_t>(kMaxBackoffNs, 1'000'000LL << shift);
  backoff_ = true;
  effects_.schedule(kResume, setup_.clock() + delay);
}

/// The stage cannot run: the run fails and is stopped; what reaches this
/// replica from now on is counted as dead letters so nothing upstream stalls.
void ReplicaCore::fail_permanently(const std::string& message) {
  failed_ = true;
  source_done_ = true;
  log(message);
  effects_.failed(message);
}

// -- credits and releases ------------------------------------------------
//
// Every envelope taken from the queue gets the next ordinal and enters the
// release ledger in that order (per producer, the order it was sent in).
// Its credit returns at once (batched); its release waits until nothing made
// from it waits in an output router or a join set: the oldest such origin is
// the frontier, and the ledger's entries before it are released, in order.

/// Returns credit for one processed envelope of `from` on in-edge `in`.
void ReplicaCore::acknowledge(int in_index, int from) {
  InEdge& in = in_[static_cast<std::size_t>(in_index)];
  const std::uint64_t ordinal = next_ordinal_++;
  if (!ledger_.empty() && ledger_.back().in == in_index && ledger_.back().from == from &&
      ledger_.back().first + ledger_.back().count == ordinal) {
    ++ledger_.back().count;
  } else {
    ledger_.push_back(Held{ordinal, 1, in_index, from});
  }
  ++ledger_count_;
  if (++in.unacked[static_cast<std::size_t>(from)] >= in.threshold) {
    settle_ledger();
    send_ack(in, from);
  }
}

std::uint64_t ReplicaCore::oldest_join_origin() const {
  std::uint64_t oldest = EdgeRouter::kNoOrigin;
  for (const auto& [key, set] : joins_) oldest = std::min(oldest, set.origin);
  return oldest;
}

/// The oldest origin still held by a waiting output or a join set.
std::uint64_t ReplicaCore::release_frontier() const {
  std::uint64_t frontier = EdgeRouter::kNoOrigin;
  // A stateful stage's inputs wait until a stored snapshot covers them (once
  // it is stopped, its last snapshot covers everything it processed).
  if (stateful_ && !(finished_ && snapshots_pending_.empty())) frontier = snapshot_frontier_;
  for (const auto& out : out_) frontier = std::min(frontier, out.router.oldest_held_origin());
  return std::min(frontier, oldest_join_origin());
}

/// Moves the ledger's entries before the frontier to the releasable counts.
void ReplicaCore::settle_ledger() {
  if (ledger_.empty()) return;
  const std::uint64_t frontier = release_frontier();
  while (!ledger_.empty() && ledger_.front().first < frontier) {
    Held& h = ledger_.front();
    const std::uint64_t due = std::min(h.count, frontier - h.first);
    in_[static_cast<std::size_t>(h.in)].releasable[static_cast<std::size_t>(h.from)] += static_cast<int>(due);
    ledger_count_ -= due;
    if (due < h.count) {
      h.first += due;
      h.count -= due;
      break;
    }
    ledger_.pop_front();
  }
}

/// Sends releases that have reached an ack's batch size (with any credits
/// due): called as each handler ends, so releases held by waiting outputs
/// go upstream once those outputs leave.
void ReplicaCore::flush_releases() {
  if (ledger_.empty()) return;
  settle_ledger();
  // An incomplete set that holds back the release of more envelopes than
  // the join may hold sets expires early (as when there are too many sets),
  // so its producers stay within their retention limit.
  const std::size_t join_holds = join_limit_ * in_.size();
  if (!joins_.empty() && ledger_count_ > join_holds && !blocked()) {
    std::int64_t t = setup_.clock();
    while (!joins_.empty() && ledger_count_ > join_holds && oldest_join_origin() <= ledger_.front().first) {
      setup_.stats->counter("join_expired_early").fetch_add(1, std::memory_order_relaxed);
      expire_oldest_join(t);
      settle_ledger();
    }
  }
  for (auto& in : in_) {
    for (std::size_t f = 0; f < in.releasable.size(); ++f) {
      if (in.releasable[f] >= in.threshold || (in.releasable[f] > 0 && in.upstream[f].prompt)) {
        send_ack(in, static_cast<int>(f));
      }
    }
  }
}

void ReplicaCore::send_ack(InEdge& in, int from) {
  const auto f = static_cast<std::size_t>(from);
  effects_.ack((*setup_.graph).edges[static_cast<std::size_t>(in.edge)].from_node, from, in.edge, in.unacked[f],
               in.releasable[f], service_ns_);
  in.unacked[f] = 0;
  in.releasable[f] = 0;
}

void ReplicaCore::flush_acks(InEdge& in, bool all) {
  settle_ledger();
  for (std::size_t f = 0; f < in.unacked.size(); ++f) {
    if (in.unacked[f] > 0 || (all && in.releasable[f] > 0)) send_ack(in, static_cast<int>(f));
  }
}

// -- output side --------------------------------------------------------

bool ReplicaCore::any_blocked() const {
  for (const auto& out : out_) {
    if (out.router.blocked()) return true;
  }
  return false;
}

bool ReplicaCore::any_waiting() const {
  for (const auto& out : out_) {
    if (out.router.waiting() > 0 || out.router.replaying() > 0) return true;
  }
  return false;
}

void ReplicaCore::emit_outputs(std::int64_t now) {
  auto& items = outputs_.items();
  for (auto& item : items) {
    if (!item.envelope.payload()) {
      // A consumer would take it for one refused on arrival: never sent.
      setup_.stats->errors.fetch_add(1, std::memory_order_relaxed);
      log("replica " + std::to_string(setup_.replica) + " emitted an envelope without a payload: dropped");
      continue;
    }
    const auto& subs = (*setup_.subscribers)[static_cast<std::size_t>(item.port)];
    for (const auto& sub : subs) sub(item.envelope);
    for (auto& out : out_) {
      if (out.port != item.port) continue;
      dispatches_.clear();
      out.router.offer(item.envelope, dispatches_, !live_, origin_);
      send_dispatches(out, now);
    }
  }
  items.clear();
}

void ReplicaCore::send_dispatches(OutEdge& out, std::int64_t now) {
  for (auto& d : dispatches_) {
    // The send time of one envelope in kHopSampleEvery at most (HopSampler),
    // taken as it leaves (after any wait for credit): its consumer measures
    // the edge's latency and this replica's hold on it from it
    // (hop_figures.hpp). The others carry none, not even one inherited.
    const bool stamp = setup_.hop_figures && send_sampler_.due();
    if (stamp) {
      if (now == 0) now = setup_.clock();
      send_sampler_.taken(now);
    }
    if (stamp || d.envelope.header().sent_ns != 0) {
      EnvelopeHeader h = d.envelope.header();
      h.sent_ns = stamp ? now : 0;
      d.envelope = std::move(d.envelope).with_header(h);
    }
    effects_.deliver(out.to_node, d.replica, out.edge, std::move(d.envelope));
  }
  dispatches_.clear();
  out.stats->sent.store(out.router.offered(), std::memory_order_relaxed);
  out.stats->dropped.store(out.router.dropped(), std::memory_order_relaxed);
  if (out.router.too_large() != out.stats->too_large.load(std::memory_order_relaxed)) {
    out.stats->too_large.store(out.router.too_large(), std::memory_order_relaxed);
    const graph::Edge& edge = (*setup_.graph).edges[static_cast<std::size_t>(out.edge)];
    log("an envelope on " + (*setup_.graph).from_name(edge) + " -> " + (*setup_.graph).to_name(edge) +
        " has a payload over transport.max_message_bytes (" +
        std::to_string(setup_.max_remote_payload_bytes) +
        ") and could only go to a consumer replica on another unit: dropped (" +
        std::to_string(out.router.too_large()) + " so far)");
  }
  out.stats->waiting.store(out.router.waiting(), std::memory_order_relaxed);
  out.stats->peak_in_flight.store(static_cast<std::uint64_t>(out.router.peak_outstanding()),
                                  std::memory_order_relaxed);
  out.stats->peak_retained.store(out.router.peak_retained(), std::memory_order_relaxed);
  out.stats->replayed.store(out.router.replayed(), std::memory_order_relaxed);
}

void ReplicaCore::ack(int edge, int replica, int credits, int released, double service_ns) {
  const int index = out_index_[static_cast<std::size_t>(edge)];
  if (index >= 0) {
    OutEdge& out = out_[static_cast<std::size_t>(index)];
    dispatches_.clear();
    out.router.on_ack(replica, credits, released, service_ns, dispatches_);
    send_dispatches(out);
    if (finished_) {
      send_due_marks();
    } else if (!blocked()) {
      resume();
    }
  }
  end_event();
}

// -- snapshots of a stateful stage ----------------------------------------
//
// A stateful stage's state is snapshotted every snapshot_every inputs or
// snapshot_interval_ns at work, and when the replica idles. A snapshot
// covers every input with an ordinal before the one it was taken at, less
// those waiting in join sets (held anyway by their sets' origins): those
// inputs are released upstream only once the snapshot is stored off the unit
// (snapshot_stored). A snapshot is sent only once every output made before
// it has been accepted downstream, since a restored replica cannot make
// those again. So what a producer still retains for this replica is exactly
// what its restored successor must see again: a failover restores the latest
// stored snapshot and the producers replay the rest. The keys the snapshot
// lists are dropped as duplicates if a producer replays them (a release can
// be in flight when the unit dies); what the replay makes again that
// consumers already have, they drop as duplicates of a moved producer.

bool ReplicaCore::restore_state() {
  const ReplicaSnapshot& snapshot = *setup_.restore;
  Status s;
  try {
    s = stage_->restore(snapshot.state);
  } catch (const std::exception& ex) {
    s = Status::error(std::string("threw: ") + ex.what());
  } catch (...) {
    s = Status::error("threw an unknown exception");
  }
  if (!s.ok()) {
    fail_permanently("stage '" + decl().id + "' replica " + std::to_string(setup_.replica) +
                     " could not restore its state after " + (snapshot.handover ? "a move: " : "a failover: ") +
                     s.message());
    return false;
  }
  // Work in hand it took over goes on (a call it asked for in restore).
  if (!source_) take_wake_request();
  // A move's successor counts on in its own process's figures (in the
  // drained replica's process they are the same ones; the coordinator adds
  // up each process's); one placed after a failover takes over the counts.
  if (snapshot.handover) return true;  // nothing lost: nothing comes again
  setup_.stats->processed.store(snapshot.processed, std::memory_order_relaxed);
  for (const auto& [name, value] : snapshot.counters) setup_.stats->counter(name).store(value, std::memory_order_relaxed);
  for (const auto& seen : snapshot.seen) {
    if (seen.edge < 0 || static_cast<std::size_t>(seen.edge) >= in_index_.size()) continue;
    const int index = in_index_[static_cast<std::size_t>(seen.edge)];
    if (index < 0) continue;
    auto& ups = in_[static_cast<std::size_t>(index)].upstream;
    if (seen.producer < 0 || static_cast<std::size_t>(seen.producer) >= ups.size()) continue;
    Upstream& up = ups[static_cast<std::size_t>(seen.producer)];
    // The newest keys, as many as the ring holds, oldest first.
    const std::size_t n = std::min(seen.streams.size(), up.seen.size());
    const std::size_t skip = seen.streams.size() - n;
    up.next = 0;
    up.filled = 0;
    for (std::size_t i = skip; i < seen.streams.size(); ++i) {
      up.seen[up.next] = Key{seen.streams[i], seen.seqs[i]};
      if (++up.next == up.seen.size()) up.next = 0;
      ++up.filled;
    }
    expect_duplicates(up, setup_.epoch);
  }
  setup_.stats->counter("restored").fetch_add(1, std::memory_order_relaxed);
  return true;
}

void ReplicaCore::maybe_snapshot(bool idle) {
  if (!stateful_ || !stage_ || failed_ || finished_ || snapshot_taken_ == next_ordinal_) return;
  if (snapshots_pending_.size() >= kMaxPendingSnapshots) return;
  // A source never idles in this sense: its cadence is its steps.
  if (source_ && idle) return;
  const std::int64_t now = setup_.clock();
  const std::uint64_t every = source_ ? source_snapshot_every_ : static_cast<std::uint64_t>(setup_.snapshot_every);
  const bool due = idle || next_ordinal_ - snapshot_taken_ >= every || now - snapshot_ns_ >= setup_.snapshot_interval_ns;
  if (due) take_snapshot();
}

void ReplicaCore::take_snapshot() {
  ReplicaSnapshot snapshot;
  snapshot.id = snapshot_id_ + 1;
  try {
    if (!stage_->snapshot(snapshot.state)) {
      log("snapshot() returned false after it had returned true: the stage's inputs are released without one");
      stateful_ = false;
      return;
    }
  } catch (const std::exception& ex) {
    log(std::string("snapshot() threw: ") + ex.what());
    return;
  } catch (...) {
    log("snapshot() threw");
    return;
  }
  snapshot_id_ = snapshot.id;
  snapshot.processed = setup_.stats->processed.load(std::memory_order_relaxed);
  for (const auto& [name, value] : setup_.stats->counters()) snapshot.counters.emplace_back(name, value);
  // Keys waiting in join sets are not in the stage's state: a replay must
  // bring them again.
  std::unordered_map<Key, int, KeyHash> joined;
  for (const auto& [key, set] : joins_) {
    for (const auto& e : set.by_port) {
      if (e.payload()) ++joined[Key{e.header().stream, e.header().seq}];
    }
  }
  for (const auto& in : in_) {
    for (std::size_t f = 0; f < in.upstream.size(); ++f) {
      const Upstream& up = in.upstream[f];
      if (up.filled == 0) continue;
      ReplicaSnapshot::Seen seen;
      seen.edge = in.edge;
      seen.producer = static_cast<int>(f);
      seen.streams.reserve(up.filled);
      seen.seqs.reserve(up.filled);
      // Oldest first: from the slot after the newest, around the ring.
      const std::size_t start = up.filled < up.seen.size() ? 0 : up.next;
      for (std::size_t i = 0; i < up.filled; ++i) {
        const Key& k = up.seen[(start + i) % up.seen.size()];
        if (!joined.empty() && joined.count(k) > 0) continue;
        seen.streams.push_back(k.stream);
        seen.seqs.push_back(k.seq);
      }
      snapshot.seen.push_back(std::move(seen));
    }
  }
  snapshots_pending_.push_back(
      PendingSnapshot{snapshot.id, next_ordinal_, std::make_unique<ReplicaSnapshot>(std::move(snapshot))});
  snapshot_taken_ = next_ordinal_;
  snapshot_ns_ = setup_.clock();
  send_snapshots();
}

void ReplicaCore::send_snapshots() {
  std::uint64_t accepted = EdgeRouter::kNoOrigin;
  for (const auto& out : out_) accepted = std::min(accepted, out.router.oldest_held_origin());
  std::size_t newest = snapshots_pending_.size();
  for (std::size_t i = 0; i < snapshots_pending_.size(); ++i) {
    if (snapshots_pending_[i].unsent && snapshots_pending_[i].ordinal <= accepted) newest = i;
  }
  if (newest == snapshots_pending_.size()) return;
  // Older unsent ones are covered by it.
  std::unique_ptr<ReplicaSnapshot> snapshot = std::move(snapshots_pending_[newest].unsent);
  snapshots_pending_.erase(std::remove_if(snapshots_pending_.begin(), snapshots_pending_.begin() + newest,
                                          [](const PendingSnapshot& p) { return p.unsent != nullptr; }),
                           snapshots_pending_.begin() + newest);
  setup_.stats->counter("snapshots").fetch_add(1, std::memory_order_relaxed);
  effects_.snapshot(std::move(*snapshot));
}

void ReplicaCore::snapshot_stored(std::uint64_t id) {
  while (!snapshots_pending_.empty() && snapshots_pending_.front().id <= id && !snapshots_pending_.front().unsent) {
    snapshot_frontier_ = std::max(snapshot_frontier_, snapshots_pending_.front().ordinal);
    snapshots_pending_.erase(snapshots_pending_.begin());
  }
  // Producers may be waiting for these releases: an idle replica sends them now.
  if (queue_.empty()) {
    for (auto& in : in_) flush_acks(in, true);
  }
  end_event();
}

// -- stages with work in hand ---------------------------------------------
//
// A stage that keeps work between its inputs (a batch it decodes step by
// step, votes it waits on until a deadline) calls defer_until(t) in a step;
// the replica calls it again without an input at t, once its outputs have
// room, after the inputs queued by then. Its outputs are numbered like a
// source's steps, so a snapshot taken after them waits until they are
// accepted downstream. While it has work in hand the replica does not
// finish, even once its inputs have ended.

void ReplicaCore::take_wake_request() {
  if (!defer_called_) return;
  // The last call of the step stands; 0 (or less) cancels.
  wake_at_ = std::max<std::int64_t>(defer_until_, 0);
  defer_until_ = 0;
  defer_called_ = false;
}

void ReplicaCore::schedule_wake() {
  if (wake_scheduled_at_ > 0 && wake_scheduled_at_ <= wake_at_) return;
  wake_scheduled_at_ = wake_at_;
  effects_.schedule(kWake, wake_at_);
}

void ReplicaCore::wake() {
  if (wake_at_ == 0 || !started_ || finished_ || failed_ || !stage_ || source_) return;
  std::int64_t t = setup_.clock();
  if (t < wake_at_) return;  // end_event schedules it again
  if (!queue_.empty() || blocked()) return;  // resume() calls again
  wake_at_ = 0;
  inputs_.reset(-1, nullptr);
  outputs_.reset(EnvelopeHeader{});
  origin_ = next_ordinal_;
  const std::int64_t t0 = t;
  Status s = call_process(t0);
  t = setup_.clock();
  if (s.is_error()) {
    setup_.stats->errors.fetch_add(1, std::memory_order_relaxed);
    log("replica " + std::to_string(setup_.replica) + " failed on a step without input: " + s.message());
    restart_with_backoff();
    return;
  }
  if (!outputs_.items().empty()) ++next_ordinal_;
  ++steps_;
  setup_.stats->busy_ns.fetch_add(t - t0, std::memory_order_relaxed);
  setup_.stats->record_service(t - t0);
  emit_outputs();
  // Its inputs may have ended while it worked: with nothing left in hand, it ends.
  maybe_finish();
}

// -- sources ------------------------------------------------------------

void ReplicaCore::schedule_pull(std::int64_t at_ns) {
  if (pull_scheduled_) return;
  pull_scheduled_ = true;
  effects_.schedule(kPull, at_ns);
}

void ReplicaCore::pull() {
  if (!started_ || finished_ || source_done_ || !source_ || pull_scheduled_) return;
  // A source is busy from the start of a pull to its end (its steps and
  // handing on their outputs): two clock reads a pull, not two a step.
  struct BusyUntilReturn {
    const ReplicaSetup& setup;
    std::int64_t since = setup.clock();
    explicit BusyUntilReturn(const ReplicaSetup& s) : setup(s) { setup.stats->step_since_ns.store(since, std::memory_order_relaxed); }
    ~BusyUntilReturn() {
      setup.stats->busy_ns.fetch_add(setup.clock() - since, std::memory_order_relaxed);
      setup.stats->step_since_ns.store(0, std::memory_order_relaxed);
    }
  } busy{setup_};
  for (int k = 0; k < kPullBatch; ++k) {
    if (stop_requested()) {
      source_done_ = true;
      break;
    }
    if (backoff_ || (!live_ && any_blocked())) return;  // resumed by an ack or the backoff
    defer_until_ = 0;
    inputs_.reset(-1, nullptr);
    outputs_.reset(EnvelopeHeader{});
    // A source's steps are numbered like a stage's inputs: the origin of
    // what each makes, so a snapshot knows when all before it is accepted.
    origin_ = next_ordinal_;
    Status s = call_process();
    if (s.is_end_of_stream()) {
      source_done_ = true;
      break;
    }
    if (s.is_error()) {
      setup_.stats->errors.fetch_add(1, std::memory_order_relaxed);
      log("source replica " + std::to_string(setup_.replica) + " failed: " + s.message());
      if (consecutive_failures_ + 1 >= kMaxSourceFailures) {
        fail_permanently("source '" + decl().id + "' failed " + std::to_string(kMaxSourceFailures) +
                         " times in a row: " + s.message());
        break;
      }
      restart_with_backoff();
      return;
    }
    // Only a step that produced resets the count: a restarted source that
    // returns nothing and fails again is still failing.
    if (!outputs_.items().empty()) {
      ++steps_;
      ++next_ordinal_;
      consecutive_failures_ = 0;
      setup_.stats->processed.fetch_add(1, std::memory_order_relaxed);
    }
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

/// Logs at most once a second per replica; the rest are counted.
void ReplicaCore::log(const std::string& message) {
  const std::int64_t now = setup_.clock();
  if (now - last_log_ns_ < 1'000'000'000 && last_log_ns_ != 0) {
    ++suppressed_logs_;
    return;
  }
  std::string extra;
  if (suppressed_logs_ > 0) extra = " (" + std::to_string(suppressed_logs_) + " similar messages suppressed)";
  effects_.log(decl().id + ": " + message + extra);
  last_log_ns_ = now;
  suppressed_logs_ = 0;
}


}  // namespace swarmflow::runtime
