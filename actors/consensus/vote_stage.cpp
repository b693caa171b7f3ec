// consensus.vote: feeds the tally the candidates as they come, emits what
// it decides, and counts what the report shows (docs/consensus.md).

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <swarmflow/schema/consensus_generated.h>
#include <swarmflow/stage.hpp>

#include "consensus/consensus.hpp"
#include "consensus/vote_tally.hpp"

namespace swarmflow::consensus {

namespace {


/// Bounds of the added-latency histogram, in ns: 10 per decade from 1 us to
/// 10 s. Each decision's wait counts in `vote_latency_le_<bound>` (or
/// `vote_latency_le_inf`); the run report reads the bounds from the names.
constexpr int kLatencyBuckets = 71;

std::int64_t latency_bound_ns(int bucket) {
  return static_cast<std::int64_t>(std::llround(1000.0 * std::pow(10.0, bucket / 10.0)));
}

class VoteStage final : public Stage {
 public:
  void setup(StageSpec& s) override;
  Status start(StageContext& ctx) override;
  Status process(Inputs& in, Outputs& out, StageContext& ctx) override;

 private:
  struct Key {
    std::uint64_t stream;
    std::uint64_t seq;
    bool operator==(const Key& o) const { return stream == o.stream && seq == o.seq; }
  };
  struct KeyHash {
    std::size_t operator()(const Key& k) const { return std::hash<std::uint64_t>()(k.stream * 0x9e3779b97f4a7c15ULL ^ k.seq); }
  };

  /// The voter index of a producer replica, or -1 when there are more than expected.
  int voter_of(std::string_view stage, int replica);
  /// `stage#replica` of a voter, also of one not heard from yet.
  std::string voter_name(int voter) const;
  void emit(const Decision& d, Outputs& out);
  void finish_keys();
  void check(const Key& k, std::uint64_t answer, std::uint64_t reference);
  void count_figures();

  InputPort<AnyPayload> candidates_;
  InputPort<AnyPayload> reference_;
  OutputPort<AnyPayload> out_;
  OutputPort<schema::VoteDecision> decisions_;

  std::int64_t replicas_ = 0;
  double quorum_ = 0.5;
  double max_confidence_ = 0.9;
  double min_confidence_ = 0.0;
  double leader_threshold_ = 0;
  std::int64_t deadline_ms_ = 100;
  double reliability_alpha_ = 0.1;
  double leader_margin_ = 0.05;
  std::int64_t max_pending_ = 4096;

  std::unique_ptr<VoteTally> tally_;
  std::vector<std::pair<std::string, int>> stage_offsets_;  ///< producing stage -> its first voter index
  std::vector<std::string> voter_names_;                    ///< `stage#replica`, by voter index
  std::unordered_map<Key, std::vector<Envelope>, KeyHash> held_;  ///< candidates by voter, until finished
  std::vector<Decision> decided_;
  std::vector<Finished> finished_;
  // -- wrong decisions, against the reference
  std::unordered_map<Key, std::uint64_t, KeyHash> references_;  ///< reference answers not matched yet
  std::deque<Key> reference_order_;
  std::unordered_map<Key, std::uint64_t, KeyHash> answers_;     ///< final answers without a reference yet
  std::deque<Key> answer_order_;
  bool has_reference_ = false;
  bool reference_connected_ = true;

