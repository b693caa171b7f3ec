#pragma once
// The decisions of one replica, without actors: it takes events (envelopes
// delivered, acks, end of stream, ticks, placement changes) and carries out
// its stage's steps, and everything it wants done outside goes through
// `ReplicaEffects`. It owns the input queue, the credit and release ledger of
// its in-edges, the routers of its out-edges, the join table, the retry
// policy and the duplicate detection after a failover. Time comes from an
// injected clock, so tests drive it on a simulated one.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <swarmflow/registry.hpp>
#include <swarmflow/runtime.hpp>
#include <swarmflow/stage.hpp>

#include "graph/graph.hpp"
#include "runtime/replica_snapshot.hpp"
#include "runtime/replica_stats.hpp"
#include "runtime/ring_queue.hpp"
#include "runtime/routing.hpp"

namespace swarmflow::runtime {

/// What a replica asks of the world around it. The stage host carries these
/// out with actor messages and the transport; tests record them.
class ReplicaEffects {
 public:
  virtual ~ReplicaEffects() = default;
  /// Sends `envelope` on `edge` to replica `replica` of stage `node`.
  virtual void deliver(int node, int replica, int edge, Envelope&& envelope) = 0;
  /// Returns `credits` and releases `released` envelopes to producer replica
  /// `replica` of stage `node` on `edge`, with this replica's service time.
  virtual void ack(int node, int replica, int edge, int credits, int released, double service_ns) = 0;
  /// Ends `edge` towards replica `replica` of stage `node` (after everything
  /// delivered before it).
  virtual void end_of_stream(int node, int replica, int edge) = 0;
  /// Asks for `tick(kind, ...)` at `at_ns` (at once when it is not later than now).
  virtual void schedule(int kind, std::int64_t at_ns) = 0;
  /// The replica has left: its stage is stopped, its marks are sent and its
  /// consumers have released everything it sent them (nothing to replay).
  virtual void finished() = 0;
  /// The stage cannot run; the run is to fail with `message` and stop.
  virtual void failed(const std::string& message) = 0;
  /// A line for the log (already rate limited).
  virtual void log(const std::string& line) = 0;
  /// Keeps `snapshot` off this unit; `ReplicaCore::snapshot_stored(id)`
  /// follows once it is (only then are the inputs it covers released).
  virtual void snapshot(ReplicaSnapshot&& snapshot) = 0;

