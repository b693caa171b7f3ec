// The checks the pipeline smoke tests apply to a run report's JSON
// (support/report_check.hpp), on reports written by RunReport::to_json.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <swarmflow/report.hpp>

#include "support/report_check.hpp"

namespace swarmflow {
namespace {

using swarmflow::testing::report_problems;

RunReport good_report() {
  RunReport r;
  r.pipeline = "p";
  r.ok = true;
  r.finished = true;
  StageReport src;
  src.id = "src";
  src.processed = 100;
  r.stages.push_back(src);
  StageReport sink;
  sink.id = "sink";
  sink.sink = true;
  sink.processed = 90;
  r.stages.push_back(sink);
  EdgeReport e;
  e.from = "src/out";
  e.to = "sink/in";
  e.sent = 100;
  e.delivered = 90;
  e.dropped = 10;
  r.edges.push_back(e);
  return r;
}

std::vector<std::string> problems_of(const RunReport& r) { return report_problems(nlohmann::json::parse(r.to_json())); }

TEST(ReportCheck, AConservedRunWithFedSinksHolds) {
  EXPECT_TRUE(problems_of(good_report()).empty()) << ::testing::PrintToString(problems_of(good_report()));
}

TEST(ReportCheck, AnEdgeThatLostEnvelopesIsNamed) {
  RunReport r = good_report();
  r.edges[0].delivered = 89;  // one sent, neither delivered nor dropped (still waiting, or lost)
  const auto p = problems_of(r);
  ASSERT_EQ(p.size(), 1U) << ::testing::PrintToString(p);
  EXPECT_NE(p[0].find("src/out -> sink/in"), std::string::npos) << p[0];
  EXPECT_NE(p[0].find("sent 100"), std::string::npos) << p[0];
  r.edges[0].delivered = 91;  // more accounted for than sent
  EXPECT_EQ(problems_of(r).size(), 1U);
}

TEST(ReportCheck, ASinkThatProcessedNothingFails) {
  RunReport r = good_report();
  r.stages[1].processed = 0;
  const auto p = problems_of(r);
  ASSERT_EQ(p.size(), 1U) << ::testing::PrintToString(p);
  EXPECT_NE(p[0].find("sink sink processed nothing"), std::string::npos) << p[0];
  r.stages[1].sink = false;  // then there is no sink at all
  EXPECT_EQ(problems_of(r), std::vector<std::string>{"no sinks"});
}

TEST(ReportCheck, AFailedOrUnfinishedRunFails) {
  RunReport r = good_report();
  r.ok = false;
  r.error = "stage sink: boom";
  auto p = problems_of(r);
  ASSERT_EQ(p.size(), 1U) << ::testing::PrintToString(p);
  EXPECT_NE(p[0].find("'ok' is not true"), std::string::npos) << p[0];
  EXPECT_NE(p[0].find("boom"), std::string::npos) << p[0];
  r = good_report();
  r.finished = false;
  p = problems_of(r);
  ASSERT_EQ(p.size(), 1U) << ::testing::PrintToString(p);
  EXPECT_NE(p[0].find("'finished' is not true"), std::string::npos) << p[0];
}

TEST(ReportCheck, AWaitingFigureMustBeZeroAndMissingFieldsAreProblems) {
  auto j = nlohmann::json::parse(good_report().to_json());
  j["edges"][0]["waiting"] = 0;
  EXPECT_TRUE(report_problems(j).empty());
  j["edges"][0]["waiting"] = 3;
  EXPECT_EQ(report_problems(j).size(), 1U);
  j["edges"][0].erase("waiting");
  j["edges"][0].erase("dropped");
  EXPECT_EQ(report_problems(j).size(), 1U);
  j.erase("edges");
  EXPECT_EQ(report_problems(j), std::vector<std::string>{"no 'edges' list"});
  EXPECT_EQ(report_problems(nlohmann::json::array()), std::vector<std::string>{"the report is not a JSON object"});
}

}  // namespace
}  // namespace swarmflow
