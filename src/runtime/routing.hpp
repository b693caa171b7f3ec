#pragma once
// Routing and credit-based flow control of one edge at one producer replica.
// Pure logic: no actors, no clocks; the stage host feeds it events and sends
// what it returns.

#include <algorithm>
#include <cstdint>
#include <deque>
#include <memory>
#include <unordered_map>
#include <vector>

#include <swarmflow/envelope.hpp>

#include "config/pipeline_spec.hpp"
#include "runtime/ring_queue.hpp"

namespace swarmflow::runtime {

/// Maps a stream id to one of N replicas so that a stream always lands on the
/// same replica, and adding a replica moves only about 1/N of the streams.
class ConsistentHashRing {
 public:
  explicit ConsistentHashRing(int replicas = 1, int virtual_nodes = 64);
  int replica_for(std::uint64_t stream) const;
  int replicas() const { return replicas_; }

 private:
  struct Point {
    std::uint64_t hash;
    int replica;
  };
  int replicas_;
  std::vector<Point> ring_;
};

/// Keys of a keyed stage placed by measured load rather than by the hash
/// ring: key -> replica (placement's key reassignment, docs/placement.md).
using KeyMap = std::unordered_map<std::uint64_t, int>;

/// 64-bit mix (splitmix64 finaliser), used for stream hashing.
std::uint64_t mix64(std::uint64_t x);

/// What a consumer replica looks like to a producer's router.
struct ReplicaView {
  int credits = 0;           ///< envelopes the producer may still send it
  double service_ns = 0;     ///< smoothed service time reported in acks; 0 = unknown
};

/// Index of the replica with the lowest expected delay, (outstanding + 1) x
/// service time, among those with credit; ties go to the first at or after
/// `start`. -1 when none has credit. Unknown service times count as the mean
/// of the known ones.
int pick_least_delay(const std::vector<ReplicaView>& replicas, int capacity, int start);

/// One envelope to send to one consumer replica.
struct Dispatch {
  int replica;
  Envelope envelope;
};

/// Credit-based router of one edge at one producer replica.
///
/// Each consumer replica grants `capacity` credits. An envelope is sent only
/// against a credit. Without credit the overflow policy applies:
/// - block: the envelope waits here and `blocked()` is true until it has left;
///   the producer stops taking input meanwhile, so waiting is bounded by one step;
/// - drop_newest: it waits here if fewer than `capacity` wait, else it is dropped;
/// - drop_oldest: it waits here; if `capacity` already wait, the oldest is dropped.
/// Sent envelopes are kept until the consumer releases them (for replay). At
/// most `retention_limit(capacity)` are kept per consumer replica: a replica
/// with that many unreleased envelopes counts as having no credit, so what a
/// router retains is bounded by credits, whatever the consumer does. When a
/// consumer replica is placed anew, replace() sends what it retained for it
/// again, before anything new for that replica.
class EdgeRouter {
 public:
  /// `keyed`: each envelope goes to the replica its `key` field hashes to.
  /// `retain`: the most envelopes kept for one replica; 0 = retention_limit(capacity).
  EdgeRouter(int replicas, int capacity, config::Overflow overflow, bool keyed,
             config::KeyField key = config::KeyField::stream, std::size_t retain = 0);

  /// `fanout: all`: offer() makes one copy of each envelope per consumer
  /// replica (sharing the payload), each bound to its replica as a keyed
  /// envelope is; each copy counts once in `offered`, and is sent, waits or
  /// is dropped on its own. Up to `capacity` copies per replica may wait.
  void set_fanout(bool all) { fanout_ = all; }
  bool fanout() const { return fanout_; }

