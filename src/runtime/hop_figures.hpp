#pragma once
// Latency per hop, measured where a replica ends a step: the envelope's hop
// trace holds its arrival here (the last hop) and its arrival at the
// producer (the hop before; the capture time for a source's envelope), and
// one envelope in kHopSampleEvery that a producer sends carries the time it
// left it (`sent_ns`, after any wait for credit), all on this process's
// clock (times from another process are corrected by the clock offset when
// they arrive: shift_times, inbound_batcher.cpp). From them:
//  - residence at the stage: arrival -> end of the step (queue and service);
//  - latency of the edge: sent by the producer -> arrival here (the way over
//    the edge: the hand-over, in process or across processes, and the wait
//    in the consumer's mailbox before it is queued);
//  - the producer's hold on it: arrival at the producer -> sent (its queue,
//    its step and any wait for credit), per edge.
// And a sample of envelopes (seq divisible by the trace's `every`) for
// `--trace FILE`, as Chrome trace events. No actors here.

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <swarmflow/envelope.hpp>

#include "metrics/histogram.hpp"

namespace swarmflow::runtime {

/// Residence and hop latency are measured on one step in this many of each
/// replica: their percentiles hold, and what they cost stays within the 2%
/// the benchmarks allow (docs/benchmarks.md).
constexpr std::uint64_t kHopSampleEvery = 16;

/// A latency histogram written by one thread and read by others: the writer
/// keeps a few samples of its own and hands them over in one lock.
class SharedLatency {
 public:
  /// Of the steps that could be measured, one in kHopSampleEvery is (the
  /// first, then every 16th): true when this one is. Writer only.
  bool due() { return (ticks_++ % kHopSampleEvery) == 0; }
  /// Records `ns`; hands over what it holds when it is full or, given the
  /// time `now_ns`, when it last did over 200 ms ago (a slow stage's
  /// figures go live too).
  void record(std::int64_t ns, std::int64_t now_ns = 0) {
    pending_[count_++] = ns;
    if (count_ == kPending || (now_ns != 0 && now_ns - flushed_ns_ > kFlushAfterNs)) {
      flush();
      flushed_ns_ = now_ns;
    }
  }
  /// Hands over what the writer holds (the writer's thread only).
  void flush();
  void merge(const metrics::LatencyHistogram& other);
  metrics::LatencyHistogram snapshot() const;

 private:
  static constexpr std::size_t kPending = 32;
  static constexpr std::int64_t kFlushAfterNs = 200'000'000;
  std::int64_t flushed_ns_ = 0;
  std::int64_t pending_[kPending]{};
  std::size_t count_ = 0;
  std::uint64_t ticks_ = 0;
  mutable std::mutex mutex_;
  metrics::LatencyHistogram shared_;
};

/// One sampled step of one envelope, for the trace.
struct TraceStep {
  int node = 0;
  int replica = 0;
  int unit = 0;
  std::uint64_t stream = 0;
  std::uint64_t seq = 0;
  std::int64_t arrived_ns = 0;  ///< at this replica (this process's clock)
  std::int64_t ended_ns = 0;    ///< the step's end
  std::int64_t from_ns = 0;     ///< arrival at the producer (or capture); 0: unknown
};

/// The sampled steps of a run in this process, bounded.
class TraceBuffer {
 public:
  TraceBuffer(std::uint64_t every, std::size_t capacity) : every_(every == 0 ? 1 : every), capacity_(capacity) {}
  bool sampled(std::uint64_t seq) const { return seq % every_ == 0; }
  void add(const TraceStep& step);
  std::vector<TraceStep> steps() const;
  std::uint64_t dropped() const;
  std::uint64_t every() const { return every_; }

 private:
  std::uint64_t every_;
  std::size_t capacity_;
  mutable std::mutex mutex_;
  std::vector<TraceStep> steps_;
  std::uint64_t dropped_ = 0;
};

/// record_hops for a step that has something to record: the non-null ones.
void record_sampled_hops(SharedLatency* residence, SharedLatency* edge, SharedLatency* held, TraceBuffer* trace,
                         const TraceStep& who, const EnvelopeHeader& h, std::int64_t end_ns);

/// Records a finished step on envelope `h` at `end_ns` into the residence of
/// the replica (one step in kHopSampleEvery, counted by `residence`), and,
/// when `h` carries a send time (its producer stamps one envelope in
/// kHopSampleEvery), into the latency of the edge it came on (`edge`: sent ->
/// arrival here) and its producer's hold on it (`held`: arrival at the
/// producer, or capture, -> sent); into `trace` when it samples it. Any of
/// them may be null. Inline, as every step of a replica calls it and most
/// record nothing: those cost a count and two tests.
inline void record_hops(SharedLatency* residence, SharedLatency* edge, SharedLatency* held, TraceBuffer* trace,
                        const TraceStep& who, const EnvelopeHeader& h, std::int64_t end_ns) {
  // A full trace keeps its oldest hops: the last is not this arrival then.
  if (h.hop_count == 0 || h.hop_count >= kMaxHops) return;
  const bool due = residence != nullptr && residence->due();
  const bool timed = h.sent_ns != 0 && (edge != nullptr || held != nullptr);
  const bool traced = trace != nullptr && trace->sampled(h.seq);
  if (due || timed || traced) {
    record_sampled_hops(due ? residence : nullptr, timed ? edge : nullptr, timed ? held : nullptr,
                        traced ? trace : nullptr, who, h, end_ns);
  }
}

/// Moves the times of `h` from another process's clock onto this one's:
/// adds `shift_ns` (this clock minus that one) to its capture, hop and send
/// times; a time that is 0 (none) stays 0.
void shift_times(EnvelopeHeader& h, std::int64_t shift_ns);

/// `steps` as Chrome trace-event JSON ({"traceEvents": [...]}): one complete
/// ("X") event per step, named by its stage, on a thread per replica in a
/// process per unit, at `shift_ns` + its times (the coordinator's clock, when
/// a unit process writes it), with the envelope's stream and seq in `args`
/// and a flow from its producer's step. `stage_names[node]`, `unit_names[unit]`.
std::string trace_json(const std::vector<TraceStep>& steps, const std::vector<std::string>& stage_names,
                       const std::vector<std::string>& unit_names, std::int64_t shift_ns, std::uint64_t dropped);

}  // namespace swarmflow::runtime
