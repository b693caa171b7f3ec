// What `swarmflow top` draws from /api/v1/state: rates between two states,
// drops with their reasons, p99 from the service histograms, failovers, and
// a small terminal that gets every line cut to its width and sections cut
// short with a count of what was left out.

#include <gtest/gtest.h>

#include <string>

#include "cli/top.hpp"

namespace swarmflow::cli {
namespace {

std::string state(double duration_s, int processed, int sent, int dropped, bool failover) {
  const std::string p = std::to_string(processed);
  return R"({"pipeline":"p \"q\"","ok":true,"finished":false,"duration_s":)" + std::to_string(duration_s) +
         R"(,"stages":{"source":{"type":"sim.source","replicas":1,"processed":)" + std::to_string(sent) +
         R"(},"work":{"type":"sim.work","replicas":2,"processed":)" + p + R"(}},
  "edges":[{"from":"source/out","to":"work/in","sent":)" + std::to_string(sent) + R"(,"delivered":)" + p +
         R"(,"dropped":)" + std::to_string(dropped) + R"(,"too_large":1,"refused":0,"overflow":"drop_oldest"}],
  "units":{"u0":{"replicas":1,"utilisation":0.25,"speed":1.0,"sent":5,"received":6},
           "u1":{"replicas":2,"utilisation":0.5,"speed":2.0,"sent":7,"received":8}},
  "failovers":)" + (failover ? R"([{"unit":"u2","cause":"dead","detected_s":1.5,"epoch":2,"moved":["work/1 -> u1"],"lost":[]}])" : "[]") + R"(,
  "replicas":[{"stage":"source","replica":0,"unit":"u0","processed":)" + std::to_string(sent) + R"(,"queued":0,
                "service_s":{"count":0,"sum_s":0,"le":{}}},
              {"stage":"work","replica":0,"unit":"u1","processed":)" + p + R"(,"queued":3,
                "service_s":{"count":100,"sum_s":0.1,"le":{"0.0001":50,"0.0005":98,"0.001":99,"0.005":100}}},
              {"stage":"work","replica":1,"unit":"u1","processed":0,"queued":4,
                "service_s":{"count":0,"sum_s":0,"le":{}}}]})";
}

std::string find_line(const std::vector<std::string>& lines, const std::string& start) {
  for (const auto& l : lines) {
    if (l.rfind(start, 0) == 0) return l;
  }
  return "";
}

TEST(Top, ShowsRatesQueuesDropsWithReasonsAndP99) {
  const auto lines = top_lines(state(4, 3000, 4000, 10, true), state(2, 1000, 2000, 4, false), 1.0, "h:1", 120, 40);
  ASSERT_FALSE(lines.empty());
  EXPECT_NE(lines[0].find("running"), std::string::npos) << lines[0];
  const std::string work = find_line(lines, "work ");
  // 2000 more in 2 s of the run's clock (not the 1 s between looks).
  EXPECT_NE(work.find(" 1.0k "), std::string::npos) << work;
  EXPECT_NE(work.find("      7 "), std::string::npos) << "queue 3 + 4: " << work;
  EXPECT_NE(work.find("9 drop_oldest"), std::string::npos) << work;
  EXPECT_NE(work.find("1 too-large"), std::string::npos) << work;
  EXPECT_NE(work.find("1.000"), std::string::npos) << "p99 in the bucket up to 1 ms: " << work;
  const std::string u1 = find_line(lines, "u1 ");
  EXPECT_NE(u1.find("50%"), std::string::npos) << u1;
  EXPECT_NE(u1.find("2.00"), std::string::npos) << u1;
  EXPECT_NE(find_line(lines, "source/out -> work/in").find("1.0k"), std::string::npos);
  bool failover = false;
  for (const auto& l : lines) failover = failover || l.find("unit u2 dead, epoch 2: work/1 -> u1") != std::string::npos;
  EXPECT_TRUE(failover);
}

TEST(Top, ShowsMovesNewestFirst) {
  std::string s = state(4, 3000, 4000, 0, false);
  s.insert(s.rfind('}'), R"(,"moves":[
    {"at_s":0.75,"kind":"keys","stage":"work","replica":1,"from":"u1","to":"u1","why":"uneven","drain_ms":1.5},
    {"at_s":2.5,"kind":"move","stage":"work","replica":0,"from":"u1","to":"u0","why":"hot","drain_ms":38.25}])");
  const auto lines = top_lines(s, "", 1.0, "h:1", 120, 40);
  int keys = -1;
  int move = -1;
  for (int i = 0; i < static_cast<int>(lines.size()); ++i) {
    const std::string& l = lines[static_cast<std::size_t>(i)];
    if (l.find("keys work/1 u1 -> u1, drained in 1.5 ms: uneven") != std::string::npos) keys = i;
    if (l.find("move work/0 u1 -> u0, drained in 38.2 ms: hot") != std::string::npos) move = i;
  }
  ASSERT_GE(keys, 0);
  ASSERT_GE(move, 0);
  EXPECT_LT(move, keys) << "newest first";
}

TEST(Top, WithoutAPreviousStateShowsNoRates) {
  const auto lines = top_lines(state(4, 3000, 4000, 0, false), "", 1.0, "h:1", 120, 40);
  EXPECT_NE(find_line(lines, "work ").find("        0 "), std::string::npos) << find_line(lines, "work ");
  EXPECT_EQ(find_line(lines, "none"), "none");
}

TEST(Top, ASmallTerminalGetsShortLinesAndCountsWhatItLeftOut) {
  const auto lines = top_lines(state(4, 3000, 4000, 10, true), state(2, 1000, 2000, 4, false), 1.0, "h:1", 30, 6);
  EXPECT_LE(lines.size(), 6u);
  for (const auto& l : lines) EXPECT_LE(l.size(), 30u) << l;
  bool more = false;
  for (const auto& l : lines) more = more || l.find("+") != std::string::npos;
  EXPECT_TRUE(more) << "a section cut short says so";
  EXPECT_EQ(top_lines("{}", "", 1.0, "h:1", 5, 1).size(), 1u);
}

TEST(Top, WhatIsNotAStateSaysSo) {
  const auto lines = top_lines("<html>", "", 1.0, "h:1", 200, 10);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("no state"), std::string::npos);
}

}  // namespace
}  // namespace swarmflow::cli
