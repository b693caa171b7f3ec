#pragma once
/// \file report.hpp
/// What a run did: per stage, per edge and per sink. Read live for progress
/// and at the end as the run report.

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace swarmflow {

/// Latency percentiles in milliseconds.
struct LatencySummary {
  std::uint64_t count = 0;
  double p50_ms = 0;
  double p99_ms = 0;
  double p999_ms = 0;
  double max_ms = 0;
};

/// A stage's own histogram (StageContext::observe), in the unit the stage
/// recorded it in.
struct ValueSummary {
  std::uint64_t count = 0;
  double mean = 0;
  double p50 = 0;
  double p99 = 0;
  /// The distribution: each value kept (to two significant digits) and how
  /// often it was recorded, ascending.
  std::vector<std::pair<double, std::uint64_t>> counts;
};

/// The buckets of StageContext::observe: a value is kept to two significant
/// digits (within 5 %; integers below 100 exactly), as a bucket code: 0 for
/// zero and below, else 100 * (exponent + 10) + mantissa, the value being
/// mantissa (10..99) * 10^exponent, exponent -10..89.
namespace value_buckets {
int bucket(double value);
/// The value a bucket code stands for.
double value(int bucket);
/// Count, mean and percentiles of buckets counted per code, with the sum of the values.
ValueSummary summarize(const std::map<int, std::uint64_t>& counts, double sum);
}  // namespace value_buckets

/// One stage, summed over its replicas.
struct StageReport {
  std::string id;
  std::string type;
  int replicas = 0;
  bool sink = false;            ///< feeds no other stage (its latency is end to end)
  std::uint64_t processed = 0;  ///< steps that returned ok
  std::uint64_t errors = 0;     ///< steps that failed or threw
  std::uint64_t restarts = 0;
  std::uint64_t dead_letters = 0;  ///< envelopes given up after repeated failures
  std::uint64_t queued = 0;        ///< envelopes waiting at its replicas now
  std::uint64_t queue_peak = 0;    ///< the most that ever waited at one replica
  std::map<std::string, std::int64_t> counters;  ///< the stage's own named counters
  std::map<std::string, ValueSummary> histograms;  ///< the stage's own histograms (StageContext::observe)
  LatencySummary latency;  ///< capture-to-completion, recorded at sinks
  /// The same latencies as a histogram: samples at most each bound of
  /// kServiceBucketsS (cumulative), and their sum.
  std::vector<std::uint64_t> latency_le;
  double latency_sum_s = 0;
  /// Residence: from an envelope's arrival at a replica to the end of its
  /// step (queue and service), over all replicas, wherever they ran; the
  /// histogram as for `latency_le`.
  LatencySummary residence;
  std::vector<std::uint64_t> residence_le;
  double residence_sum_s = 0;
};

/// One edge: output port -> input port.
struct EdgeReport {
  std::string from;  ///< `stage/port`
  std::string to;    ///< `stage/port`
  std::uint64_t sent = 0;       ///< envelopes produced onto the edge
  std::uint64_t delivered = 0;  ///< accepted by a replica of the consumer
  std::uint64_t dropped = 0;    ///< dropped by the overflow policy, at a live source, or too large
  /// Of `dropped`: payloads over `transport.max_message_bytes` with no
  /// consumer replica in the producer's unit.
  std::uint64_t too_large = 0;
  /// Of `dropped`: envelopes whose payload the consumer's unit refused on
  /// arrival (unknown type, failed verification; counted by reason in that
  /// unit's `rejected_by_reason`); acknowledged, so their credit came back.
  std::uint64_t refused = 0;
  std::uint64_t waiting = 0;    ///< held by the producer for credit now
  std::uint64_t peak_in_flight = 0;  ///< most envelopes one consumer replica ever held from one producer
  /// Most envelopes one producer ever kept for replay for one consumer
  /// replica (sent, not yet released); at most 2 x the queue's capacity.
  std::uint64_t peak_retained = 0;
  /// Envelopes sent again to a consumer replica placed anew after its unit
  /// died (failover). What the dead unit had received is not in `delivered`
  /// (its figures died with it); what the new replica received again is.
  std::uint64_t replayed = 0;
  std::string overflow;              ///< the edge's policy: block, drop_oldest or drop_newest
  /// Hop latency: from the moment an envelope left the producer (after any
  /// wait for credit there) to its arrival at the consumer: the way over
  /// the edge; across processes with their clock offset corrected. The
  /// histogram as for StageReport::latency_le.
  LatencySummary latency;
  std::vector<std::uint64_t> latency_le;
  double latency_sum_s = 0;
  /// The producer's hold on what it sent on this edge: from an envelope's
  /// arrival at the producer (its capture, for a source's) to the moment it
  /// left (its queue, its step and any wait for credit). Measured on the
  /// same envelopes as `latency`; the histogram as for `latency_le`.
  LatencySummary held;
  std::vector<std::uint64_t> held_le;
  double held_sum_s = 0;
};

/// One unit's data plane: what crossed it and what was refused.
struct UnitReport {
  std::string id;
  int replicas = 0;               ///< replicas it hosts
  std::uint64_t sent = 0;         ///< messages sent to other units
  std::uint64_t received = 0;     ///< verified messages received
  std::uint64_t rejected = 0;     ///< dropped by verification (malformed, oversize, unknown type)
  std::uint64_t unknown_peer = 0; ///< from a peer not in the unit list
  std::uint64_t send_failed = 0;  ///< could not be handed to a peer
  std::uint64_t refused_handshakes = 0;  ///< peers refused by CURVE/ZAP (plaintext, wrong or unknown key)
  std::uint64_t load_reports = 0;        ///< load reports the coordinator received from it
  double utilisation = 0;                ///< busy fraction of its worker threads in the last report
  double speed = 1;                      ///< its speed factor now (`speed:`, changed by `scenario:`)
  /// Its process's steady clock against the coordinator's (the
  /// coordinator's minus its own), as heartbeats measured it, in ms, and
  /// how far off that may be (half the round trip it was measured with).
  /// Times from its process (capture, hops) are corrected by it. 0 for the
  /// coordinator's own units; `clock_known` false while not measured.
  bool clock_known = false;
  double clock_offset_ms = 0;
  double clock_error_ms = 0;
  std::map<std::string, std::uint64_t> rejected_by_reason;
};

/// Upper bounds of the service-time histogram buckets, in seconds (the
/// last bucket, +Inf, is implicit).
inline constexpr double kServiceBucketsS[] = {1e-5, 5e-5, 1e-4, 5e-4, 1e-3, 5e-3, 1e-2, 5e-2, 0.1, 0.5, 1.0, 5.0};
inline constexpr int kServiceBuckets = static_cast<int>(sizeof(kServiceBucketsS) / sizeof(kServiceBucketsS[0]));

/// One replica, where it runs and what it did.
struct ReplicaReport {
  std::string stage;
  int replica = 0;
  std::string unit;             ///< the unit that hosts it by the placement in force ("" when lost)
  std::uint64_t processed = 0;
  std::uint64_t errors = 0;
  std::uint64_t restarts = 0;
  std::uint64_t dead_letters = 0;
  std::uint64_t queued = 0;     ///< envelopes waiting at it now
  /// Time per step: counts per bucket of kServiceBucketsS (not cumulative;
  /// the last entry is over the largest bound), and their sum.
  std::vector<std::uint64_t> service_buckets;
  double service_sum_s = 0;
};

/// The coordinator's control socket.
struct CoordinatorReport {
  /// Peers refused in the handshake on its tcp (CURVE) endpoint: plaintext,
  /// another server key, a key not in the cluster's unit list, garbage. Zero
  /// when this process runs no coordinator socket (one process, or a unit).
  std::uint64_t refused_handshakes = 0;
  /// Envelopes, end-of-stream marks and acks this process refused because
  /// the unit that sent them no longer hosts the replica they name (a unit
  /// fenced after a failover: paused past the failure detector, then back),
  /// snapshots from such a unit, UnitDone reports of an older placement
  /// epoch, and control messages from a unit declared dead before it was
  /// heard again. Counted in the coordinator's process only.
  std::uint64_t stale_refused = 0;
};

/// One failover: a unit declared dead and its replicas placed anew.
struct FailoverReport {
  std::string unit;            ///< the unit declared dead
  /// "dead" (its failure detector declared it dead) or "left" (it asked to
  /// leave: `Runtime::leave`, SIGTERM to `swarmflow unit`).
  std::string cause = "dead";
  double detected_s = 0;       ///< when, in seconds since the run started
  std::int64_t silent_ms = 0;  ///< how long nothing had been heard from it
  std::uint32_t epoch = 0;     ///< the placement epoch it started
  /// Replicas placed anew, as `stage/replica -> unit`.
  std::vector<std::string> moved;
  /// Replicas lost with it (sources), as `stage/replica`: what they had not
  /// sent is lost; the edges they fed count them as ended.
  std::vector<std::string> lost;
  /// From the detection to the first step finished by a replica it placed
  /// anew (an envelope processed or a source's output), in ms; -1 when none
  /// has finished one (nothing moved, or the run ended first).
  double first_output_ms = -1;
  /// Envelopes producers sent again to the replicas it placed anew, and the
  /// duplicates consumers dropped because of it (what the replacements sent
  /// again, and replayed inputs a restored replica had seen).
  std::uint64_t replayed = 0;
  std::uint64_t duplicates_dropped = 0;
  /// Why each of `lost` was lost, in the same order (and, where its position
  /// was known, how much it had sent).
  std::vector<std::string> lost_why;
};

/// One change of placement made while the run went on (`placement: {policy:
/// adaptive}`, or Runtime::move_replica): docs/placement.md.
struct MoveReport {
  double at_s = 0;          ///< when it began, in seconds since the run started
  std::string kind;         ///< "move" (a replica to another unit) or "keys" (keys to other replicas)
  std::string stage;
  int replica = 0;          ///< the replica moved, or the one whose keys were handed on
  std::string from;         ///< its unit before
  std::string to;           ///< its unit after (the same for "keys")
  std::string why;          ///< what the policy saw
  std::uint32_t epoch = 0;  ///< the placement epoch that completed it
  /// From the start of its drain to its successor taking work, in ms.
  double drain_ms = 0;
  std::uint64_t keys = 0;   ///< keys handed to other replicas ("keys")
  /// End-to-end latency p99 at the sinks (ms) in the interval before the
  /// move, and from its start to one interval after it completed; -1 when
  /// no envelope reached a sink then.
  double latency_p99_before_ms = -1;
  double latency_p99_around_ms = -1;
};

/// One voter (a `consensus.vote` stage), its replicas summed.
struct ConsensusReport {
  std::string stage;
  std::uint64_t decisions = 0;       ///< (stream, seq) decided
  /// Final decisions that differ from the reference the voter receives
  /// (its `reference` input), of `checked` that could be compared.
  std::uint64_t wrong = 0;
  std::uint64_t checked = 0;
  std::uint64_t without_quorum = 0;  ///< decided without quorum (all voted, the deadline, or too many pending)
  std::uint64_t corrections = 0;     ///< fast decisions (the leader's) the other votes overturned
  std::uint64_t fast = 0;            ///< decisions passed at once on the leader's word
  std::uint64_t leader_changes = 0;
  std::uint64_t late_votes = 0;      ///< candidates that came after their vote was over
  /// From a decision's first candidate to the decision (corrections not
  /// counted): what the voter adds over taking the first replica's answer.
  /// The upper bound of the histogram bucket (10 per decade) the percentile
  /// falls in.
  double added_latency_p50_ms = 0;
  double added_latency_p99_ms = 0;
};

/// The whole run.
struct RunReport {
  std::string pipeline;
  bool ok = true;
  bool finished = false;
  double duration_s = 0;
  std::string error;
  std::vector<StageReport> stages;
  std::vector<EdgeReport> edges;
  std::vector<UnitReport> units;
  CoordinatorReport coordinator;
  std::vector<FailoverReport> failovers;
  /// Changes of placement made during the run, in order.
  std::vector<MoveReport> moves;
  /// Every voter, in the order of the stages.
  std::vector<ConsensusReport> consensus;
  /// Every replica, stage by stage (figures of replicas in other processes
  /// arrive with their unit's UnitDone).
  std::vector<ReplicaReport> replicas;

  /// The JSON report: pipeline, ok, duration_s, stages, edges, sinks, units,
  /// coordinator, failovers, consensus; and `ultrasound`, the scores of an
  /// ultrasound.report stage, when the run has one (docs/ultrasound.md).
  std::string to_json() const;
  const StageReport* stage(const std::string& id) const;
  const EdgeReport* edge(const std::string& from, const std::string& to) const;
};

}  // namespace swarmflow
