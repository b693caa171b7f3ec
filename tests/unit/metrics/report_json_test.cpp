#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <swarmflow/report.hpp>

namespace swarmflow {
namespace {

RunReport sample_report() {
  RunReport r;
  r.pipeline = "demo";
  r.ok = true;
  r.finished = true;
  r.duration_s = 1.5;

  StageReport src;
  src.id = "src";
  src.type = "sim.source";
  src.replicas = 2;
  src.processed = 1000;
  src.counters = {{"emitted", 1000}};
  r.stages.push_back(src);

  StageReport work;
  work.id = "work";
  work.type = "sim.work";
  work.replicas = 3;
  work.processed = 990;
  work.errors = 4;
  work.restarts = 2;
  work.dead_letters = 1;
  r.stages.push_back(work);

  StageReport sink;
  sink.id = "sink";
  sink.type = "sim.sink";
  sink.replicas = 1;
  sink.sink = true;
  sink.processed = 985;
  sink.counters = {{"received", 980}, {"lost", 15}, {"duplicate", 2}, {"reordered", 3}, {"extra", -7}};
  sink.latency = LatencySummary{980, 1.25, 4.5, 7.75, 9.0};
  r.stages.push_back(sink);

  StageReport dump;
  dump.id = "dump";
  dump.type = "io.jsonl";
  dump.replicas = 1;
  dump.sink = true;
  dump.processed = 42;
  r.stages.push_back(dump);

  auto edge = [](const char* from, const char* to, std::uint64_t sent, std::uint64_t delivered,
                 std::uint64_t dropped) {
    EdgeReport e;
    e.from = from;
    e.to = to;
    e.sent = sent;
    e.delivered = delivered;
    e.dropped = dropped;
    e.overflow = "block";
    return e;
  };
  r.edges.push_back(edge("src/out", "work/in", 1000, 995, 5));
  r.edges.push_back(edge("work/out", "sink/in", 990, 990, 0));
  return r;
}

TEST(ReportJson, TopLevelFields) {
  const auto j = nlohmann::json::parse(sample_report().to_json());
  EXPECT_EQ(j.at("pipeline"), "demo");
  EXPECT_EQ(j.at("ok"), true);
  EXPECT_EQ(j.at("finished"), true);
  EXPECT_DOUBLE_EQ(j.at("duration_s").get<double>(), 1.5);
  EXPECT_FALSE(j.contains("error"));
  EXPECT_TRUE(j.at("stages").is_object());
  EXPECT_TRUE(j.at("edges").is_array());
  EXPECT_TRUE(j.at("sinks").is_object());
}

TEST(ReportJson, ErrorAppearsOnlyWhenSet) {
  RunReport r = sample_report();
  r.ok = false;
  r.error = "stage work: \"boom\"";
  const auto j = nlohmann::json::parse(r.to_json());
  EXPECT_EQ(j.at("ok"), false);
  EXPECT_EQ(j.at("error"), "stage work: \"boom\"");
}

TEST(ReportJson, StagesByIdWithCounters) {
  const auto j = nlohmann::json::parse(sample_report().to_json());
  const auto& stages = j.at("stages");
  ASSERT_EQ(stages.size(), 4U);
  const auto& work = stages.at("work");
  EXPECT_EQ(work.at("type"), "sim.work");
  EXPECT_EQ(work.at("replicas"), 3);
  EXPECT_EQ(work.at("processed"), 990);
  EXPECT_EQ(work.at("errors"), 4);
  EXPECT_EQ(work.at("restarts"), 2);
  EXPECT_EQ(work.at("dead_letters"), 1);
  EXPECT_TRUE(work.at("counters").is_object());
  EXPECT_TRUE(work.at("counters").empty());
  EXPECT_EQ(stages.at("src").at("counters").at("emitted"), 1000);
  EXPECT_EQ(stages.at("sink").at("counters").at("extra"), -7);
}

TEST(ReportJson, EdgesInOrder) {
  const auto j = nlohmann::json::parse(sample_report().to_json());
  const auto& edges = j.at("edges");
  ASSERT_EQ(edges.size(), 2U);
  EXPECT_EQ(edges[0].at("from"), "src/out");
  EXPECT_EQ(edges[0].at("to"), "work/in");
  EXPECT_EQ(edges[0].at("sent"), 1000);
  EXPECT_EQ(edges[0].at("delivered"), 995);
  EXPECT_EQ(edges[0].at("dropped"), 5);
  EXPECT_EQ(edges[1].at("from"), "work/out");
}

TEST(ReportJson, SinksListEveryStageMarkedSink) {
  const auto j = nlohmann::json::parse(sample_report().to_json());
  const auto& sinks = j.at("sinks");
  ASSERT_EQ(sinks.size(), 2U);
  EXPECT_FALSE(sinks.contains("src"));
  EXPECT_FALSE(sinks.contains("work"));

  const auto& sink = sinks.at("sink");
  EXPECT_EQ(sink.at("received"), 980);
  EXPECT_EQ(sink.at("lost"), 15);
  EXPECT_EQ(sink.at("duplicate"), 2);
  EXPECT_EQ(sink.at("reordered"), 3);
  EXPECT_DOUBLE_EQ(sink.at("latency_ms").at("p50").get<double>(), 1.25);
  EXPECT_DOUBLE_EQ(sink.at("latency_ms").at("p99").get<double>(), 4.5);
  EXPECT_DOUBLE_EQ(sink.at("latency_ms").at("p999").get<double>(), 7.75);
  EXPECT_DOUBLE_EQ(sink.at("latency_ms").at("max").get<double>(), 9.0);
  EXPECT_EQ(sink.at("counters").at("received"), 980);
}

TEST(ReportJson, SinkWithoutCountersFallsBackToProcessed) {
  const auto j = nlohmann::json::parse(sample_report().to_json());
  const auto& dump = j.at("sinks").at("dump");
  EXPECT_EQ(dump.at("received"), 42);
  EXPECT_EQ(dump.at("lost"), 0);
  EXPECT_EQ(dump.at("duplicate"), 0);
  EXPECT_EQ(dump.at("reordered"), 0);
  EXPECT_DOUBLE_EQ(dump.at("latency_ms").at("p50").get<double>(), 0.0);
}

TEST(ReportJson, EmptyReportIsValid) {
  const auto j = nlohmann::json::parse(RunReport{}.to_json());
  EXPECT_EQ(j.at("pipeline"), "");
  EXPECT_EQ(j.at("finished"), false);
  EXPECT_TRUE(j.at("stages").empty());
  EXPECT_TRUE(j.at("edges").empty());
  EXPECT_TRUE(j.at("sinks").empty());
}

TEST(ReportJson, CoordinatorCountsRefusedHandshakes) {
  RunReport r = sample_report();
  EXPECT_EQ(nlohmann::json::parse(r.to_json()).at("coordinator").at("refused_handshakes"), 0);
  r.coordinator.refused_handshakes = 7;
  EXPECT_EQ(nlohmann::json::parse(r.to_json()).at("coordinator").at("refused_handshakes"), 7);
}

TEST(ReportJson, InvalidUtf8DoesNotBreakTheReport) {
  RunReport r = sample_report();
  r.error = "bad byte \xff here";
  const auto j = nlohmann::json::parse(r.to_json());
  EXPECT_TRUE(j.at("error").is_string());
}

TEST(ReportJson, WrittenAsNlohmannDumpsItWithEveryPartFilled) {
  // The report is written by hand (it is made at every look of the web view
  // and top): it must be the text nlohmann's dump(2) makes of it, so every
  // reader sees what it saw before. Doubles of every form, nulls, odd
  // strings, and every part of the report.
  RunReport r = sample_report();
  r.error = "tab\there \"quoted\" back\\slash \x01 w\xc3\xb6rk \xe2\x82\xac \xf0\x9f\x98\x80";
  r.duration_s = 12345678.0;
  r.stages[1].residence = LatencySummary{3, 0.00012, 1e-7, 2.5e20, 1234567.125};
  r.stages[1].histograms["size_mm"] = ValueSummary{4, 2.5, 0.001, 1e16, {{0.5, 1}, {12.0, 2}, {1e-5, 1}}};
  r.edges[0].latency = LatencySummary{1, 0.1, 0.3, 1.0 / 3.0, 100.0};
  UnitReport u;
  u.id = "u\n0";
  u.utilisation = 0.83;
  u.speed = 1.0;
  u.rejected_by_reason["bad_header"] = 4;
  r.units.push_back(u);
  u.id = "u1";
  u.clock_known = true;
  u.clock_offset_ms = -0.25;
  u.clock_error_ms = 0.0;
  r.units.push_back(u);
  FailoverReport f;
  f.unit = "u1";
  f.moved = {"work/0", "sink/0"};
  f.lost_why = {"src/0 was on it"};
  r.failovers.push_back(f);
  f.first_output_ms = 12.5;
  r.failovers.push_back(f);
  MoveReport m;
  m.kind = "move";
  m.stage = "work";
  m.latency_p99_around_ms = 3.0;
  r.moves.push_back(m);
  ConsensusReport c;
  c.stage = "vote";
  c.decisions = 9;
  c.added_latency_p99_ms = 0.75;
  r.consensus.push_back(c);
  ReplicaReport x;
  x.stage = "work";
  x.unit = "u1";
  x.service_buckets = {1, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3};
  x.service_sum_s = 0.5;
  r.replicas.push_back(x);
  x.replica = 1;
  x.standby = true;
  r.replicas.push_back(x);
  StageReport us;
  us.id = "report";
  us.type = "ultrasound.report";
  us.counters = {{"frames", 10}, {"lesions_truth", 4}, {"lesions_truth.cyst", 2}, {"dice_sum_ppm", 3600000},
                 {"dice_sum_ppm.cyst", 1800000}, {"facts", 12}, {"facts_right", 11}, {"latency_p99_us", 41500}};
  r.stages.push_back(us);
  const std::string text = r.to_json();
  EXPECT_EQ(nlohmann::ordered_json::parse(text).dump(2), text);
  const auto j = nlohmann::json::parse(text);
  EXPECT_TRUE(j.at("units").at("u\n0").at("clock_offset_ms").is_null());
  EXPECT_EQ(j.at("units").at("u1").at("clock_offset_ms"), -0.25);
  EXPECT_TRUE(j.at("ultrasound").at("flow_error_mean").is_null()) << "no vessels: no ratio";
  EXPECT_EQ(j.at("ultrasound").at("dice_by_type").at("cyst"), 0.9);
  EXPECT_EQ(j.at("replicas").at(0).at("service_s").at("le").at("0.0001"), 3);
  EXPECT_EQ(j.at("replicas").at(0).at("service_s").at("count"), 6);
  EXPECT_EQ(j.at("stages").at("work").at("residence_ms").at("p999"), 2.5e20);
  EXPECT_TRUE(RunReport{}.to_json() == nlohmann::ordered_json::parse(RunReport{}.to_json()).dump(2));
}

TEST(ReportJson, InvalidUtf8BecomesTheReplacementCharacter) {
  RunReport r;
  r.error = "a\xff" "b\xc3" "c\xed\xa0\x80" "d\xf4\x90\x80\x80" "e\xc3\xa9";
  const auto j = nlohmann::json::parse(r.to_json());
  const std::string e = j.at("error");
  EXPECT_EQ(e.substr(0, 5), "a\xef\xbf\xbd" "b") << "a lone byte";
  EXPECT_EQ(e.substr(e.size() - 3), "e\xc3\xa9") << "valid text stays";
  EXPECT_EQ(e.find("\xed\xa0\x80"), std::string::npos) << "no surrogates";
  EXPECT_EQ(e.find("\xf4\x90"), std::string::npos) << "nothing above U+10FFFF";
}

TEST(Report, StageAndEdgeLookup) {
  const RunReport r = sample_report();
  ASSERT_NE(r.stage("work"), nullptr);
  EXPECT_EQ(r.stage("work")->type, "sim.work");
  EXPECT_EQ(r.stage("nope"), nullptr);
  ASSERT_NE(r.edge("src/out", "work/in"), nullptr);
  EXPECT_EQ(r.edge("src/out", "work/in")->dropped, 5U);
  EXPECT_EQ(r.edge("work/in", "src/out"), nullptr);
}

}  // namespace
}  // namespace swarmflow