  /// Offers a new envelope; appends at most one dispatch (one per replica
  /// with `set_fanout(true)`). With `may_wait`
  /// false (a live source), a `block` edge drops an envelope without credit
  /// at once instead of holding it. `origin` names the input the producer
  /// made it from (an increasing number), so that the producer can tell
  /// which inputs still have outputs waiting here (`oldest_waiting_origin`).
  void offer(Envelope envelope, std::vector<Dispatch>& out, bool may_wait = true, std::uint64_t origin = 0);
  /// A consumer returned `credits` and released `released` envelopes; appends
  /// the waiting envelopes that can go now.
  void on_ack(int replica, int credits, int released, double service_ns, std::vector<Dispatch>& out);
  /// Drops everything waiting (counted); used when a run is torn down.
  void drop_waiting();
  /// Which consumer replicas are on other units, and the largest payload the
  /// transport carries there. An envelope with a larger payload goes only to
  /// a replica in this unit (the one with the most credit, or its key's);
  /// with none it is dropped and counted in `too_large` (and `dropped`).
  void set_remote(std::vector<bool> remote, std::size_t max_remote_payload_bytes);
  /// Consumer replica `replica` was placed anew (its unit died): everything
  /// retained for it (sent, not released) is sent again to the new replica,
  /// first and in the order first sent, before anything else for it; its
  /// credits start afresh at `capacity`; overflow policies never drop these
  /// envelopes. `remote` says whether the new replica is on another unit.
  /// Appends what can go now to `out`; the rest goes as credits return.
  /// Its service time counts as unknown again. A replayed envelope whose
  /// payload is too large for the transport, now that its replica is on
  /// another unit, cannot go: it counts in `too_large` and `dropped` (and
  /// no longer in `dispatched`).
  void replace(int replica, bool remote, std::vector<Dispatch>& out);

  // -- moves (docs/placement.md "What a move guarantees")
  /// Consumer replica `replica` is draining for a move: nothing new goes to
  /// it (keyed envelopes for it wait here, within the overflow policy;
  /// others go to the other replicas) until resume().
  void pause(int replica);
  /// The drained replica `replica` takes work again (at its new placement:
  /// `remote` says whether that is on another unit). Everything it was sent
  /// was credited and released before it drained, so it starts with full
  /// credit and an unknown service time. Appends what can go now.
  void resume(int replica, bool remote, std::vector<Dispatch>& out);
  bool paused(int replica) const { return paused_[static_cast<std::size_t>(replica)] != 0; }
  /// Of a stage with `replicas: {min, max}`: replicas [0, active) take
  /// work and the others stand by (nothing goes to them); keyed envelopes
  /// hash over replicas [0, ring) where the key map does not place them
  /// (ring <= active). Keyed envelopes that wait here go where their key
  /// goes now: the placement changes the ring only after every replica that
  /// gives keys away has drained. Appends what can go now.
  void set_serving(int active, int ring, std::vector<Dispatch>& out);
  bool standby(int replica) const { return standby_[static_cast<std::size_t>(replica)] != 0; }
  /// Keys placed by load (null: the hash ring alone). Keyed envelopes that
  /// wait here go where the new map says: their replica drained first, so
  /// nothing for their key is in flight anywhere.
  void set_key_map(std::shared_ptr<const KeyMap> keys);
  /// The replica a keyed envelope with this key goes to.
  int replica_for_key(std::uint64_t key) const;

