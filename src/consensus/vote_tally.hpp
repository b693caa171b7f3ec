#pragma once
// The vote of a voter stage, as pure logic: candidates from N replicas for
// the same (stream, seq), each with a vote key and a confidence, become one
// decision. No actors, no clocks: time comes in as `now` with every event,
// so it is tested on a simulated clock (docs/consensus.md).

#include <cstddef>
#include <cstdint>
#include <deque>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace swarmflow::consensus {

/// How a tally decides; every value is settable in the pipeline file.
struct TallySettings {
  int voters = 3;                ///< replicas expected to vote on every key
  /// Share of the total weight the agreeing votes must exceed: 0.5 to 1.
  /// The total counts each voter that has not voted yet at its most
  /// (max_confidence), so a decision is made as soon as no later vote could
  /// change it, and two answers can never both reach quorum.
  double quorum = 0.5;
  /// A vote weighs its confidence, clamped to 0..max_confidence: a replica
  /// that claims 0.99 weighs no more than one that claims max_confidence.
  double max_confidence = 0.9;
  /// ... and raised to at least this (0..max_confidence): with both equal the
  /// vote is a plain majority, for results whose confidences do not compare
  /// (a detector's score of its least sure finding).
  double min_confidence = 0.0;
  /// The leader's vote passes at once when its (unclamped) confidence is at
  /// least this; 0 = no fast path. The other votes confirm it or correct it.
  double leader_threshold = 0.0;
  /// A key without quorum is decided this long after its first vote (by the
  /// heaviest answer, flagged without quorum); silent voters count as lost.
  std::int64_t deadline_ns = 50'000'000;
  /// Weight of the newest outcome in each voter's reliability (an EWMA of
  /// 1 for agreeing with the decision, 0 for dissenting or being silent).
  double reliability_alpha = 0.1;
  /// Another voter becomes leader once its reliability is above the
  /// leader's by more than this (hysteresis, so the leader does not flap).
  double leader_margin = 0.05;
  /// Keys being voted on at once, at most; beyond, the oldest is decided
  /// early as at its deadline (counted in `evicted`).
  std::size_t max_pending = 4096;
};

/// One candidate: voter `voter` (0..voters-1) says `key` for (stream, seq).
struct Vote {
  std::uint64_t stream = 0;
  std::uint64_t seq = 0;
  int voter = 0;
  std::uint64_t key = 0;
  double confidence = 0;
};

/// What a tally emits for one (stream, seq).
struct Decision {
  std::uint64_t stream = 0;
  std::uint64_t seq = 0;
  std::uint64_t key = 0;        ///< the answer decided
  int winner = -1;              ///< the agreeing voter whose candidate is passed on (the heaviest)
  double agreeing_weight = 0;   ///< weight of the votes for `key`
  double total_weight = 0;      ///< weight cast, plus the most each voter not heard from could add
  std::vector<int> agreeing;    ///< voters that voted `key`
  std::vector<int> dissenters;  ///< voters that voted another key
  std::vector<int> silent;      ///< voters not heard from when it was decided
  int leader = -1;              ///< the leader when it was decided
  bool quorum = false;          ///< agreeing weight over quorum x total
  bool fast = false;            ///< the leader's answer, passed at once, not yet confirmed
  bool correction = false;      ///< overturns the fast decision made before for this key
  bool at_deadline = false;     ///< decided at the deadline (or evicted), not by the votes alone
  std::int64_t waited_ns = 0;   ///< from the first vote to the decision
};

/// A key whose vote is over: decided, and every voter heard or its deadline passed.
struct Finished {
  std::uint64_t stream = 0;
  std::uint64_t seq = 0;
  std::uint64_t key = 0;  ///< the final answer (after any correction)
};

/// Figures of a tally since it was made.
struct TallyCounts {
  std::uint64_t decisions = 0;       ///< keys decided (a fast decision counts once, with its correction)
  std::uint64_t without_quorum = 0;  ///< final decisions whose answer had no quorum
  std::uint64_t fast = 0;            ///< decisions passed at once on the leader's word
  std::uint64_t confirmed = 0;       ///< fast decisions the other votes confirmed
  std::uint64_t corrections = 0;     ///< fast decisions the other votes overturned
  std::uint64_t leader_changes = 0;
  std::uint64_t late_votes = 0;      ///< votes for a key already finished (ignored)
  std::uint64_t repeated_votes = 0;  ///< a second vote of one voter for one key (ignored)
  std::uint64_t unknown_voters = 0;  ///< votes of a voter outside 0..voters-1 (ignored)
  std::uint64_t evicted = 0;         ///< keys decided early because too many were pending
};

