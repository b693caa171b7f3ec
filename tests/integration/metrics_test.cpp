// `--metrics HOST:PORT` against the real tools: promtool checks what a
// running pipeline serves, and a Prometheus server (Debian's) scrapes a
// two-process pipeline and answers a PromQL query over its HTTP API.
// Bounded waits, no timing asserted.

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "support/http_poll.hpp"
#include "support/process.hpp"

namespace {

using swarmflow::testing::free_port;
using swarmflow::testing::slurp;
using swarmflow::testing::spawn_cli;
using swarmflow::testing::spawn_program;
using swarmflow::testing::TempDir;
using swarmflow::testing::wait_exit_within;

constexpr std::chrono::seconds kPatience{30};

/// GET http://127.0.0.1:PORT/PATH until it answers 200 and `until` holds; "" after kPatience.
std::string get(int port, const std::string& path, const std::function<bool(const std::string&)>& until = nullptr) {
  return swarmflow::testing::http_get_until(port, path, kPatience, until);
}

/// A paced endless pipeline: source and sink on u0, a keyed work stage on u1.
std::string two_units(const TempDir& dir) {
  return dir.write("metrics.yaml",
                   "pipeline: metrics\ncoordinator: \"ipc://" + dir.file("c.sock") + "\"\nunits:\n"
                   "  - {id: u0, endpoint: \"ipc://" + dir.file("u0.sock") + "\"}\n"
                   "  - {id: u1, endpoint: \"ipc://" + dir.file("u1.sock") + "\"}\n"
                   "stages:\n"
                   "  - {id: source, type: sim.source, params: {count: 0, rate_hz: 2000, streams: 4},\n"
                   "     placement: {units: [u0]}}\n"
                   "  - {id: work, type: sim.work, replicas: 2, key: stream, inputs: {in: source/out},\n"
                   "     params: {service_us: 50}, placement: {units: [u1]}}\n"
                   "  - {id: sink, type: sim.sink, inputs: {in: work/out}, placement: {units: [u0]}}\n");
}

TEST(Metrics, PromtoolAcceptsWhatARunningPipelineServes) {
  TempDir dir;
  const int port = free_port();
  const std::string file = dir.write("one.yaml",
                                     "pipeline: \"one \\\"quoted\\\"\"\nstages:\n"
                                     "  - {id: source, type: sim.source, params: {count: 0, rate_hz: 1000}}\n"
                                     "  - {id: \"sink\", type: sim.sink, inputs: {in: source/out}}\n");
  pid_t run = spawn_cli({"run", file, "--quiet", "--metrics", "127.0.0.1:" + std::to_string(port)},
                        dir.file("run.out"), dir.file("run.err"));
  const std::string text = get(port, "/metrics", [](const std::string& body) {
    return body.find("swarmflow_replica_processed_total{stage=\"sink\",replica=\"0\",unit=\"u0\"} 0\n") ==
           std::string::npos;  // the sink has processed something
  });
  kill(run, SIGINT);
  EXPECT_EQ(wait_exit_within(run, kPatience), 0) << slurp(dir.file("run.err"));
  ASSERT_FALSE(text.empty()) << slurp(dir.file("run.err"));
  EXPECT_NE(text.find("# TYPE swarmflow_sink_latency_seconds histogram"), std::string::npos) << text;
  const std::string metrics = dir.write("metrics.txt", text);
  pid_t check = spawn_program({"promtool", "check", "metrics"}, dir.file("promtool.out"), dir.file("promtool.err"), metrics);
  ASSERT_GT(check, 0) << "promtool is not installed (scripts/bootstrap.sh installs prometheus)";
  EXPECT_EQ(wait_exit_within(check, kPatience), 0) << slurp(dir.file("promtool.out")) << slurp(dir.file("promtool.err"));
}

TEST(Metrics, PrometheusScrapesATwoProcessPipelineAndAnswersAQuery) {
  TempDir dir;
  const std::string file = two_units(dir);
  const int coordinator_port = free_port();
  const int unit_port = free_port();
  const int prometheus_port = free_port();
  pid_t u1 = spawn_cli({"unit", file, "--id", "u1", "--metrics", "127.0.0.1:" + std::to_string(unit_port)},
                       dir.file("u1.out"), dir.file("u1.err"));
  pid_t coordinator =
      spawn_cli({"run", file, "--quiet", "--units", "u0", "--metrics", "127.0.0.1:" + std::to_string(coordinator_port)},
                dir.file("c.out"), dir.file("c.err"));
  const std::string config = dir.write(
      "prometheus.yml", "global: {scrape_interval: 200ms, evaluation_interval: 1s}\n"
                        "scrape_configs:\n"
                        "  - job_name: swarmflow\n"
                        "    static_configs:\n"
                        "      - targets: ['127.0.0.1:" + std::to_string(coordinator_port) + "', '127.0.0.1:" +
                        std::to_string(unit_port) + "']\n");
  pid_t prometheus = spawn_program({"prometheus", "--config.file=" + config, "--storage.tsdb.path=" + dir.file("tsdb"),
                            "--web.listen-address=127.0.0.1:" + std::to_string(prometheus_port)},
                           dir.file("prometheus.out"), dir.file("prometheus.err"));
  ASSERT_GT(prometheus, 0) << "prometheus is not installed (scripts/bootstrap.sh installs it)";
  // The work stage runs on u1 only: its figures come from the unit process.
  const std::string query = "/api/v1/query?query=" +
                            httplib::detail::encode_query_param("sum(swarmflow_replica_processed_total{stage=\"work\"})");
  const std::string answer = get(prometheus_port, query, [](const std::string& body) {
    const auto j = nlohmann::json::parse(body, nullptr, false);
    if (!j.is_object() || j["status"] != "success" || j["data"]["result"].empty()) return false;
    return std::stod(j["data"]["result"][0]["value"][1].get<std::string>()) > 0;
  });
  kill(prometheus, SIGTERM);
  kill(coordinator, SIGINT);
  EXPECT_NE(wait_exit_within(prometheus, kPatience), -1);
  EXPECT_EQ(wait_exit_within(coordinator, kPatience), 0) << slurp(dir.file("c.err"));
  EXPECT_NE(wait_exit_within(u1, kPatience), -1) << slurp(dir.file("u1.err"));
  EXPECT_FALSE(answer.empty()) << "no answer with the work stage's figures: " << slurp(dir.file("prometheus.err"));
}

}  // namespace
