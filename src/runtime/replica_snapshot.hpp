#pragma once
// The state of one stateful replica at a point where every input before it
// has been processed: what a replica placed anew after a failover starts
// from. Replay from the producers covers what came after it.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace swarmflow::runtime {

/// Keys with their state, handed from one replica to another.
using KeyStates = std::vector<std::pair<std::uint64_t, std::string>>;

struct ReplicaSnapshot {
  /// Per replica, increasing: the coordinator keeps the latest.
  std::uint64_t id = 0;
  /// What the stage's snapshot() wrote.
  std::string state;
  /// The replica's figures, so that the run's report goes on counting.
  std::uint64_t processed = 0;
  std::vector<std::pair<std::string, std::int64_t>> counters;
  /// The keys processed from each producer replica before the snapshot (the
  /// last ones, as many as duplicate detection remembers): a producer may
  /// replay some of them, and the restored replica drops those.
  struct Seen {
    int edge = 0;
    int producer = 0;
    std::vector<std::uint64_t> streams;
    std::vector<std::uint64_t> seqs;
  };
  std::vector<Seen> seen;
  /// Handed over by a drained replica to its successor (a move): nothing
  /// was lost, so nothing is replayed and no duplicate is expected.
  bool handover = false;
  /// It had finished before it drained: no successor runs it again.
  bool finished = false;
  /// Keys it gave away as it drained, each with its state (Stage::take_key),
  /// for the replicas that take them; `state` no longer holds them.
  std::vector<std::pair<std::uint64_t, std::string>> keys;

  std::size_t bytes() const {
    std::size_t n = state.size();
    for (const auto& s : seen) n += 16 * s.streams.size();
    return n;
  }
};

}  // namespace swarmflow::runtime