  // -- moves (docs/placement.md "What a move guarantees")
  /// Tells consumer replica `replica` of `node`, draining for a move, that
  /// this replica sends it nothing more on `edge` (after all it sent).
  virtual void drain_mark(int /*node*/, int /*replica*/, int /*edge*/) {}
  /// Tells consumer replica `replica` of `node` that this replica drains and
  /// sends it nothing more on `edge`: what it owes goes back at once.
  virtual void owed_mark(int /*node*/, int /*replica*/, int /*edge*/) {}
  /// Tells producer replica `replica` of `node` that this replica, drained,
  /// has returned every credit and release it owed it on `edge`.
  virtual void drained_mark(int /*node*/, int /*replica*/, int /*edge*/) {}
  /// This replica has drained: everything it was sent is processed, its
  /// outputs accepted and released downstream, its acks sent. `handover`
  /// (its stage's state, if it keeps one, and its counters) is what its
  /// successor starts from. Nothing happens in it after this.
  virtual void drained(ReplicaSnapshot&& /*handover*/) {}
  /// Holds the replica's thread for `ns` more after a step, as a unit slowed
  /// by `speed:` or `scenario:` would take that much longer over it (a stage
  /// that reads StageContext::speed() applies the speed itself). Sleeps.
  virtual void hold(std::int64_t ns);
};

/// What a replica needs to know of the run; all of it outlives the replica.
struct ReplicaSetup {
  const graph::Graph* graph = nullptr;
  const Registry* registry = nullptr;
  int node = 0;
  int replica = 0;
  double speed = 1.0;  ///< its unit's speed factor
  /// Its unit's speed factor as it changes (`scenario:`); `speed` when null.
  const std::atomic<double>* speed_now = nullptr;
  ReplicaStats* stats = nullptr;
  int unit = 0;                   ///< its unit, for the trace
  TraceBuffer* trace = nullptr;   ///< `--trace`: where sampled steps go; null: none
  bool hop_figures = true;        ///< record residence and hop latency (RuntimeOptions::hop_figures)
  std::vector<EdgeSideStats*> in_stats;   ///< by edge id, null where not an in-edge
  std::vector<EdgeSideStats*> out_stats;  ///< by edge id, null where not an out-edge
  /// Which consumer replicas of each out-edge (by edge id) are on other units.
  std::vector<std::vector<bool>> remote_consumers;
  /// By edge id: its consumer's replicas that take work and its keys' hash
  /// ring (EdgeRouter::set_serving); {0, 0}: all of them.
  std::vector<std::pair<int, int>> consumer_serving;
  std::size_t max_remote_payload_bytes = 0;
  /// Callbacks of `Runtime::subscribe`, by output port.
  const std::vector<std::vector<Runtime::Subscriber>>* subscribers = nullptr;
  const std::atomic<bool>* stop_requested = nullptr;
  std::function<std::int64_t()> clock;  ///< steady time in ns
  /// A stateful stage (one whose snapshot() returns true) snapshots after
  /// this many inputs or this long at work, and when it idles; 0 = never
  /// (a replica no failover could move elsewhere).
  int snapshot_every = 0;
  std::int64_t snapshot_interval_ns = 100'000'000;
  /// The state to start from: the latest snapshot of this replica where it
  /// ran before (a failover), or null.
  std::shared_ptr<const ReplicaSnapshot> restore;
  /// It follows a replica that drained for a move in this process: its
  /// figures go on from that one's.
  bool successor = false;
  /// The placement epoch the replica starts in (a restored one counts the
  /// duplicates its restore leads to under that failover).
  std::uint32_t epoch = 0;
};

/// A new placement, as one replica sees it (all pairs are (edge id, replica)).
struct PlacementChange {
  /// By edge id: which consumer replicas of this replica's out-edges are on
  /// other units now (as ReplicaSetup::remote_consumers). An edge whose entry
  /// is missing or empty keeps its flags.
  std::vector<std::vector<bool>> remote_consumers;
  /// Out-edges' consumer replicas placed anew: replay to them, and if this
  /// replica had already ended that edge, the end-of-stream mark follows the
  /// replay again.
  std::vector<std::pair<int, int>> moved_consumers;
  /// In-edges' producer replicas placed anew: the new incarnation starts with
  /// fresh credits and sends again what its inputs' replay makes; envelopes it
  /// sends again that this replica already processed are dropped as duplicates.
  std::vector<std::pair<int, int>> moved_producers;
  /// In-edges' producer replicas gone for good (a source on a dead unit): they
  /// count as ended.
  std::vector<std::pair<int, int>> lost_producers;
  /// Out-edges' consumer replicas that now drain for a move (edge, replica):
  /// nothing new goes to them, and they are told so (drain_mark).
  std::vector<std::pair<int, int>> draining_consumers;
  /// Out-edges' consumer replicas that drained and took up their new
  /// placement (a clean hand-over): they take work again there once their
  /// drained mark has come.
  std::vector<std::pair<int, int>> handed_over_consumers;
  /// Out-edges whose consumer's keys were placed anew (edge, key map).
  std::vector<std::pair<int, std::shared_ptr<const KeyMap>>> key_maps;
  /// Out-edges whose consumer gained or lost a replica that takes work:
  /// (edge, (active, ring)) as ReplicaSetup::consumer_serving.
  std::vector<std::pair<int, std::pair<int, int>>> serving;
  /// This replica drains for a move.
  bool drain = false;
  /// ... and gives these keys to other replicas: their state goes with them
  /// (ReplicaSnapshot::keys), where its stage keeps state per key.
  std::vector<std::uint64_t> leaving_keys;
  /// ... or every key it holds state for (it is removed).
  bool leaving_all_keys = false;
  /// The placement epoch it starts (its failover): what it replays and the
  /// duplicates it leads to are counted as `failover.<epoch>.replayed` and
  /// `failover.<epoch>.duplicates` in the replica's counters.
  std::uint32_t epoch = 0;
};

/// One replica's decisions. Not thread-safe: one event at a time, as an actor
/// delivers them.
class ReplicaCore final : public StageContext {
 public:
  /// Kinds of `ReplicaEffects::schedule` and `tick`.
  /// kFlush: an idle replica returns the credits and releases it still owes
  /// (its producers may be waiting on them: a release waits until outputs are
  /// credited, so batching must not hold one back forever).
  /// kWake: a stage (not a source) with work in hand asked, through
  /// defer_until, to be called again without an input.
  enum Tick : int { kPull = 0, kResume = 1, kJoin = 2, kFlush = 3, kWake = 4 };
  /// How long an idle replica waits before it returns what it owes (one
  /// whose last step took longer returns it at once).
  static constexpr std::int64_t kIdleFlushNs = 1'000'000;

