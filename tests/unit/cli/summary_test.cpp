// The summary `swarmflow run` prints: a sink's reorder count comes with a
// note saying what it means, and when it is expected; it keeps off standard
// output when that carries data, and --quiet drops it.

#include <gtest/gtest.h>

#include <swarmflow/runtime.hpp>

#include "cli/progress.hpp"

namespace {

swarmflow::StageReport stage(const std::string& id, int replicas, bool sink = false) {
  swarmflow::StageReport s;
  s.id = id;
  s.type = sink ? "sim.sink" : "sim.work";
  s.replicas = replicas;
  s.sink = sink;
  return s;
}

swarmflow::EdgeReport edge(const std::string& from, const std::string& to) {
  swarmflow::EdgeReport e;
  e.from = from + "/out";
  e.to = to + "/in";
  e.overflow = "block";
  return e;
}

/// source -> work (`work_replicas`) -> sink, with `reordered` at the sink.
swarmflow::RunReport run(int work_replicas, std::int64_t reordered) {
  swarmflow::RunReport r;
  r.pipeline = "p";
  r.stages = {stage("source", 1), stage("work", work_replicas), stage("sink", 1, true)};
  r.stages[2].counters["reordered"] = reordered;
  r.edges = {edge("source", "work"), edge("work", "sink")};
  return r;
}

TEST(Summary, ReorderBehindAnUnkeyedParallelStageIsCalledExpected) {
  const std::string text = swarmflow::cli::summary_table(run(3, 42), {});
  EXPECT_NE(text.find("expected here, not a loss"), std::string::npos) << text;
  EXPECT_NE(text.find("work (3 replicas)"), std::string::npos) << text;
  EXPECT_NE(text.find("key: stream"), std::string::npos) << text;
}

TEST(Summary, ReorderBehindKeyedOrSingleStagesIsExplainedNotExcused) {
  for (const auto& text : {swarmflow::cli::summary_table(run(3, 42), {"work"}),
                           swarmflow::cli::summary_table(run(1, 42), {})}) {
    EXPECT_NE(text.find("sink: reorder = envelopes of a stream that arrived after a later one"), std::string::npos)
        << text;
    EXPECT_EQ(text.find("expected here"), std::string::npos) << text;
  }
}

TEST(Summary, NoReorderNoNote) {
  const std::string text = swarmflow::cli::summary_table(run(3, 0), {});
  EXPECT_EQ(text.find("reorder ="), std::string::npos) << text;
}

TEST(Summary, AnUnkeyedSinkWithSeveralReplicasIsNamed) {
  swarmflow::RunReport r = run(1, 0);
  r.stages[2].replicas = 2;
  r.stages[2].counters["lost"] = 8;
  const std::string unkeyed = swarmflow::cli::summary_table(r, {});
  EXPECT_NE(unkeyed.find("sink: 2 replicas without a key"), std::string::npos) << unkeyed;
  const std::string keyed = swarmflow::cli::summary_table(r, {"sink"});
  EXPECT_EQ(keyed.find("without a key"), std::string::npos) << keyed;
}

TEST(Summary, EachFailoverIsListedWithWhatMovedWhatWasLostAndTheReplays) {
  swarmflow::RunReport r = run(2, 0);
  EXPECT_EQ(swarmflow::cli::summary_table(r).find("failovers"), std::string::npos);
  r.edges[0].replayed = 12;
  r.stages[2].counters["duplicates_dropped"] = 5;
  swarmflow::FailoverReport f;
  f.unit = "u1";
  f.detected_s = 3.5;
  f.silent_ms = 251;
  f.epoch = 2;
  f.moved = {"work/0 -> u2"};
  f.lost = {"source/1"};
  f.lost_why = {"pinned"};
  f.first_output_ms = 4.25;
  f.replayed = 12;
  f.duplicates_dropped = 5;
  r.failovers.push_back(f);
  const std::string text = swarmflow::cli::summary_table(r);
  EXPECT_NE(text.find("failovers: 1; envelopes replayed 12, duplicates dropped 5"), std::string::npos) << text;
  EXPECT_NE(text.find("3.50 s  unit u1 dead (silent 251 ms), epoch 2: work/0 -> u2; first output 4.2 ms after; "
                      "replayed 12, duplicates dropped 5; lost with it (what they had not sent): source/1 (pinned)"),
            std::string::npos)
      << text;
  f.cause = "left";
  r.failovers = {f};
  EXPECT_NE(swarmflow::cli::summary_table(r).find("3.50 s  unit u1 left, epoch 2"), std::string::npos)
      << swarmflow::cli::summary_table(r);
}

TEST(Summary, EachMoveIsListedWithItsDrainAndLatencyAndTheProgressLineCountsThem) {
  swarmflow::RunReport r = run(2, 0);
  EXPECT_EQ(swarmflow::cli::summary_table(r).find("moves:"), std::string::npos);
  const swarmflow::RunReport before = r;
  swarmflow::MoveReport m;
  m.at_s = 2.5;
  m.kind = "move";
  m.stage = "work";
  m.replica = 0;
  m.from = "w0";
  m.to = "w4";
  m.why = "unit 'w0' busy 100% (over 85%)";
  m.epoch = 7;
  m.drain_ms = 38.25;
  m.latency_p99_before_ms = 12.5;
  r.moves.push_back(m);
  const std::string text = swarmflow::cli::summary_table(r);
  EXPECT_NE(text.find("moves: 1"), std::string::npos) << text;
  EXPECT_NE(text.find("2.50s  move  work/0"), std::string::npos) << text;
  EXPECT_NE(text.find("w0 -> w4"), std::string::npos) << text;
  EXPECT_NE(text.find("38.25"), std::string::npos) << text;
  EXPECT_NE(text.find("12.50"), std::string::npos) << text;
  EXPECT_NE(text.find("unit 'w0' busy 100% (over 85%)"), std::string::npos) << text;
  const std::string line = swarmflow::cli::progress_line(r, before, 1.0);
  EXPECT_NE(line.find("moves 1 (move work/0 w0->w4)"), std::string::npos) << line;
  EXPECT_EQ(swarmflow::cli::progress_line(r, r, 1.0).find("(move"), std::string::npos) << "only when it happens";
}

TEST(SummaryTarget, QuietPrintsNoSummaryAndDataOnStdoutSendsItToStderr) {
  using swarmflow::cli::SummaryTarget, swarmflow::cli::summary_target;
  EXPECT_EQ(summary_target(false, false), SummaryTarget::standard_output);
  EXPECT_EQ(summary_target(false, true), SummaryTarget::standard_error);
  EXPECT_EQ(summary_target(true, false), SummaryTarget::nowhere);
  EXPECT_EQ(summary_target(true, true), SummaryTarget::nowhere);
}

/// Whether the pipeline of `stages` (YAML list entries) writes to stdout.
bool stdout_is_data(const std::string& stages) {
  swarmflow::Runtime rt;
  std::vector<swarmflow::Diagnostic> diagnostics;
  auto spec = swarmflow::config::load_pipeline_string("pipeline: p\nstages:\n" + stages, "p.yaml", rt.registry(),
                                                      diagnostics);
  EXPECT_TRUE(spec.has_value()) << swarmflow::format_diagnostics(diagnostics);
  return spec && swarmflow::cli::writes_to_stdout(*spec, rt.registry());
}

TEST(SummaryTarget, AStagePathOfDashAsWrittenOrByDefaultIsStdout) {
  const std::string source = "  - {id: s, type: sim.source}\n";
  EXPECT_FALSE(stdout_is_data(source + "  - {id: k, type: sim.sink, inputs: {in: s/out}}\n"));
  EXPECT_TRUE(stdout_is_data(source + "  - {id: j, type: io.jsonl, inputs: {in: s/out}}\n"));
  EXPECT_TRUE(stdout_is_data(source + "  - {id: j, type: io.jsonl, inputs: {in: s/out}, params: {path: \"-\"}}\n"));
  EXPECT_FALSE(stdout_is_data(source + "  - {id: j, type: io.jsonl, inputs: {in: s/out}, params: {path: out.jsonl}}\n"));
}

TEST(Summary, EachVoterHasALineWithItsDecisionsAndAddedLatency) {
  swarmflow::RunReport r = run(3, 0);
  swarmflow::ConsensusReport c;
  c.stage = "vote";
  c.decisions = 2000;
  c.wrong = 1;
  c.checked = 1999;
  c.without_quorum = 3;
  c.corrections = 4;
  c.leader_changes = 2;
  c.added_latency_p50_ms = 0.04;
  c.added_latency_p99_ms = 0.5;
  r.consensus.push_back(c);
  const std::string text = swarmflow::cli::summary_table(r, {});
  EXPECT_NE(text.find("consensus vote: 2000 decisions, 1 wrong (of 1999 checked), 3 without quorum, 4 corrections, "
                      "2 leader changes; added latency p50 0.040 ms, p99 0.500 ms"),
            std::string::npos)
      << text;
  EXPECT_EQ(swarmflow::cli::summary_table(run(3, 0), {}).find("consensus"), std::string::npos);
}

}  // namespace
