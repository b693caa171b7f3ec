// The `swarmflow run` progress line: percentage and eta only for a source
// that knows its length, from explicit counts and times.

#include <gtest/gtest.h>

#include <string>

#include "cli/progress.hpp"

namespace swarmflow {
namespace {

using cli::completion_text;
using cli::eta_text;
using cli::progress_line;

TEST(Progress, EtaReadsAsSecondsMinutesOrHours) {
  EXPECT_EQ(eta_text(0), "0s");
  EXPECT_EQ(eta_text(8.4), "8s");
  EXPECT_EQ(eta_text(59.4), "59s");
  EXPECT_EQ(eta_text(60), "1m00s");
  EXPECT_EQ(eta_text(185), "3m05s");
  EXPECT_EQ(eta_text(3599), "59m59s");
  EXPECT_EQ(eta_text(3600), "1h00m");
  EXPECT_EQ(eta_text(7620), "2h07m");
  EXPECT_EQ(eta_text(-3), "0s");
}

TEST(Progress, CompletionOnlyWhenTheLengthIsKnown) {
  EXPECT_EQ(completion_text(500, 0, 10.0), "");
  EXPECT_EQ(completion_text(500, -1, 10.0), "");
  // A quarter in 10 s at the average rate: 30 s left.
  EXPECT_EQ(completion_text(250, 1000, 10.0), "25% eta 30s");
  EXPECT_EQ(completion_text(450, 1000, 9.0), "45% eta 11s");
  // Rounded down: 100% only when done.
  EXPECT_EQ(completion_text(999, 1000, 99.9), "99% eta 0s");
  EXPECT_EQ(completion_text(1000, 1000, 100.0), "100%");
  // A restarted file source reads its file again.
  EXPECT_EQ(completion_text(1300, 1000, 100.0), "100%");
  // Nothing done yet, or no time passed: no eta to give.
  EXPECT_EQ(completion_text(0, 1000, 5.0), "0%");
  EXPECT_EQ(completion_text(10, 1000, 0.0), "1%");
}

StageReport stage(const std::string& id, std::uint64_t processed) {
  StageReport s;
  s.id = id;
  s.processed = processed;
  return s;
}

TEST(Progress, LineShowsPercentageAndEtaForSourcesThatKnowTheirLength) {
  RunReport previous;
  previous.duration_s = 8.0;
  previous.stages = {stage("camera", 400), stage("live", 100), stage("sink", 390)};
  RunReport now;
  now.duration_s = 10.0;
  now.stages = {stage("camera", 500), stage("live", 150), stage("sink", 490)};
  now.stages[0].counters[cli::kExpectedCounter] = 2000;
  now.stages[0].counters["frames"] = 500;
  now.stages[1].counters["frames"] = 150;  // a live camera: no length, no percentage
  const std::string line = progress_line(now, previous, 2.0);
  EXPECT_EQ(line, "[  10.0s] | camera 50/s 25% eta 30s | live 25/s | sink 50/s");
}

}  // namespace
}  // namespace swarmflow