  ReplicaCore(ReplicaSetup setup, ReplicaEffects& effects);
  ~ReplicaCore() override;

  // -- events: each ends with the releases it made due sent --------------
  /// Makes and starts the stage; a source begins producing.
  void start();
  /// An envelope from producer replica `from` on `edge`. A batch is one event.
  void deliver(int edge, int from, Envelope&& envelope);
  void deliver(int edge, int from, std::vector<Envelope>& batch);
  void ack(int edge, int replica, int credits, int released, double service_ns);
  void end_of_stream(int edge, int from);
  void tick(int kind);
  /// A source ends its stream now.
  void stop_source();
  /// Producer replica `from` on `edge` sends this (draining) replica nothing more.
  void drain_mark(int edge, int from);
  /// Producer replica `from` on `edge` drains: what this replica owes it goes back at once.
  void owed_mark(int edge, int from);
  /// Consumer replica `replica` on out-edge `edge`, drained, owes nothing more.
  void drained_mark(int edge, int replica);
  /// Snapshot `id` (and every one before it) is stored off the unit: the
  /// inputs it covers may be released.
  void snapshot_stored(std::uint64_t id);
  /// Replicas this one exchanges envelopes with were placed anew (their unit
  /// died): replays to moved consumers, forgets what it owed moved or lost
  /// producers, and drops what a moved producer sends again as duplicates.
  void placement_changed(const PlacementChange& change);
  /// Takes over keys handed on by another replica, with their state
  /// (Stage::give_key), before their next envelopes.
  void give_keys(const KeyStates& keys);

  /// The stage is done: its inputs ended, it is stopped, its marks are sent.
  bool has_finished() const { return finished_; }
  /// Draining for a move, and whether it has drained (handed over).
  bool draining() const { return draining_; }
  bool has_drained() const { return drained_; }
  /// `ReplicaEffects::finished()` was called: the stage is done and every
  /// consumer released everything it was sent, so nothing is left to replay.
  bool has_left() const { return left_; }
  /// Steps finished since the start: envelopes (or joined sets) processed,
  /// or a source's steps that produced.
  std::uint64_t steps() const { return steps_; }
  /// Envelopes a moved producer sent again that this replica had processed.
  std::uint64_t duplicates_dropped() const { return duplicates_dropped_; }
  /// Whether the stage is stateful and snapshots (see ReplicaSetup::snapshot_every).
  bool snapshots() const { return stateful_; }
  /// Snapshots taken and not yet stored.
  std::size_t snapshots_pending() const { return snapshots_pending_.size(); }
  /// A stage (not a source) asked to be called again at this time; 0 = no.
  std::int64_t wake_at() const { return wake_at_; }
  /// Envelopes taken but not processed (not counting end-of-stream marks).
  std::uint64_t queued() const { return data_queued_; }
  /// Processed envelopes whose release has not been sent yet.
  std::size_t unreleased() const;
  const EdgeRouter* router(int edge) const;

  // -- StageContext -------------------------------------------------------
  const std::string& stage_id() const override;
  int replica() const override { return setup_.replica; }
  int replica_count() const override;
  std::int64_t now_ns() const override { return setup_.clock(); }
  double speed() const override {
    speed_asked_ = true;
    return setup_.speed_now != nullptr ? setup_.speed_now->load(std::memory_order_relaxed) : setup_.speed;
  }
  bool stop_requested() const override;
  void defer_until(std::int64_t t_ns) override {
    defer_until_ = t_ns;
    defer_called_ = true;
  }
  void set_live(bool live) override { live_ = live; }
  std::atomic<std::int64_t>& counter(std::string_view name) override { return setup_.stats->counter(name); }
  int producers(int port) const override;

