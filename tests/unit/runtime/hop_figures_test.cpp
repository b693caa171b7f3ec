// Latency per hop from an envelope's hop trace, the trace's sample, and its
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

TEST(HopFigures, ResidenceAndEdgeLatencyComeFromTheLastTwoHops) {
  SharedLatency residence;
  SharedLatency edge;
  // Captured at 1000, arrived at the producer at 5000 and here at 8000; the step ended at 9500.
  record_hops(&residence, &edge, nullptr, TraceStep{}, header(1, 1000, {5000, 8000}), 9500);
  residence.flush();
  edge.flush();
  EXPECT_EQ(residence.snapshot().count(), 1u);
  EXPECT_EQ(residence.snapshot().max_ns(), 1500);
  EXPECT_EQ(edge.snapshot().max_ns(), 3000);
}

TEST(HopFigures, ASourcesEnvelopeCountsFromItsCapture) {
  SharedLatency edge;
  record_hops(nullptr, &edge, nullptr, TraceStep{}, header(1, 1000, {4000}), 4100);
  edge.flush();
  EXPECT_EQ(edge.snapshot().max_ns(), 3000);
}

TEST(HopFigures, OneStepInSixteenIsMeasured) {
  SharedLatency residence;
  SharedLatency edge;
  for (int i = 0; i < 64; ++i) record_hops(&residence, &edge, nullptr, TraceStep{}, header(1, 1000, {5000, 8000}), 9500);
  residence.flush();
  edge.flush();
  EXPECT_EQ(residence.snapshot().count(), 64u / kHopSampleEvery);
  EXPECT_EQ(edge.snapshot().count(), 64u / kHopSampleEvery) << "the same steps";
  SharedLatency alone;
  for (int i = 0; i < 32; ++i) record_hops(nullptr, &alone, nullptr, TraceStep{}, header(1, 1000, {5000, 8000}), 9500);
  alone.flush();
  EXPECT_EQ(alone.snapshot().count(), 2u) << "without a residence, the edge counts the steps";
}

TEST(HopFigures, AFullHopTraceIsNotMeasured) {
  SharedLatency residence;
  record_hops(&residence, nullptr, nullptr, TraceStep{}, header(1, 1, {1, 2, 3, 4, 5, 6, 7, 8}), 100);
  record_hops(&residence, nullptr, nullptr, TraceStep{}, header(1, 1, {}), 100);
  residence.flush();
  EXPECT_EQ(residence.snapshot().count(), 0u);
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
  for (std::uint64_t seq = 0; seq < 40; ++seq) record_hops(nullptr, nullptr, &trace, who, header(seq, 1, {5}), 9);
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
