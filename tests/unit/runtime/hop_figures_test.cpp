// Latency per hop from an envelope's hop trace and send time, on fixed
// times: residence, the way over an edge and the producer's hold, with and
// without a clock offset between processes; the trace's sample, and its
// Chrome trace-event JSON.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "runtime/hop_figures.hpp"

namespace swarmflow::runtime {
namespace {

EnvelopeHeader header(std::uint64_t seq, std::int64_t capture, std::vector<std::int64_t> hops) {
  EnvelopeHeader h;
  h.stream = 3;
  h.seq = seq;
  h.capture_ns = capture;
  for (auto t : hops) h.add_hop(t);
  return h;
}

/// `h` as sent by its producer at `sent`.
EnvelopeHeader sent_at(EnvelopeHeader h, std::int64_t sent) {
  h.sent_ns = sent;
  return h;
}

TEST(HopFigures, EdgeLatencyRunsFromTheSendAndTheProducersHoldUpToIt) {
  SharedLatency residence;
  SharedLatency edge;
  SharedLatency held;
  // Captured at 1000, arrived at the producer at 5000, left it at 7200
  // (its step, then a wait for credit), arrived here at 8000; the step here
  // ended at 9500.
  record_hops(&residence, &edge, &held, nullptr, TraceStep{}, sent_at(header(1, 1000, {5000, 8000}), 7200), 9500);
  residence.flush();
  edge.flush();
  held.flush();
  ASSERT_EQ(residence.snapshot().count(), 1u);
  EXPECT_EQ(residence.snapshot().max_ns(), 1500) << "arrival here -> end of the step";
  ASSERT_EQ(edge.snapshot().count(), 1u);
  EXPECT_EQ(edge.snapshot().max_ns(), 800) << "sent -> arrival here: the producer's wait is not in it";
  ASSERT_EQ(held.snapshot().count(), 1u);
  EXPECT_EQ(held.snapshot().max_ns(), 2200) << "arrival at the producer -> sent";
}

TEST(HopFigures, ASourcesEnvelopeIsHeldFromItsCapture) {
  SharedLatency edge;
  SharedLatency held;
  record_hops(nullptr, &edge, &held, nullptr, TraceStep{}, sent_at(header(1, 1000, {4000}), 3100), 4100);
  edge.flush();
  held.flush();
  EXPECT_EQ(edge.snapshot().max_ns(), 900);
  EXPECT_EQ(held.snapshot().max_ns(), 2100);
}

TEST(HopFigures, AnEnvelopeWithoutASendTimeMeasuresNoEdge) {
  SharedLatency residence;
  SharedLatency edge;
  SharedLatency held;
  record_hops(&residence, &edge, &held, nullptr, TraceStep{}, header(1, 1000, {5000, 8000}), 9500);
  residence.flush();
  edge.flush();
  held.flush();
  EXPECT_EQ(residence.snapshot().count(), 1u);
  EXPECT_EQ(edge.snapshot().count(), 0u);
  EXPECT_EQ(held.snapshot().count(), 0u);
}

TEST(HopFigures, TimesFromAnotherProcessAreShiftedOntoThisClockSoTheWayIsRight) {
  // The producer's clock runs 1 000 000 ns behind this one (this minus that
  // = +1 000 000): it saw the envelope arrive at 5000 and leave at 7200 on
  // its clock; here, on this one, it arrived at 1 008 000.
  EnvelopeHeader h = sent_at(header(1, 1000, {5000}), 7200);
  shift_times(h, 1'000'000);
  EXPECT_EQ(h.capture_ns, 1'001'000);
  EXPECT_EQ(h.hop_ns[0], 1'005'000);
  EXPECT_EQ(h.sent_ns, 1'007'200);
  h.add_hop(1'008'000);
  SharedLatency edge;
  SharedLatency held;
  record_hops(nullptr, &edge, &held, nullptr, TraceStep{}, h, 1'009'000);
  edge.flush();
  held.flush();
  EXPECT_EQ(edge.snapshot().max_ns(), 800);
  EXPECT_EQ(held.snapshot().max_ns(), 2200) << "two times of the producer's clock: no offset in it";
  // Times that are not there stay not there.
  EnvelopeHeader none;
  shift_times(none, 5);
  EXPECT_EQ(none.capture_ns, 0);
  EXPECT_EQ(none.sent_ns, 0);
  EXPECT_EQ(none.hop_count, 0);
}

TEST(HopFigures, OneStepInSixteenHasItsResidenceMeasuredAndEverySentSampleItsEdge) {
  SharedLatency residence;
  SharedLatency edge;
  SharedLatency held;
  for (int i = 0; i < 64; ++i) {
    // The producer stamps one envelope in 16 (ReplicaCore::send_dispatches).
    const std::int64_t sent = i % kHopSampleEvery == 3 ? 7000 : 0;
    record_hops(&residence, &edge, &held, nullptr, TraceStep{}, sent_at(header(1, 1000, {5000, 8000}), sent), 9500);
  }
  residence.flush();
  edge.flush();
  held.flush();
  EXPECT_EQ(residence.snapshot().count(), 64u / kHopSampleEvery);
  EXPECT_EQ(edge.snapshot().count(), 64u / kHopSampleEvery);
  EXPECT_EQ(held.snapshot().count(), 64u / kHopSampleEvery) << "the same envelopes as the edge";
}

TEST(HopFigures, AFullHopTraceIsNotMeasured) {
  SharedLatency residence;
  SharedLatency edge;
  record_hops(&residence, &edge, nullptr, nullptr, TraceStep{}, sent_at(header(1, 1, {1, 2, 3, 4, 5, 6, 7, 8}), 7),
              100);
  record_hops(&residence, &edge, nullptr, nullptr, TraceStep{}, sent_at(header(1, 1, {}), 7), 100);
  residence.flush();
  edge.flush();
  EXPECT_EQ(residence.snapshot().count(), 0u);
  EXPECT_EQ(edge.snapshot().count(), 0u);
}

TEST(HopFigures, SamplesHandOverWithoutAnExplicitFlushOnceEnoughCameIn) {
  SharedLatency residence;
  for (int i = 0; i < 100; ++i) residence.record(10);
  EXPECT_GE(residence.snapshot().count(), 64u);
  EXPECT_LT(residence.snapshot().count(), 100u) << "the last few wait for the next hand-over";
  residence.flush();
  EXPECT_EQ(residence.snapshot().count(), 100u);
}

TEST(HopFigures, TheTraceSamplesBySeqAndIsBounded) {
  TraceBuffer trace(10, 2);
  const TraceStep who{4, 1, 2};
  for (std::uint64_t seq = 0; seq < 40; ++seq) record_hops(nullptr, nullptr, nullptr, &trace, who, header(seq, 1, {5}), 9);
  const auto steps = trace.steps();
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[0].seq, 0u);
  EXPECT_EQ(steps[1].seq, 10u);
  EXPECT_EQ(steps[1].node, 4);
  EXPECT_EQ(steps[1].unit, 2);
  EXPECT_EQ(trace.dropped(), 2u) << "seq 20 and 30 found it full";
}

TEST(HopFigures, TheTraceIsChromeTraceEventJson) {
  std::vector<TraceStep> steps{{0, 0, 0, 7, 100, 2'000'000, 2'500'000, 1'000'000},
                               {1, 1, 1, 7, 100, 3'000'000, 3'010'000, 2'000'000}};
  const auto j = nlohmann::json::parse(trace_json(steps, {"camera \"a\"", "detect"}, {"u0", "u1"}, 1'000, 0));
  ASSERT_TRUE(j["traceEvents"].is_array());
  int complete = 0;
  for (const auto& e : j["traceEvents"]) {
    ASSERT_TRUE(e["ph"].is_string());
    ASSERT_TRUE(e["pid"].is_number_integer());
    ASSERT_TRUE(e["tid"].is_number_integer());
    if (e["ph"] == "X") {
      ++complete;
      EXPECT_TRUE(e["ts"].is_number());
      EXPECT_GE(e["dur"].get<double>(), 0.0);
      EXPECT_EQ(e["args"]["seq"], 100);
    } else {
      EXPECT_EQ(e["ph"], "M");
    }
  }
  EXPECT_EQ(complete, 2);
  // Microseconds, shifted by 1 us.
  const auto& last = j["traceEvents"].back();
  EXPECT_EQ(last["name"], "detect");
  EXPECT_DOUBLE_EQ(last["ts"].get<double>(), 3001.0);
  EXPECT_DOUBLE_EQ(last["dur"].get<double>(), 10.0);
  EXPECT_DOUBLE_EQ(last["args"]["hop_us"].get<double>(), 1000.0);
}

}  // namespace
}  // namespace swarmflow::runtime