 private:
  /// What identifies an envelope to duplicate detection.
  struct Key {
    std::uint64_t stream = 0;
    std::uint64_t seq = 0;
    bool operator==(const Key& o) const { return stream == o.stream && seq == o.seq; }
  };
  struct KeyHash {
    std::size_t operator()(const Key& k) const { return static_cast<std::size_t>(mix64(k.stream) ^ k.seq); }
  };
  /// Keys a moved producer may send again, with how often each was processed.
  struct Dedup {
    std::unordered_map<Key, int, KeyHash> processed;
    std::size_t left = 0;  ///< arrivals still to check
    std::atomic<std::int64_t>* counter = nullptr;  ///< failover.<epoch>.duplicates, or null
  };
  /// One producer replica of an in-edge.
  struct Upstream {
    std::vector<Key> seen;  ///< ring of the last processed keys
    std::size_t next = 0;   ///< slot of seen the next key goes to
    std::size_t filled = 0;
    std::uint32_t generation = 0;  ///< bumped each time the producer is placed anew
    bool ended = false;            ///< its end of stream has counted
    bool marked = false;           ///< draining: it sends this replica nothing more
    /// It drains for a move: what this replica owes it goes back at once,
    /// not in batches (until it sends again, as its successor).
    bool prompt = false;
    std::unique_ptr<Dedup> dedup;  ///< while its new incarnation may send duplicates
  };
  struct InEdge {
    int edge;
    int port;
    int threshold;
    bool feedback;                ///< closes a cycle: end of stream does not wait for it
    std::vector<int> unacked;     ///< per upstream replica: processed, credit not yet returned
    std::vector<int> releasable;  ///< per upstream replica: released here, release not yet sent
    EdgeSideStats* stats;
    std::vector<Upstream> upstream;  ///< per upstream replica
  };
  struct OutEdge {
    int edge;
    int port;
    int to_node;
    int consumers;
    EdgeRouter router;
    EdgeSideStats* stats;
    std::vector<bool> eos_sent;  ///< per consumer replica: the mark went to its current placement
    std::vector<bool> eos_due;   ///< per consumer replica: the mark is to follow its replay
    /// Per consumer replica: a move under way (kPaused, kMarkIn, kSwitched).
    std::vector<std::uint8_t> handover;
    std::vector<bool> handover_remote;  ///< its new placement is on another unit
  };
  /// OutEdge::handover bits: paused; its drained mark came; its new placement
  /// is known; it drains again once this hand-over is done.
  static constexpr std::uint8_t kPaused = 1, kMarkIn = 2, kSwitched = 4, kAgain = 8;
  struct Item {
    int in;    ///< index into in_
    int from;  ///< upstream replica
    Envelope envelope;
    bool eos;
    std::uint32_t generation;  ///< of the producer's placement it came from
  };
  /// Envelopes of one key, one per input port, waiting for the rest.
  struct JoinSet {
    std::vector<Envelope> by_port;
    std::int64_t created_ns = 0;
    std::uint64_t origin = 0;  ///< ordinal of its first envelope: it holds the release of all from there
  };
  /// Processed envelopes from one producer with consecutive ordinals whose
  /// release has not been sent (a run, so a chain keeps one entry).
  struct Held {
    std::uint64_t first;  ///< ordinal of the first
    std::uint64_t count;
    int in;    ///< index into in_
    int from;  ///< upstream replica
  };

  const config::StageDecl& decl() const;
  void end_event();
  /// Credits or releases are due to some producer and not sent yet.
  bool owes_acks() const;

  // -- life cycle
  Status make_stage();
  void stop_stage();
  void resume();
  void maybe_finish();
  void finish();
  /// Calls effects_.finished() once finished and everything sent is released.
  void maybe_leave();
  /// Sends the marks due after a replay once the replay has left.
  void send_due_marks();
  void fail_permanently(const std::string& message);