  /// True while a `block` edge holds an envelope for credit.
  /// Envelopes waiting only for a replica that drains for a move do not
  /// block until `capacity` of them wait (a move is short; the producer
  /// goes on with the other replicas' keys meanwhile).
  bool blocked() const {
    if (overflow_ != config::Overflow::block || waiting_.empty()) return false;
    if (paused_count_ == 0) return true;
    // While a replica drains, envelopes that may go anywhere wait too.
    const std::size_t held = waiting_for_paused() + static_cast<std::size_t>(unfixed_waiting_);
    return waiting_.size() > held || held >= static_cast<std::size_t>(capacity_);
  }
  std::size_t waiting() const { return waiting_.size(); }
  /// The smallest `origin` among envelopes not yet accepted downstream:
  /// waiting here, waiting to be sent again, or sent and not yet credited by
  /// their consumer (which credits an envelope once it has processed it).
  /// kNoOrigin when there are none.
  std::uint64_t oldest_held_origin() const;
  static constexpr std::uint64_t kNoOrigin = ~std::uint64_t{0};
  std::uint64_t offered() const { return offered_; }
  std::uint64_t dispatched() const { return dispatched_; }
  std::uint64_t dropped() const { return dropped_; }
  std::uint64_t too_large() const { return too_large_; }
  /// Envelopes sent again by replace() (not counted in `dispatched`).
  std::uint64_t replayed() const { return replayed_; }
  /// Envelopes replace() has still to send again to `replica`.
  std::size_t replaying(int replica) const { return replay_[static_cast<std::size_t>(replica)].size(); }
  /// Envelopes replace() has still to send again, to all replicas.
  std::size_t replaying() const { return replay_pending_; }
  /// Everything kept for replay: sent and not released, and what is still
  /// to be sent again. Zero once every consumer has released everything.
  std::size_t retained() const;
  int credits(int replica) const { return views_[static_cast<std::size_t>(replica)].credits; }
  /// The most envelopes ever sent to one replica and not yet credited back.
  int peak_outstanding() const { return peak_outstanding_; }
  std::size_t in_flight(int replica) const { return in_flight_[static_cast<std::size_t>(replica)].size(); }
  /// The most envelopes ever retained for one replica (sent, not yet released).
  std::size_t peak_retained() const { return peak_retained_; }
  /// The most envelopes retained for one replica: `retention_limit(capacity)`.
  std::size_t retention_limit() const { return retention_limit_; }
  int replicas() const { return static_cast<int>(views_.size()); }
  /// Counts what a predecessor of this producer replica counted (a move's
  /// successor goes on counting where it left off).
  void carry_counts(std::uint64_t offered, std::uint64_t dropped, std::uint64_t too_large, std::uint64_t replayed) {
    offered_ += offered;
    dispatched_ += offered - std::min(offered, dropped);
    dropped_ += dropped;
    too_large_ += too_large;
    replayed_ += replayed;
  }

 private:
  struct Waiting {
    int target;  ///< fixed replica (keyed edges, payloads too large for other units), -1 = any
    Envelope envelope;
    std::uint64_t origin;
  };
  /// Has credit and room to retain one more envelope.
  bool can_take(int replica) const {
    const auto r = static_cast<std::size_t>(replica);
    return views_[r].credits > 0 && in_flight_[r].size() < retention_limit_ && paused_[r] == 0 && standby_[r] == 0;
  }
  /// Can take a new envelope: can_take() and no replay is pending for it.
  bool can_take_new(int replica) const {
    return can_take(replica) && (replaying_replicas_ == 0 || replay_[static_cast<std::size_t>(replica)].empty());
  }
  /// The views with no credit where retention is full, a replay is pending
  /// or (with `exclude_fixed`) a fixed envelope waits: scratch_, or views_
  /// when none.
  const std::vector<ReplicaView>& usable_views(bool exclude_fixed) {
    const bool any_fixed = exclude_fixed && unfixed_waiting_ < static_cast<int>(waiting_.size());
    return any_fixed || full_replicas_ > 0 || replaying_replicas_ > 0 || paused_count_ > 0 || standby_count_ > 0
               ? restricted_views(any_fixed)
               : views_;
  }
  const std::vector<ReplicaView>& restricted_views(bool exclude_fixed);
  int choose(const Envelope& e);
  /// choose() among the replicas no fixed envelope waits for.
  int choose_free(const Envelope& e);
  void wait(int target, Envelope envelope, std::uint64_t origin);
  /// Uncounts a waiting envelope that leaves the list.
  void forget(const Waiting& w);
  /// Waiting keyed envelopes go where their key goes now.
  void retarget_waiting();
  /// The replica in this unit with the most credit; -1 when there is none.
  int local_replica() const;
  std::uint64_t key_of(const Envelope& e) const;
  /// offer() of one envelope (or copy) bound to `target` (-1 = any replica).
  void offer_one(Envelope envelope, std::vector<Dispatch>& out, bool may_wait, std::uint64_t origin, int target);
  /// How many envelopes may wait here under a dropping policy.
  std::size_t wait_limit() const { return static_cast<std::size_t>(capacity_) * (fanout_ ? views_.size() : 1); }
  bool try_send(int target, Envelope& e, std::uint64_t origin, std::vector<Dispatch>& out);
  /// Hands waiting envelopes to replicas with credit, oldest first.
  void send_waiting(std::vector<Dispatch>& out);
  /// Sends what is pending replay to `replica` while it can take it.
  void send_replay(int replica, std::vector<Dispatch>& out);
  /// Keeps `e`, just sent to `replica`, until it is released.
  void retain(int replica, const Envelope& e, std::uint64_t origin);

