#pragma once
// The adaptive placement policy: the cluster's measured load in, moves out.
// Pure: time comes in with each view, and the only state kept between calls
// is how long each condition has held and when the last move was (hysteresis
// in time, and the cooldown), so the same views give the same moves.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "config/pipeline_spec.hpp"

namespace swarmflow::placement {

/// A keyed stage's keys move only while its busiest replica is at least
/// this busy (load over its share of its unit's capacity): below it, the
/// drains a reassignment costs win nothing.
constexpr double kKeysBusyFloor = 0.25;

/// The policy's knobs, from `placement:` in the pipeline file
/// (docs/placement.md); `key_imbalance`, `scale_in_below` and
/// `backlog_fraction` are fixed.
struct PolicySettings {
  /// A unit busier than this (its worker threads' busy fraction) is hot.
  double rebalance_above = 0.85;
  /// A move must leave its target below rebalance_above - hysteresis, and a
  /// key reassignment must cut the busiest replica's load by this fraction:
  /// what is moved cannot make the next hot spot at once.
  double hysteresis = 0.10;
  /// A condition (a hot unit, a growing queue, idle replicas, uneven keys)
  /// must hold this long before anything moves.
  std::int64_t sustain_ns = 500'000'000;
  /// After a move, nothing else moves for this long (the view must show the
  /// move's effect first).
  std::int64_t cooldown_ns = 1'000'000'000;
  /// A keyed stage's keys are reassigned when its busiest replica carries
  /// this much more than its share (0.25: 25% over), and is at least
  /// kKeysBusyFloor busy.
  double key_imbalance = 0.25;
  /// A stage with more than `replicas.min` replicas loses one when all of
  /// them stay less busy than this.
  double scale_in_below = 0.30;
  /// A replica's queue deeper than this fraction of its capacity counts as
  /// backlog (work waiting).
  double backlog_fraction = 0.5;

  /// From `placement:` in the pipeline file.
  static PolicySettings from(const config::PlacementDecl& decl);
};

/// What one key of a keyed stage costs its replica: the busy fraction of
/// one nominal-speed thread (arrival rate x service time at speed 1).
struct KeyLoad {
  std::uint64_t key = 0;
  double load = 0;
};

/// One replica's measured load, as its unit reports it.
struct ReplicaLoadView {
  int stage = 0;
  int replica = 0;
  double queue_depth = 0;
  double service_ns = 0;  ///< per envelope, measured on its unit (at its speed)
  double arrival_hz = 0;
  /// Share of one of its unit's threads its steps took in the interval (the
  /// step under way included): what it costs where it is, even when its
  /// steps are longer than the interval and arrivals come in bursts.
  double busy = 0;
  std::vector<KeyLoad> keys;  ///< keyed stages: the keys it saw and their cost
};

struct UnitLoadView {
  double utilisation = 0;  ///< busy fraction of its worker threads, 0..1
  bool usable = true;      ///< alive and taking work
  double speed = 0;        ///< its speed factor now (`scenario:`); 0: as declared
};

/// The cluster as the coordinator sees it at one moment.
struct LoadView {
  std::vector<UnitLoadView> units;        ///< by unit index
  std::vector<std::vector<int>> unit_of;  ///< [stage][replica]: unit (negative: none)
  std::vector<ReplicaLoadView> replicas;
  /// By stage: the runtime cannot move its replicas (a stage in a cycle, a
  /// sink that keeps no state it could hand over). Empty: none.
  std::vector<char> immovable;
  /// By stage: its keys cannot go to other replicas (a stateful stage, or
  /// more keys than are measured). Empty: none.
  std::vector<char> keys_fixed;
  /// By stage: its replicas are not removed (it keeps state per replica,
  /// or a sink's output stays where it is). Empty: any may be.
  std::vector<char> no_scale_in;
  /// By stage: the only unit a replica may be added on (the unit where its
  /// next replica stands by, for a stage that cannot move); -1 or empty: any.
  std::vector<int> add_only_on;
  /// Whether replicas may be added and removed.
  bool scaling = true;
};

enum class MoveKind { move_replica, add_replica, remove_replica, reassign_keys };

const char* to_string(MoveKind kind);

/// One change of placement.
struct Move {
  MoveKind kind = MoveKind::move_replica;
  int stage = 0;
  int replica = 0;    ///< the replica moved or removed; for add, the new one's index
  int from_unit = -1;  ///< move, remove
  int to_unit = -1;    ///< move, add
  /// reassign_keys: each key's new replica (keys not listed keep their owner).
  std::vector<std::pair<std::uint64_t, int>> keys;
  std::string why;  ///< for the log and the report
};

/// The adaptive policy. One `decide` per load report interval; at most one
/// move comes out of each, and none during the cooldown after a move.
///
/// What moves, in this order of preference:
/// 1. A unit hot for `sustain_ns`: its most loaded movable replica goes to
///    the allowed unit with the lowest load after taking it, if that stays
///    below rebalance_above - hysteresis and the move lowers the hotter of
///    the two. Then, if no replica can move, a replica is added elsewhere
///    (up to `replicas.max`).
/// 2. A keyed stage whose busiest replica (load over its share of its
///    unit's capacity, at least kKeysBusyFloor) is `key_imbalance` over the stage's mean for
///    `sustain_ns`: its keys are reassigned by measured load, heaviest first
///    to the replica with the most room (largest-processing-time first), if
///    that cuts the busiest replica's load by `hysteresis`.
/// 3. A stage whose replicas' queues hold a backlog for `sustain_ns` while
///    some allowed unit has room: one replica is added there (up to max).
/// 4. A stage above `replicas.min` whose replicas all stay less busy than
///    `scale_in_below` for `sustain_ns`: its last replica is removed.
///
/// A stage pinned to one unit never moves; every move keeps to the stage's
/// `placement.units`. Capacity of a unit is threads x speed, as in
/// place_static.
class Rebalancer {
 public:
  Rebalancer(const config::PipelineSpec& spec, PolicySettings settings);

