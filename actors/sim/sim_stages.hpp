#pragma once
// The sim pack's stage classes; see sim.hpp for their ports and parameters.

#include <atomic>
#include <cstdint>
#include <random>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <swarmflow/schema/blob_generated.h>
#include <swarmflow/schema/consensus_generated.h>
#include <swarmflow/stage.hpp>

namespace swarmflow::sim {

class SimSource final : public Stage {
 public:
  void setup(StageSpec& s) override;
  Status start(StageContext& ctx) override;
  Status process(Inputs& in, Outputs& out, StageContext& ctx) override;
  /// Its position (envelopes made, each stream's next sequence number): a
  /// failover restarts it elsewhere from there.
  bool snapshot(std::string& out) const override;
  Status restore(const std::string& state) override;

 private:
  OutputPort<schema::Blob> out_;
  std::int64_t count_ = 0;
  double rate_hz_ = 0;
  std::int64_t payload_bytes_ = 0;
  std::int64_t streams_ = 1;
  std::uint64_t first_stream_ = 0;
  std::vector<std::uint64_t> next_seq_;
  std::int64_t produced_ = 0;
  std::int64_t start_ns_ = 0;
  bool rebase_pacing_ = false;  ///< restored: paced from the next step on
};

/// The right answer of sim.work for (stream, seq) when it answers (answer_confidence > 0).
std::uint64_t sim_answer(std::uint64_t stream, std::uint64_t seq);

class SimWork final : public Stage {
 public:
  void setup(StageSpec& s) override;
  Status start(StageContext& ctx) override;
  Status process(Inputs& in, Outputs& out, StageContext& ctx) override;

 private:
  /// Takes a voter's decision (the re-sync contract, docs/consensus.md).
  void resync(const schema::VoteDecision& decision);

  InputPort<schema::Blob> in_;
  InputPort<schema::VoteDecision> agreed_;
  OutputPort<schema::Blob> out_;
  double service_us_ = 0;
  double jitter_us_ = 0;
  std::int64_t fail_every_ = 0;
  double answer_confidence_ = 0;
  std::int64_t fault_replica_ = -1;
  std::int64_t lie_every_ = 0;
  double lie_confidence_ = 0.99;
  double slow_us_ = 0;
  std::int64_t crash_after_ = 0;
  bool faulty_ = false;
  std::int64_t seen_ = 0;
  std::mt19937_64 rng_;
  /// Its own latest answers, (stream, seq) -> key, for re-sync; at most kAnswersKept.
  std::unordered_map<std::uint64_t, std::uint64_t> answers_;
  std::vector<std::uint64_t> answer_ring_;
  std::size_t answer_next_ = 0;
  std::atomic<std::int64_t>* lies_ = nullptr;
  std::atomic<std::int64_t>* silenced_ = nullptr;
  std::atomic<std::int64_t>* resynced_ = nullptr;
};

/// Per-stream sequence checking, shared by sim.sink and tests.
class SequenceChecker {
 public:
  enum class Verdict { in_order, gap, late, duplicate };
  /// Classifies seq on stream; a gap marks the skipped numbers as missing, a
  /// later arrival of a missing number is late (reordered), anything else seen
  /// before is a duplicate.
  Verdict observe(std::uint64_t stream, std::uint64_t seq, std::uint64_t* newly_missing);
  /// Its state as text ("stream next missing..." per line), and back.
  std::string save() const;
  bool load(const std::string& text);
  /// One stream's state, taken out (false: none), or put in.
  bool take(std::uint64_t stream, std::string& out);
  bool give(std::uint64_t stream, const std::string& text);

 private:
  struct StreamState {
    std::uint64_t next = 0;
    std::unordered_set<std::uint64_t> missing;
  };
  std::unordered_map<std::uint64_t, StreamState> streams_;
};

class SimSink final : public Stage {
 public:
  void setup(StageSpec& s) override;
  Status start(StageContext& ctx) override;
  Status process(Inputs& in, Outputs& out, StageContext& ctx) override;
  /// Per-stream sequence state: a failover carries on checking.
  bool snapshot(std::string& out) const override;
  Status restore(const std::string& state) override;
  /// Its state is per stream: keyed by stream, a stream can go to another
  /// replica and be checked on there.
  const char* state_key() const override { return "stream"; }
  bool take_key(std::uint64_t key, std::string& out) override;
  Status give_key(std::uint64_t key, const std::string& state) override;

 private:
  InputPort<schema::Blob> in_;
  double service_us_ = 0;
  SequenceChecker checker_;
  std::atomic<std::int64_t>* received_ = nullptr;
  std::atomic<std::int64_t>* lost_ = nullptr;
  std::atomic<std::int64_t>* duplicate_ = nullptr;
  std::atomic<std::int64_t>* reordered_ = nullptr;
};

/// Waits `us` microseconds: sleeps for long waits, spins for short ones.
void simulate_service(double us);

}  // namespace swarmflow::sim
