// The Prometheus exposition: every family named as documented, HELP and
// TYPE once each, label values escaped, histograms cumulative.

#include <gtest/gtest.h>

#include <map>
#include <sstream>

#include "metrics/prometheus.hpp"

namespace swarmflow::metrics {
namespace {

RunReport odd_report() {
  RunReport r;
  r.pipeline = "line\none \"quoted\" back\\slash";
  StageReport sink;
  sink.id = "sink \"A\"";
  sink.sink = true;
  sink.latency.count = 3;
  sink.latency_le.assign(kServiceBuckets, 0);
  for (int b = 4; b < kServiceBuckets; ++b) sink.latency_le[static_cast<std::size_t>(b)] = 3;  // all at most 1 ms
  sink.latency_sum_s = 0.0015;
  r.stages.push_back(sink);
  EdgeReport e;
  e.from = "src/out";
  e.to = "sink \"A\"/in";
  e.sent = 10;
  e.delivered = 7;
  e.dropped = 3;
  e.too_large = 1;
  r.edges.push_back(e);
  ReplicaReport x;
  x.stage = "wörk\\1";
  x.replica = 2;
  x.unit = "u\n1";
  x.processed = 5;
  x.service_buckets.assign(static_cast<std::size_t>(kServiceBuckets) + 1, 0);
  x.service_buckets[0] = 2;                                           // <= 10 us
  x.service_buckets[5] = 3;                                           // <= 5 ms
  x.service_buckets[static_cast<std::size_t>(kServiceBuckets)] = 1;  // over 5 s
  x.service_sum_s = 7.5;
  r.replicas.push_back(x);
  UnitReport u;
  u.id = "u0";
  u.utilisation = 0.5;
  u.rejected_by_reason["bad_header"] = 4;
  r.units.push_back(u);
  FailoverReport f;
  f.cause = "left";
  r.failovers.push_back(f);
  return r;
}

TEST(Prometheus, LabelValuesAreEscaped) {
  EXPECT_EQ(escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  const std::string text = to_prometheus(odd_report());
  EXPECT_NE(text.find("pipeline=\"line\\none \\\"quoted\\\" back\\\\slash\""), std::string::npos) << text;
  EXPECT_NE(text.find("stage=\"wörk\\\\1\",replica=\"2\",unit=\"u\\n1\""), std::string::npos) << text;
  // No raw newline inside a sample line: every line is a comment or "name{...} value".
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("# ", 0) == 0) continue;
    EXPECT_EQ(line.rfind("swarmflow_", 0), 0U) << line;
    EXPECT_NE(line.find(' '), std::string::npos) << line;
  }
}

TEST(Prometheus, EveryFamilyHasOneHelpAndOneTypeLine) {
  const std::string text = to_prometheus(odd_report());
  std::map<std::string, int> help;
  std::map<std::string, std::string> type;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::string hash, what, name, kind;
    words >> hash >> what >> name >> kind;
    if (hash != "#") continue;
    if (what == "HELP") ++help[name];
    if (what == "TYPE") type[name] = kind;
  }
  for (const char* family :
       {"swarmflow_edge_sent_total", "swarmflow_edge_delivered_total", "swarmflow_edge_dropped_total",
        "swarmflow_replica_queue_depth", "swarmflow_replica_processed_total", "swarmflow_replica_errors_total",
        "swarmflow_replica_restarts_total", "swarmflow_stage_service_seconds", "swarmflow_sink_latency_seconds",
        "swarmflow_unit_utilization", "swarmflow_transport_rejected_total", "swarmflow_failovers_total",
        "swarmflow_moves_total"}) {
    EXPECT_EQ(help[family], 1) << family;
    EXPECT_FALSE(type[family].empty()) << family;
  }
  EXPECT_EQ(type["swarmflow_stage_service_seconds"], "histogram");
  EXPECT_EQ(type["swarmflow_sink_latency_seconds"], "histogram");
  EXPECT_EQ(type["swarmflow_replica_queue_depth"], "gauge");
  EXPECT_EQ(type["swarmflow_edge_sent_total"], "counter");
}

TEST(Prometheus, DropsAreSplitByReasonAndHistogramsAreCumulative) {
  const std::string text = to_prometheus(odd_report());
  EXPECT_NE(text.find("reason=\"overflow\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("reason=\"too_large\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("swarmflow_transport_rejected_total{unit=\"u0\",reason=\"bad_header\"} 4\n"), std::string::npos);
  EXPECT_NE(text.find("swarmflow_failovers_total{cause=\"left\"} 1\n"), std::string::npos);
  const std::string labels = "stage=\"wörk\\\\1\",replica=\"2\",unit=\"u\\n1\"";
  EXPECT_NE(text.find("swarmflow_stage_service_seconds_bucket{" + labels + ",le=\"1e-05\"} 2\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("swarmflow_stage_service_seconds_bucket{" + labels + ",le=\"0.005\"} 5\n"), std::string::npos);
  EXPECT_NE(text.find("swarmflow_stage_service_seconds_bucket{" + labels + ",le=\"5\"} 5\n"), std::string::npos);
  EXPECT_NE(text.find("swarmflow_stage_service_seconds_bucket{" + labels + ",le=\"+Inf\"} 6\n"), std::string::npos);
  EXPECT_NE(text.find("swarmflow_stage_service_seconds_count{" + labels + "} 6\n"), std::string::npos);
  EXPECT_NE(text.find("swarmflow_stage_service_seconds_sum{" + labels + "} 7.5\n"), std::string::npos);
  EXPECT_NE(text.find("swarmflow_sink_latency_seconds_bucket{stage=\"sink \\\"A\\\"\",le=\"0.001\"} 3\n"),
            std::string::npos)
      << text;
}

TEST(Prometheus, GeneratorsTtftAndTpotAreSummariesInSeconds) {
  RunReport r = odd_report();
  StageReport gen;
  gen.id = "gen";
  gen.type = "lm.generate";
  gen.counters["tokens"] = 96;
  ValueSummary ttft;
  ttft.count = 4;
  ttft.mean = 375;
  ttft.p50 = 250;
  ttft.p99 = 500;
  gen.histograms["ttft_ms"] = ttft;
  ValueSummary tpot;
  tpot.count = 4;
  tpot.mean = 125;
  tpot.p50 = 125;
  tpot.p99 = 250;
  gen.histograms["tpot_ms"] = tpot;
  r.stages.push_back(gen);
  const std::string text = to_prometheus(r);
  EXPECT_NE(text.find("# TYPE swarmflow_generate_ttft_seconds summary\n"), std::string::npos) << text;
  EXPECT_NE(text.find("swarmflow_generate_ttft_seconds{stage=\"gen\",quantile=\"0.99\"} 0.5\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("swarmflow_generate_ttft_seconds_count{stage=\"gen\"} 4\n"), std::string::npos);
  EXPECT_NE(text.find("swarmflow_generate_ttft_seconds_sum{stage=\"gen\"} 1.5\n"), std::string::npos) << text;
  EXPECT_NE(text.find("swarmflow_generate_tpot_seconds{stage=\"gen\",quantile=\"0.5\"} 0.125\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("swarmflow_generate_tokens_total{stage=\"gen\"} 96\n"), std::string::npos);
  EXPECT_NE(text.find("swarmflow_stage_observed{stage=\"gen\",name=\"ttft_ms\",quantile=\"0.5\"} 250\n"),
            std::string::npos)
      << text;
}

}  // namespace
}  // namespace swarmflow::metrics