  std::vector<Move> decide(const LoadView& view, std::int64_t now_ns);

  /// When the last move was decided (0: none yet).
  std::int64_t last_move_ns() const { return last_move_ns_; }

 private:
  /// Since when a condition has held; 0 while it does not.
  struct Since {
    std::int64_t at = 0;
    bool held(bool now_true, std::int64_t now, std::int64_t sustain) {
      if (!now_true) {
        at = 0;
        return false;
      }
      if (at == 0) at = now;
      return now - at >= sustain;
    }
  };

  double capacity(int unit) const;
  double speed(int unit) const;
  bool allowed(int stage, int unit) const;
  bool movable(int stage) const;
  /// A replica's work in nominal-thread busy fraction (speed-independent).
  double work(const ReplicaLoadView& r, int unit) const;

  bool hot_unit_move(const LoadView& view, std::vector<double>& load, std::int64_t now, Move* out);
  /// The move that relieves unit `hottest` best, if any does.
  bool relieve(const LoadView& view, const std::vector<double>& load, int hottest, Move* out) const;
  bool key_move(const LoadView& view, std::int64_t now, Move* out);
  bool scale_out(const LoadView& view, std::vector<double>& load, std::int64_t now, Move* out);
  bool scale_in(const LoadView& view, std::int64_t now, Move* out);

  const config::PipelineSpec& spec_;
  PolicySettings settings_;
  std::vector<Since> hot_;        ///< by unit
  std::vector<Since> uneven_;     ///< by stage
  std::vector<Since> backlog_;    ///< by stage
  std::vector<Since> idle_;       ///< by stage
  std::int64_t last_move_ns_ = 0;
  // Of the view being decided on.
  std::vector<double> speeds_;
  std::vector<char> immovable_;
  std::vector<char> keys_fixed_;
};

/// Keys assigned to replicas by load, largest first to the replica with the
/// most room (its load over its capacity lowest after taking the key); ties
/// to the lower replica index. `capacity[r]` > 0. Returns each key's replica.
std::vector<std::pair<std::uint64_t, int>> assign_keys_by_load(std::vector<KeyLoad> keys,
                                                                const std::vector<double>& capacity);

/// Moves keys one at a time from the busiest replica (load over capacity) to
/// where that lowers the busiest most, while it does: the fewest keys moved.
/// `owner[i]` is key i's replica, updated; `load` each replica's now.
/// Returns the busiest replica's load over its capacity after.
double fewest_moves(const std::vector<KeyLoad>& keys, const std::vector<double>& capacity, std::vector<double> load,
                    std::vector<int>& owner);

}  // namespace swarmflow::placement