  // -- input side
  void enqueue(int edge, int from, Envelope&& e, std::int64_t now);
  void after_input(std::int64_t now);
  bool blocked() const;
  void drain(std::int64_t now = 0);
  bool process_item(Item& item, std::int64_t& t);
  /// Records a processed envelope's key in its producer's ring.
  void remember(Upstream& up, const Item& item);
  /// Whether an arrival from a moved producer was processed already.
  bool is_duplicate(Upstream& up, const EnvelopeHeader& h);
  /// Returns credit for a consumed item, unless its producer was placed anew since.
  void settle_item(const Item& item);
  /// Arrivals from `up` that are among its remembered keys are duplicates
  /// (for as many arrivals as it remembers).
  void expect_duplicates(Upstream& up, std::uint32_t epoch);
  /// Drops what this replica owes producer replica `from` of in-edge `in_index`.
  void forget_producer(int in_index, int from);
  /// Runs the stage's step that began at `t0` (-1: not read yet).
  Status call_process(std::int64_t t0 = -1);
  bool on_failure(const Status& s);
  /// Counts a dead letter; a streak of them fails the stage for good.
  void give_up(const Status& last);
  void restart_with_backoff();

  // -- joins
  std::uint64_t join_key(const EnvelopeHeader& h) const;
  void join_insert(Item& item, std::int64_t& t);
  void expire_joins(std::int64_t now, bool all);
  void expire_oldest_join(std::int64_t& t);
  void expire(JoinSet& set, std::int64_t& t);
  void schedule_join_tick();
  void process_joined(JoinSet& set, bool partial, std::int64_t& t);
  std::uint64_t oldest_join_origin() const;

  // -- credits and releases
  void acknowledge(int in_index, int from);
  std::uint64_t release_frontier() const;
  void settle_ledger();
  void flush_releases();
  void send_ack(InEdge& in, int from);
  void flush_acks(InEdge& in, bool all);

  // -- output side
  bool any_blocked() const;
  bool any_waiting() const;
  /// Offers the step's outputs to their routers; `now`, when not 0, is the
  /// time the step ended (a send time then costs no clock read).
  void emit_outputs(std::int64_t now = 0);
  /// Hands the routers' dispatches to the effects: one in kHopSampleEvery at
  /// most gets its send time stamped (hop_figures, HopSampler), the rest none.
  void send_dispatches(OutEdge& out, std::int64_t now = 0);

  // -- snapshots of a stateful stage
  /// Restores setup_.restore into the stage just made; false if it failed.
  bool restore_state();
  /// Takes a snapshot when one is due (`idle`: the replica has nothing to do).
  void maybe_snapshot(bool idle);
  void take_snapshot();
  /// Sends the newest snapshot whose outputs are all accepted downstream.
  void send_snapshots();

  // -- stages with work in hand (defer_until outside a source)
  /// Takes a defer_until the stage made in its last step.
  void take_wake_request();
  void schedule_wake();
  /// Calls the stage without an input once its wake time has come and its
  /// outputs have room.
  void wake();

  // -- moves
  OutEdge* out_edge(int edge);
  /// A paused consumer replica takes work again once it drained and its new placement is known.
  void maybe_resume_consumer(OutEdge& out, int replica);
  /// Hands over once a draining replica has done everything it was sent.
  void check_drained();
  /// Adds a processed envelope's time to its key's (a keyed stage with replicas).
  void record_key(const EnvelopeHeader& h, std::int64_t ns, std::int64_t now);
  void flush_key_figures();
  /// Keys whose time one replica tracks; past this its keys are not reassigned.
  static constexpr std::size_t kTrackedKeys = 1024;

  // -- sources
  void schedule_pull(std::int64_t at_ns);
  void pull();

  void log(const std::string& message);

  ReplicaSetup setup_;
  ReplicaEffects& effects_;
  bool source_ = false;
  bool sink_ = false;

  std::unique_ptr<Stage> stage_;
  StageSpec spec_;
  Inputs inputs_;
  Outputs outputs_;

  std::vector<int> in_index_;
  std::vector<int> out_index_;
  std::vector<InEdge> in_;
  std::vector<std::string> producer_ids_;  ///< by index into in_: the producing stage's id
  std::vector<OutEdge> out_;
  std::vector<Dispatch> dispatches_;
  RingQueue<Item> queue_;