  struct Counters {
    std::atomic<std::int64_t>* decisions;
    std::atomic<std::int64_t>* without_quorum;
    std::atomic<std::int64_t>* corrections;
    std::atomic<std::int64_t>* leader_changes;
    std::atomic<std::int64_t>* fast;
    std::atomic<std::int64_t>* confirmed;
    std::atomic<std::int64_t>* late_votes;
    std::atomic<std::int64_t>* unknown_voters;
    std::atomic<std::int64_t>* evicted;
    std::atomic<std::int64_t>* wrong;
    std::atomic<std::int64_t>* checked;
    std::atomic<std::int64_t>* unchecked;
  } counters_{};
  std::array<std::atomic<std::int64_t>*, kLatencyBuckets + 1> latency_{};
  TallyCounts reported_;
};


}  // namespace

void VoteStage::setup(StageSpec& s) {
  candidates_ = s.input<AnyPayload>("candidates",
                                    "the replicas' results: the answer in the header's vote_key, the replica's "
                                    "confidence in its confidence");
  reference_ = s.optional_input<AnyPayload>(
      "reference", "a fault-free answer per (stream, seq) in vote_key: decisions that differ count as wrong");
  out_ = s.output<AnyPayload>("out", "the winning candidate of each decision, its vote_key the answer");
  s.passes_type(out_, candidates_);
  decisions_ = s.output<schema::VoteDecision>("decisions", "what was decided, by how much, who dissented");
  s.param(replicas_, "replicas", "voters expected per (stream, seq); 0 = every replica that feeds candidates", 0,
          {0.0, 1024.0});
  s.param(quorum_, "quorum", "share of the total weight the agreeing votes must exceed", 0.5, {0.5, 1.0});
  s.param(max_confidence_, "max_confidence", "a vote weighs its confidence, clamped to this", 0.9, {0.01, 1.0});
  s.param(min_confidence_, "min_confidence",
          "... and raised to at least this; equal to max_confidence, the vote is a plain majority", 0.0, {0.0, 1.0});
  s.param(leader_threshold_, "leader_threshold",
          "the leader's answer passes at once at this confidence or more; 0 = never", 0.0, {0.0, 1.0});
  s.param(deadline_ms_, "deadline_ms", "an answer without quorum is decided this long after its first vote", 100,
          {1.0, 600000.0});
  s.param(reliability_alpha_, "reliability_alpha", "weight of the newest outcome in each replica's reliability",
          0.1, {0.0, 1.0});
  s.param(leader_margin_, "leader_margin", "reliability by which another replica must lead to become leader",
          0.05, {0.0, 1.0});
  s.param(max_pending_, "max_pending", "(stream, seq) voted on at once, at most; the oldest is decided early",
          4096, {1.0, 1000000.0});
}

Status VoteStage::start(StageContext& ctx) {
  TallySettings settings;
  settings.voters = static_cast<int>(replicas_);
  if (settings.voters == 0) settings.voters = ctx.producers(candidates_.index());
  if (settings.voters <= 0) {
    return Status::error("consensus.vote cannot tell how many replicas vote: set `replicas`");
  }
  settings.quorum = quorum_;
  settings.max_confidence = max_confidence_;
  if (min_confidence_ > max_confidence_) {
    return Status::error("consensus.vote: min_confidence is above max_confidence", StatusCode::invalid_argument);
  }
  settings.min_confidence = min_confidence_;
  settings.leader_threshold = leader_threshold_;
  settings.deadline_ns = deadline_ms_ * 1'000'000;
  settings.reliability_alpha = reliability_alpha_;
  settings.leader_margin = leader_margin_;
  settings.max_pending = static_cast<std::size_t>(max_pending_);
  tally_ = std::make_unique<VoteTally>(settings);
  voter_names_.assign(static_cast<std::size_t>(settings.voters), std::string());
  stage_offsets_.clear();
  held_.clear();
  references_.clear();
  reference_order_.clear();
  answers_.clear();
  answer_order_.clear();
  reported_ = TallyCounts{};
  // Unknown (-1, a host that cannot tell) counts as connected.
  reference_connected_ = ctx.producers(reference_.index()) != 0;
  counters_ = Counters{&ctx.counter("decisions"),  &ctx.counter("without_quorum"), &ctx.counter("corrections"),
                       &ctx.counter("leader_changes"), &ctx.counter("fast"),      &ctx.counter("confirmed"),
                       &ctx.counter("late_votes"),  &ctx.counter("unknown_voters"), &ctx.counter("evicted"),
                       &ctx.counter("wrong"),       &ctx.counter("checked"),       &ctx.counter("unchecked")};
  for (int b = 0; b < kLatencyBuckets; ++b) {
    latency_[static_cast<std::size_t>(b)] = &ctx.counter("vote_latency_le_" + std::to_string(latency_bound_ns(b)));
  }
  latency_[kLatencyBuckets] = &ctx.counter("vote_latency_le_inf");
  return {};
}

int VoteStage::voter_of(std::string_view stage, int replica) {
  if (replica < 0) return -1;
  int offset = -1;
  for (const auto& [name, first] : stage_offsets_) {
    if (name == stage) offset = first;
  }
  if (offset < 0) {
    // A stage seen for the first time takes the voter indices after the
    // highest taken: one producing stage's replica r is voter r.
    offset = 0;
    for (std::size_t v = 0; v < voter_names_.size(); ++v) {
      if (!voter_names_[v].empty()) offset = static_cast<int>(v) + 1;
    }
    stage_offsets_.emplace_back(std::string(stage), offset);
  }
  const int voter = offset + replica;
  if (voter >= static_cast<int>(voter_names_.size())) return -1;
  auto& name = voter_names_[static_cast<std::size_t>(voter)];
  if (name.empty()) name = std::string(stage) + "#" + std::to_string(replica);
  return voter;
}

std::string VoteStage::voter_name(int voter) const {
  if (voter < 0 || voter >= static_cast<int>(voter_names_.size())) return {};
  const std::string& name = voter_names_[static_cast<std::size_t>(voter)];
  if (!name.empty()) return name;
  // Not heard from yet: with one producing stage, voter r is its replica r.
  if (stage_offsets_.size() == 1) return stage_offsets_[0].first + "#" + std::to_string(voter);
  return "voter#" + std::to_string(voter);
}

Status VoteStage::process(Inputs& in, Outputs& out, StageContext& ctx) {
  const std::int64_t now = ctx.now_ns();
  decided_.clear();
  if (const Envelope* e = in.envelope(candidates_)) {
    const EnvelopeHeader& h = e->header();
    const int voter = voter_of(in.producer_stage(), in.producer_replica());
    if (voter < 0) {
      counters_.unknown_voters->fetch_add(1, std::memory_order_relaxed);
    } else {
      const Key k{h.stream, h.seq};
      if (!tally_->finished(h.stream, h.seq)) {
        auto& held = held_[k];
        if (held.empty()) held.resize(voter_names_.size());
        if (!held[static_cast<std::size_t>(voter)].payload()) held[static_cast<std::size_t>(voter)] = *e;
      }
      tally_->add(Vote{h.stream, h.seq, voter, h.vote_key, static_cast<double>(h.confidence)}, now, decided_);
    }
  } else if (const Envelope* r = in.envelope(reference_)) {
    has_reference_ = true;
    const Key k{r->header().stream, r->header().seq};
    auto it = answers_.find(k);
    if (it != answers_.end()) {
      check(k, it->second, r->header().vote_key);
      answers_.erase(it);
    } else if (references_.emplace(k, r->header().vote_key).second) {
      reference_order_.push_back(k);
      while (reference_order_.size() > 4 * static_cast<std::size_t>(max_pending_)) {
        if (references_.erase(reference_order_.front()) > 0) {
          counters_.unchecked->fetch_add(1, std::memory_order_relaxed);
        }
        reference_order_.pop_front();
      }
    }
  } else {
    tally_->advance(now, decided_);  // called back: deadlines
  }
  for (const auto& d : decided_) emit(d, out);
  finish_keys();
  count_figures();
  ctx.defer_until(tally_->next_deadline());  // 0 = nothing pending: no call back
  return {};
}

void VoteStage::emit(const Decision& d, Outputs& out) {
  const auto it = held_.find(Key{d.stream, d.seq});
  if (it == held_.end() || d.winner < 0 || !it->second[static_cast<std::size_t>(d.winner)].payload()) return;
  const Envelope& winner = it->second[static_cast<std::size_t>(d.winner)];
  EnvelopeHeader h = winner.header();
  h.vote_key = d.key;
  h.confidence = d.total_weight > 0 ? static_cast<float>(d.agreeing_weight / d.total_weight) : 0.0F;
  out.emit(out_, winner.payload(), h);

  flatbuffers::FlatBufferBuilder fbb(256);
  auto names = [&](const std::vector<int>& voters) {
    std::vector<flatbuffers::Offset<flatbuffers::String>> v;
    v.reserve(voters.size());
    for (int voter : voters) v.push_back(fbb.CreateString(voter_name(voter)));
    return fbb.CreateVector(v);
  };
  const auto agreeing = names(d.agreeing);
  const auto dissenters = names(d.dissenters);
  const auto silent = names(d.silent);
  const auto winner_name = fbb.CreateString(voter_name(d.winner));
  const auto leader = fbb.CreateString(voter_name(d.leader));
  schema::VoteDecisionBuilder b(fbb);
  b.add_stream(d.stream);
  b.add_seq(d.seq);
  b.add_vote_key(d.key);
  b.add_winner(winner_name);
  b.add_agreeing_weight(d.agreeing_weight);
  b.add_total_weight(d.total_weight);
  b.add_agreeing(agreeing);
  b.add_dissenters(dissenters);
  b.add_silent(silent);
  b.add_leader(leader);
  b.add_quorum(d.quorum);
  b.add_without_quorum(!d.quorum && !d.fast);
  b.add_fast(d.fast);
  b.add_correction(d.correction);
  b.add_at_deadline(d.at_deadline);
  b.add_waited_ns(d.waited_ns);
  fbb.Finish(b.Finish(), schema::VoteDecisionIdentifier());
  out.emit(decisions_, Payload::from_builder(fbb), h);

  if (!d.correction) {
    int bucket = 0;
    while (bucket < kLatencyBuckets && d.waited_ns > latency_bound_ns(bucket)) ++bucket;
    latency_[static_cast<std::size_t>(bucket)]->fetch_add(1, std::memory_order_relaxed);
  }
}

void VoteStage::finish_keys() {
  tally_->take_finished(finished_);
  for (const auto& f : finished_) {
    const Key k{f.stream, f.seq};
    held_.erase(k);
    if (!reference_connected_) continue;
    auto it = references_.find(k);
    if (it != references_.end()) {
      check(k, f.key, it->second);
      references_.erase(it);
      continue;
    }
    // The reference may come later: keep the answer for a while.
    if (answers_.emplace(k, f.key).second) answer_order_.push_back(k);
    while (answer_order_.size() > 4 * static_cast<std::size_t>(max_pending_)) {
      if (answers_.erase(answer_order_.front()) > 0 && has_reference_) {
        counters_.unchecked->fetch_add(1, std::memory_order_relaxed);
      }
      answer_order_.pop_front();
    }
  }
}

void VoteStage::check(const Key&, std::uint64_t answer, std::uint64_t reference) {
  counters_.checked->fetch_add(1, std::memory_order_relaxed);
  if (answer != reference) counters_.wrong->fetch_add(1, std::memory_order_relaxed);
}

void VoteStage::count_figures() {
  const TallyCounts& c = tally_->counts();
  auto add = [](std::atomic<std::int64_t>* counter, std::uint64_t now, std::uint64_t before) {
    if (now != before) counter->fetch_add(static_cast<std::int64_t>(now - before), std::memory_order_relaxed);
  };
  add(counters_.decisions, c.decisions, reported_.decisions);
  add(counters_.without_quorum, c.without_quorum, reported_.without_quorum);
  add(counters_.corrections, c.corrections, reported_.corrections);
  add(counters_.leader_changes, c.leader_changes, reported_.leader_changes);
  add(counters_.fast, c.fast, reported_.fast);
  add(counters_.confirmed, c.confirmed, reported_.confirmed);
  add(counters_.late_votes, c.late_votes, reported_.late_votes);
  add(counters_.unknown_voters, c.unknown_voters, reported_.unknown_voters);
  add(counters_.evicted, c.evicted, reported_.evicted);
  reported_ = c;
}

}  // namespace swarmflow::consensus

namespace swarmflow {

void register_consensus_stages(Registry& registry) {
  registry.add<consensus::VoteStage>("consensus.vote",
                                     "confidence-weighted vote over the results of replicas, with quorum, deadline "
                                     "and a leader");
}

}  // namespace swarmflow