/// Confidence-weighted vote with quorum, deadline, reliability, a leader and
/// its fast path. Not thread-safe.
///
/// A key is *decided* (one Decision) when the heaviest answer's weight is
/// over quorum x total (quorum), or when every voter has voted, or at its
/// deadline (without quorum, unless it has it). Ties between answers of
/// equal weight go to the answer of the more reliable voter, then to the
/// voter with the lower index. A key is *finished* once it is decided and
/// every voter has voted, or at its deadline: then each voter's reliability
/// moves towards 1 if it voted the decided answer, towards 0 otherwise
/// (silent included), and the leader is chosen again. A vote for a finished
/// key is late and ignored. With the fast path, the leader's confident vote
/// is decided at once (`fast`); when the key is decided by the other votes
/// later, the same answer confirms it silently and another emits a
/// `correction`.
class VoteTally {
 public:
  explicit VoteTally(TallySettings settings);

  /// Takes one vote at `now`; appends the decisions it makes.
  void add(const Vote& vote, std::int64_t now, std::vector<Decision>& out);
  /// Decides and finishes what is due at `now` (deadlines).
  void advance(std::int64_t now, std::vector<Decision>& out);
  /// Decides and finishes every pending key now, as at its deadline (the end of the input).
  void flush(std::int64_t now, std::vector<Decision>& out);
  /// The earliest deadline of a pending key, or 0 when none is pending.
  std::int64_t next_deadline() const;

  /// Moves the keys finished since the last call to `out` (replacing its
  /// contents): their candidates may be let go, their answers are final.
  void take_finished(std::vector<Finished>& out) {
    out.clear();
    out.swap(finished_now_);
  }

  /// Whether the vote on (stream, seq) is over (a vote for it would be late).
  bool finished(std::uint64_t stream, std::uint64_t seq) const { return finished_.count(Key{stream, seq}) > 0; }

  int leader() const { return leader_; }
  double reliability(int voter) const { return reliability_[static_cast<std::size_t>(voter)]; }
  std::size_t pending() const { return pending_.size(); }
  const TallyCounts& counts() const { return counts_; }
  const TallySettings& settings() const { return settings_; }
  /// A vote's weight: its confidence clamped to min_confidence..max_confidence (NaN counts as 0).
  double weight(double confidence) const;

 private:
  struct Key {
    std::uint64_t stream;
    std::uint64_t seq;
    bool operator==(const Key& o) const { return stream == o.stream && seq == o.seq; }
  };
  struct KeyHash {
    std::size_t operator()(const Key& k) const;
  };
  struct Pending {
    std::int64_t first_ns = 0;
    std::vector<bool> voted;           ///< by voter
    std::vector<std::uint64_t> keys;   ///< by voter, where voted
    std::vector<double> weights;       ///< by voter, where voted
    int votes = 0;
    bool decided = false;              ///< a final decision was made
    bool fast_sent = false;            ///< a fast decision went out
    std::uint64_t fast_key = 0;
    std::uint64_t decided_key = 0;
  };

  /// The heaviest answer of `p` (ties: reliability, then index), with its weight.
  std::uint64_t heaviest(const Pending& p, double* weight) const;
  double total_weight(const Pending& p) const;
  Decision make_decision(const Key& k, const Pending& p, std::uint64_t answer, std::int64_t now) const;
  /// Decides `p` if the votes allow it (or `forced`, at a deadline).
  void maybe_decide(const Key& k, Pending& p, std::int64_t now, bool forced, std::vector<Decision>& out);
  /// Updates reliabilities and the leader, and forgets the key.
  void finish(const Key& k, const Pending& p);
  void choose_leader();

  TallySettings settings_;
  std::unordered_map<Key, Pending, KeyHash> pending_;
  std::deque<std::pair<std::int64_t, Key>> order_;  ///< (first vote, key), oldest first; may hold finished keys
  std::unordered_set<Key, KeyHash> finished_;       ///< recently finished keys, to recognise late votes
  std::deque<Key> finished_order_;
  std::vector<double> reliability_;
  std::vector<Finished> finished_now_;
  int leader_ = 0;
  TallyCounts counts_;
};

}  // namespace swarmflow::consensus