  RingQueue<Held> ledger_;
  std::size_t ledger_count_ = 0;  ///< envelopes in ledger_
  std::uint64_t next_ordinal_ = 0;
  std::uint64_t origin_ = 0;  ///< ordinal of the input whose outputs are being emitted

  std::uint64_t data_queued_ = 0;  ///< envelopes in queue_, not counting end-of-stream marks
  config::JoinDecl join_;
  std::vector<bool> join_ports_;  ///< input ports a complete set must have
  std::unordered_map<std::uint64_t, JoinSet> joins_;
  bool join_tick_scheduled_ = false;
  bool flush_scheduled_ = false;
  std::size_t join_limit_ = 0;
  int eos_remaining_ = 0;
  bool started_ = false;
  bool finished_ = false;
  /// Keys this replica gives away as it drains.
  std::vector<std::uint64_t> leaving_keys_;
  bool leaving_all_keys_ = false;  ///< it is removed: every key it holds leaves
  /// The stage read speed() in the step under way: it applies the speed itself.
  mutable bool speed_asked_ = false;
  bool left_ = false;
  std::uint64_t duplicates_dropped_ = 0;
  std::uint64_t steps_ = 0;
  HopSampler send_sampler_;
  std::int64_t last_step_ns_ = 0;  ///< how long the last step took (an idle replica's acks: end_event)  ///< picks the envelopes handed to the effects that carry a send time
  std::int64_t last_input_ns_ = -1;  ///< when envelopes were last delivered
  std::int64_t input_gap_ns_ = 0;    ///< the time between the last two deliveries (an idle replica's acks)
  std::atomic<std::int64_t>* duplicates_counter_ = nullptr;
  bool failed_ = false;
  bool source_done_ = false;
  bool live_ = false;
  bool backoff_ = false;
  bool pull_scheduled_ = false;
  std::int64_t defer_until_ = 0;
  bool defer_called_ = false;           ///< defer_until was called in the step under way
  std::int64_t wake_at_ = 0;            ///< a non-source's requested call, 0 = none
  std::int64_t wake_scheduled_at_ = 0;  ///< the kWake tick asked for, 0 = none
  int attempts_ = 0;
  int consecutive_failures_ = 0;
  int dead_letter_streak_ = 0;
  double service_ns_ = 0;
  std::int64_t last_log_ns_ = 0;
  std::uint64_t suppressed_logs_ = 0;

  // -- moves
  bool draining_ = false;
  bool drained_ = false;
  bool drain_marks_sent_ = false;  ///< its consumers were told it sends nothing more
  bool can_snapshot_ = false;  ///< its stage's snapshot() returned true at start
  /// A keyed stage with replicas measures each key's time (KeyFigures).
  bool key_figures_ = false;
  std::unordered_map<std::uint64_t, std::int64_t> key_busy_;
  std::uint64_t key_steps_ = 0;
  bool key_overflow_ = false;
  std::int64_t key_published_ns_ = 0;

  // -- snapshots
  bool stateful_ = false;
  std::uint64_t snapshot_id_ = 0;
  std::uint64_t snapshot_taken_ = 0;     ///< ordinals before this are in a snapshot taken
  std::uint64_t snapshot_frontier_ = 0;  ///< ordinals before this are in a snapshot stored
  std::int64_t snapshot_ns_ = 0;         ///< when the last one was taken
  /// A source's cadence: an eighth of what its consumers remember for
  /// duplicate detection, since a restarted source sends again all it made
  /// after its latest stored snapshot.
  std::uint64_t source_snapshot_every_ = 1;
  struct PendingSnapshot {
    std::uint64_t id;
    std::uint64_t ordinal;
    /// Taken, not sent yet: it goes once every output made before it is
    /// accepted downstream (a restored replica could not make those again).
    std::unique_ptr<ReplicaSnapshot> unsent;
  };
  std::vector<PendingSnapshot> snapshots_pending_;
};

/// Incomplete join sets a replica with this queue capacity may hold.
std::size_t join_set_limit(int capacity);

}  // namespace swarmflow::runtime