  int capacity_;
  config::Overflow overflow_;
  bool keyed_;
  bool fanout_ = false;
  config::KeyField key_;
  ConsistentHashRing ring_;
  std::vector<ReplicaView> views_;
  std::vector<RingQueue<Envelope>> in_flight_;
  std::vector<RingQueue<Envelope>> replay_;  ///< by replica: to send again, oldest first
  /// The origins of in_flight_ and replay_, entry for entry.
  std::vector<RingQueue<std::uint64_t>> flight_origin_;
  std::vector<RingQueue<std::uint64_t>> replay_origin_;
  /// By replica: in_flight_ entries, from the oldest, that its consumer has
  /// credited (processed); the rest are not accepted yet.
  std::vector<std::size_t> credited_;
  std::size_t replay_pending_ = 0;            ///< envelopes in replay_
  int replaying_replicas_ = 0;                ///< replicas with a replay pending
  std::uint64_t replayed_ = 0;
  std::deque<Waiting> waiting_;
  std::vector<int> fixed_waiting_;  ///< by replica: waiting envelopes fixed to it
  int unfixed_waiting_ = 0;         ///< waiting envelopes that may go anywhere
  std::vector<ReplicaView> scratch_;
  int next_start_ = 0;
  std::uint64_t offered_ = 0;
  std::uint64_t dispatched_ = 0;
  std::uint64_t dropped_ = 0;
  std::uint64_t too_large_ = 0;
  int peak_outstanding_ = 0;
  std::size_t retention_limit_;
  std::size_t peak_retained_ = 0;
  int full_replicas_ = 0;  ///< replicas with retention_limit_ envelopes retained
  std::vector<bool> remote_;  ///< by replica; empty = all in this unit
  std::vector<char> paused_;  ///< by replica: draining for a move
  int paused_count_ = 0;
  std::vector<char> standby_;  ///< by replica: stands by (set_serving)
  int standby_count_ = 0;
  std::shared_ptr<const KeyMap> key_map_;
  std::size_t waiting_for_paused() const {
    std::size_t n = 0;
    for (std::size_t r = 0; r < paused_.size(); ++r) {
      if (paused_[r] != 0) n += static_cast<std::size_t>(fixed_waiting_[r]);
    }
    return n;
  }
  std::size_t max_remote_payload_bytes_ = 0;
};

/// The most envelopes a router retains for one consumer replica of an edge of
/// `capacity`: the `capacity` it may have in flight, plus as many processed
/// but not yet released (their outputs still wait for credit downstream).
/// A consumer that joins its inputs may also hold up to `join_sets` sets.
std::size_t retention_limit(int capacity, std::size_t join_sets = 0);

/// Incomplete join sets a replica may hold per credit of its input queue;
/// beyond that the oldest expires early, so memory stays bounded.
constexpr std::size_t kJoinSetsPerCredit = 4;

/// When a consumer should return credits: after `threshold` processed
/// envelopes of one producer, at most half the capacity so the producer never
/// runs dry while an ack is in flight.
int ack_threshold(int capacity);

}  // namespace swarmflow::runtime
