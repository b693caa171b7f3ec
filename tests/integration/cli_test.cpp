// The `swarmflow` command end to end: exit codes, diagnostics, the report,
// a clean drain on SIGINT, the version and key files, the graph drawn by dot,
// bash completion, stdout left to data, plugins, the log's level and file.

#include <gtest/gtest.h>

#include <sys/resource.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/json_schema.hpp"
#include "support/process.hpp"

namespace {

using swarmflow::testing::slurp;
using swarmflow::testing::spawn_cli;
using swarmflow::testing::TempDir;
using swarmflow::testing::wait_exit;

struct Result {
  int exit_code = -1;
  std::string out;
  std::string err;
};

/// Runs `script` with bash; its exit code (-1 if it did not exit).
int run_bash(const std::string& script) {
  const std::string command = "bash -c '" + script + "'";
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

Result run_cli(const TempDir& dir, const std::vector<std::string>& args) {
  const std::string out = dir.file("stdout.txt");
  const std::string err = dir.file("stderr.txt");
  Result r;
  r.exit_code = wait_exit(spawn_cli(args, out, err));
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

/// The report conforms to docs/report.schema.json.
void expect_conforms(const nlohmann::json& report) {
  const auto schema = nlohmann::json::parse(slurp(std::string(SWARMFLOW_SOURCE_DIR) + "/docs/report.schema.json"));
  const auto problems = swarmflow::testing::schema_problems(schema, report);
  EXPECT_TRUE(problems.empty()) << ::testing::PrintToString(problems);
}

void expect_conserved(const nlohmann::json& report) {
  for (const auto& e : report["edges"]) {
    EXPECT_EQ(e["sent"].get<std::uint64_t>(), e["delivered"].get<std::uint64_t>() + e["dropped"].get<std::uint64_t>())
        << e.dump();
  }
}

TEST(Cli, RunWritesAReportThatConservesEveryEdge) {
  TempDir dir;
  const std::string yaml = dir.write("p.yaml",
                                     "pipeline: cli\n"
                                     "stages:\n"
                                     "  - {id: src, type: sim.source, params: {count: 2000, streams: 2}}\n"
                                     "  - {id: work, type: sim.work, replicas: 2, key: stream, inputs: {in: src/out}}\n"
                                     "  - {id: sink, type: sim.sink, inputs: {in: work/out}}\n");
  Result r = run_cli(dir, {"run", yaml, "--report", dir.file("report.json")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("pipeline cli: ok"), std::string::npos) << r.out;
  auto report = nlohmann::json::parse(slurp(dir.file("report.json")));
  EXPECT_EQ(report["pipeline"], "cli");
  EXPECT_TRUE(report["ok"].get<bool>());
  EXPECT_GT(report["duration_s"].get<double>(), 0.0);
  EXPECT_EQ(report["stages"]["work"]["processed"], 2000);
  EXPECT_EQ(report["stages"]["work"]["restarts"], 0);
  EXPECT_EQ(report["sinks"]["sink"]["received"], 2000);
  EXPECT_EQ(report["sinks"]["sink"]["lost"], 0);
  EXPECT_EQ(report["sinks"]["sink"]["duplicate"], 0);
  EXPECT_EQ(report["sinks"]["sink"]["reordered"], 0);
  EXPECT_TRUE(report["sinks"]["sink"]["latency_ms"].contains("p99"));
  ASSERT_EQ(report["edges"].size(), 2U);
  expect_conserved(report);
  expect_conforms(report);
}

TEST(Cli, InvalidPipelineExitsWithTwoAndEveryMistakeWithItsPlace) {
  TempDir dir;
  const std::string yaml = dir.write("bad.yaml",
                                     "pipeline: bad\n"
                                     "stages:\n"
                                     "  - {id: src, type: sim.sorce}\n"
                                     "  - id: sink\n"
                                     "    type: sim.sink\n"
                                     "    inputs: {in: nowhere/out}\n");
  Result r = run_cli(dir, {"validate", yaml});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find(yaml + ":3:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("sim.source"), std::string::npos) << "hint names the nearest type: " << r.err;
  EXPECT_NE(r.err.find(yaml + ":6:"), std::string::npos) << r.err;
  EXPECT_EQ(run_cli(dir, {"run", yaml}).exit_code, 2);
}

TEST(Cli, ValidateGraphAndDescribe) {
  TempDir dir;
  const std::string quickstart = std::string(SWARMFLOW_SOURCE_DIR) + "/pipelines/quickstart.yaml";
  EXPECT_EQ(run_cli(dir, {"validate", quickstart}).exit_code, 0);
  Result g = run_cli(dir, {"graph", quickstart});
  EXPECT_EQ(g.exit_code, 0);
  EXPECT_NE(g.out.find("digraph"), std::string::npos);
  EXPECT_NE(g.out.find("\"source\" -> \"work\""), std::string::npos) << g.out;
  Result all = run_cli(dir, {"describe"});
  EXPECT_EQ(all.exit_code, 0);
  for (const char* t : {"sim.source", "sim.work", "sim.sink", "io.jsonl"}) {
    EXPECT_NE(all.out.find(t), std::string::npos) << t;
  }
  Result one = run_cli(dir, {"describe", "sim.work"});
  EXPECT_EQ(one.exit_code, 0);
  EXPECT_NE(one.out.find("fail_every"), std::string::npos);
  EXPECT_NE(one.out.find("swarmflow.schema.Blob"), std::string::npos);
  EXPECT_EQ(run_cli(dir, {"describe", "sim.wrk"}).exit_code, 2);
}

TEST(Cli, DescribeAPackAsJsonAndAsMarkdown) {
  TempDir dir;
  Result pack = run_cli(dir, {"describe", "vision"});
  ASSERT_EQ(pack.exit_code, 0) << pack.err;
  const auto all = nlohmann::json::parse(run_cli(dir, {"describe", "--json"}).out);
  for (const auto& s : all["stages"]) {
    if (s["pack"] != "vision") continue;
    EXPECT_NE(pack.out.find(s["type"].get<std::string>() + " — "), std::string::npos) << s["type"];
    EXPECT_NE(pack.out.find(s["example"].get<std::string>()), std::string::npos) << s["type"];
  }
  Result one = run_cli(dir, {"describe", "--json", "video.sink"});
  ASSERT_EQ(one.exit_code, 0) << one.err;
  const auto doc = nlohmann::json::parse(one.out);
  ASSERT_EQ(doc["stages"].size(), 1U);
  bool optional = false;
  for (const auto& p : doc["stages"][0]["inputs"]) optional = optional || p["optional"].get<bool>();
  EXPECT_TRUE(optional) << one.out;
  EXPECT_NE(run_cli(dir, {"describe", "video.sink"}).out.find("(optional)"), std::string::npos);
  Result md = run_cli(dir, {"describe", "--markdown", "sim"});
  ASSERT_EQ(md.exit_code, 0) << md.err;
  EXPECT_EQ(md.out, slurp(std::string(SWARMFLOW_SOURCE_DIR) + "/docs/stages/sim.md"));
  EXPECT_EQ(run_cli(dir, {"describe", "--markdown", "sim.work"}).exit_code, 2);
  EXPECT_EQ(run_cli(dir, {"describe", "--json", "nothing"}).exit_code, 2);
}

TEST(Cli, ValidatesAHundredThousandStageChain) {
  TempDir dir;
  std::string text = "pipeline: long\nstages:\n  - {id: s0, type: sim.source}\n";
  for (int i = 1; i < 100'000; ++i) {
    text += "  - {id: s" + std::to_string(i) + ", type: " + (i + 1 == 100'000 ? "sim.sink" : "sim.work") +
            ", inputs: {in: s" + std::to_string(i - 1) + "/out}}\n";
  }
  const std::string yaml = dir.write("long.yaml", text);
  const auto started = std::chrono::steady_clock::now();
  Result r = run_cli(dir, {"validate", yaml});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  EXPECT_EQ(r.exit_code, 0) << r.err.substr(0, 2000);
  EXPECT_NE(r.out.find(yaml + ": ok"), std::string::npos) << r.out;
  // Checking allocates nothing of a run: no figures for 100,000 replicas
  // (some 2.2 GB when validate made a runtime), only the text and the graph.
  struct rusage usage {};
  ASSERT_EQ(getrusage(RUSAGE_CHILDREN, &usage), 0);
  EXPECT_LT(usage.ru_maxrss, 1024L * 1024L) << "KiB of the largest child";
  std::printf("[   info   ] swarmflow validate on 100000 stages took %.2f s, max RSS %ld KiB\n", seconds,
              usage.ru_maxrss);
}

TEST(Cli, ValidateRefusesMoreUnitsThanTheLimit) {
  TempDir dir;
  const std::string yaml = dir.write("units.yaml",
                                     "pipeline: units\n"
                                     "units: 100000\n"
                                     "stages:\n"
                                     "  - {id: src, type: sim.source}\n");
  Result r = run_cli(dir, {"validate", yaml});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find(yaml + ":2:8: error: units: 100000 is over the limit of 256 units per pipeline"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(run_cli(dir, {"run", yaml}).exit_code, 2);
}

TEST(Cli, SigintDrainsAndReportsWhatWasInFlight) {
  TempDir dir;
  const std::string lines = dir.file("lines.jsonl");
  const std::string yaml = dir.write("endless.yaml",
                                     "pipeline: endless\n"
                                     "stages:\n"
                                     "  - {id: src, type: sim.source, params: {count: 0}}\n"
                                     "  - {id: work, type: sim.work, inputs: {in: src/out}, params: {service_us: 100}}\n"
                                     "  - {id: sink, type: sim.sink, inputs: {in: work/out}}\n"
                                     "  - {id: dump, type: io.jsonl, inputs: {in: work/out},\n"
                                     "     params: {path: \"" + lines + "\", flush: true}}\n");
  const std::string report = dir.file("report.json");
  pid_t pid = spawn_cli({"run", yaml, "--quiet", "--report", report}, dir.file("o.txt"), dir.file("e.txt"));
  ASSERT_GT(pid, 0);
  // Wait until envelopes flow end to end, then interrupt.
  while (true) {
    std::ifstream in(lines);
    std::string line;
    int n = 0;
    while (std::getline(in, line) && n < 20) ++n;
    if (n >= 20) break;
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, WNOHANG), 0) << "exited early: " << slurp(dir.file("e.txt"));
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(pid, SIGINT);
  EXPECT_EQ(wait_exit(pid), 0) << slurp(dir.file("e.txt"));
  auto r = nlohmann::json::parse(slurp(report));
  EXPECT_TRUE(r["finished"].get<bool>());
  expect_conserved(r);
  expect_conforms(r);
  // The source is unpaced, so flow control holds it back and nothing is
  // dropped: every envelope it made before the signal reaches the sink.
  const auto produced = r["stages"]["src"]["processed"].get<std::int64_t>();
  EXPECT_GT(produced, 0);
  for (const auto& e : r["edges"]) EXPECT_EQ(e["dropped"], 0) << e.dump();
  EXPECT_EQ(r["sinks"]["sink"]["received"].get<std::int64_t>(), produced);
  EXPECT_EQ(r["sinks"]["sink"]["lost"], 0);
}

TEST(Cli, VersionPrintsTheProjectVersion) {
  TempDir dir;
  Result r = run_cli(dir, {"--version"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, std::string("swarmflow ") + SWARMFLOW_VERSION + "\n");
}

TEST(Cli, KeygenCreatesMissingFolders) {
  TempDir dir;
  const std::string key = dir.file("keys/site-a/u0.key");
  Result r = run_cli(dir, {"keygen", key});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(std::filesystem::is_regular_file(key));
  EXPECT_TRUE(std::filesystem::is_regular_file(key + ".pub"));
  EXPECT_EQ(std::filesystem::status(key).permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  // Again into the same folder: it exists now, the key files too.
  Result again = run_cli(dir, {"keygen", key});
  EXPECT_NE(again.exit_code, 0);
  EXPECT_NE(again.err.find("exists"), std::string::npos) << again.err;
}

TEST(Cli, KeygenWhereNoFolderCanBeMadeSaysWhy) {
  // A regular file where a folder should be: no folder can be made under it,
  // whoever runs the test (root included).
  TempDir dir;
  const std::string blocker = dir.write("not-a-folder", "x\n");
  Result r = run_cli(dir, {"keygen", blocker + "/keys/u0.key"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find(blocker), std::string::npos) << "names the path: " << r.err;
  EXPECT_NE(r.err.find(std::strerror(ENOTDIR)), std::string::npos) << "says why: " << r.err;
  EXPECT_FALSE(std::filesystem::exists(blocker + "/keys/u0.key"));
}

TEST(Cli, GraphPipedThroughDotGivesSvg) {
  // scripts/bootstrap.sh installs graphviz, so this is skipped only elsewhere.
  if (run_bash("command -v dot > /dev/null") != 0) GTEST_SKIP() << "dot (graphviz) is not installed";
  TempDir dir;
  const std::string quickstart = std::string(SWARMFLOW_SOURCE_DIR) + "/pipelines/quickstart.yaml";
  const std::string svg = dir.file("graph.svg");
  const std::string err = dir.file("dot.err");
  ASSERT_EQ(run_bash("set -o pipefail; \"" + std::string(SWARMFLOW_CLI) + "\" graph \"" + quickstart +
                     "\" | dot -Tsvg > \"" + svg + "\" 2> \"" + err + "\""),
            0)
      << slurp(err);
  const std::string text = slurp(svg);
  EXPECT_NE(text.find("<svg"), std::string::npos) << text;
  EXPECT_NE(text.find("</svg>"), std::string::npos) << text;
  for (const char* stage : {"source", "work", "sink"}) {
    EXPECT_NE(text.find(std::string("<title>") + stage + "</title>"), std::string::npos) << stage;
  }
}

/// The words bash completion offers for the command line `words` (the last
/// one being completed), with `script` loaded, in the folder `cwd`.
std::set<std::string> completions(const TempDir& dir, const std::string& script, const std::string& cwd,
                                  const std::vector<std::string>& words) {
  std::string array;
  for (const auto& w : words) array += " \"" + w + "\"";
  const std::string driver = dir.write("complete.sh", "source \"" + script + "\"\n" + "cd \"" + cwd + "\"\n" +
                                                          "COMP_WORDS=(" + array + ")\n" +
                                                          "COMP_CWORD=" + std::to_string(words.size() - 1) + "\n" +
                                                          "_swarmflow\n" + "printf \"%s\\n\" \"${COMPREPLY[@]}\"\n");
  const std::string out = dir.file("complete.out");
  EXPECT_EQ(run_bash("bash \"" + driver + "\" > \"" + out + "\""), 0) << slurp(driver);
  std::set<std::string> result;
  std::istringstream lines(slurp(out));
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty()) result.insert(line);
  }
  return result;
}

TEST(Cli, BashCompletionIsValidBashAndCompletesCommandsFlagsTypesAndPipelines) {
  TempDir dir;
  Result r = run_cli(dir, {"completion", "bash"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string script = dir.write("swarmflow.bash", r.out);
  ASSERT_EQ(run_bash("bash -n \"" + script + "\""), 0) << r.out;

  const std::string files = dir.file("files");
  std::filesystem::create_directories(files + "/pipelines");
  dir.write("files/line.yaml", "");
  dir.write("files/notes.txt", "");
  using Words = std::set<std::string>;
  EXPECT_EQ(completions(dir, script, files, {"swarmflow", "val"}), Words({"validate"}));
  const Words commands = completions(dir, script, files, {"swarmflow", ""});
  for (const char* c : {"run", "unit", "keygen", "validate", "graph", "describe", "completion", "--version"}) {
    EXPECT_EQ(commands.count(c), 1U) << c;
  }
  EXPECT_EQ(completions(dir, script, files, {"swarmflow", "describe", "sim.w"}), Words({"sim.work"}));
  EXPECT_EQ(completions(dir, script, files, {"swarmflow", "run", ""}), Words({"line.yaml", "pipelines"}));
  EXPECT_EQ(completions(dir, script, files, {"swarmflow", "graph", "li"}), Words({"line.yaml"}));
  EXPECT_EQ(completions(dir, script, files, {"swarmflow", "run", "line.yaml", "--rep"}), Words({"--report"}));
  EXPECT_EQ(completions(dir, script, files, {"swarmflow", "run", "line.yaml", "--duration", ""}), Words());
  EXPECT_EQ(completions(dir, script, files, {"swarmflow", "keygen", "no"}), Words({"notes.txt"}));
  EXPECT_EQ(completions(dir, script, files, {"swarmflow", "completion", ""}), Words({"bash"}));

  Result other = run_cli(dir, {"completion", "tcsh"});
  EXPECT_EQ(other.exit_code, 2);
  EXPECT_NE(other.err.find("bash"), std::string::npos) << other.err;
}

TEST(Cli, ACoordinatorWaitingForUnitsSaysWhomItWaitsFor) {
  TempDir dir;
  const std::string yaml = dir.write("wait.yaml", "pipeline: wait\ncoordinator: \"ipc://" + dir.file("c.sock") +
                                                      "\"\nunits:\n"
                                                      "  - {id: u0, endpoint: \"ipc://" + dir.file("u0.sock") + "\"}\n"
                                                      "  - {id: u1, endpoint: \"ipc://" + dir.file("u1.sock") + "\"}\n"
                                                      "stages:\n"
                                                      "  - {id: s, type: sim.source, placement: {units: [u0]}}\n"
                                                      "  - {id: k, type: sim.sink, inputs: {in: s/out}, placement: {units: [u1]}}\n");
  Result r = run_cli(dir, {"run", yaml, "--units", "u0", "--join-timeout-ms", "4000"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("waiting for u1 to join"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("units did not join within 4000 ms: u1"), std::string::npos) << r.err;
}

/// Each line of `text` parsed as JSON; fails the test on a line that is not.
std::vector<nlohmann::json> json_lines(const std::string& text) {
  std::vector<nlohmann::json> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    try {
      out.push_back(nlohmann::json::parse(line));
    } catch (const nlohmann::json::exception& e) {
      ADD_FAILURE() << "not a JSON line: " << line.substr(0, 200);
    }
  }
  return out;
}

const std::string kJsonlToStdout =
    "pipeline: lines\n"
    "stages:\n"
    "  - {id: src, type: sim.source, params: {count: 50}}\n"
    "  - {id: dump, type: io.jsonl, inputs: {in: src/out}, params: {path: \"-\"}}\n";

TEST(Cli, QuietRunWritingJsonlToStdoutGivesOnlyJsonLines) {
  TempDir dir;
  const std::string yaml = dir.write("lines.yaml", kJsonlToStdout);
  Result r = run_cli(dir, {"run", yaml, "--quiet"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json_lines(r.out).size(), 50U) << r.out.substr(0, 2000);
  EXPECT_EQ(r.err.find("pipeline lines: ok"), std::string::npos) << r.err;
  // The same through a JSON parser of the shell's, as a user pipes it.
  if (run_bash("command -v python3 > /dev/null") == 0) {
    EXPECT_EQ(run_bash(std::string("\"") + SWARMFLOW_CLI + "\" run \"" + yaml +
                       "\" --quiet | python3 -c \"import sys, json; [json.loads(l) for l in sys.stdin]\""),
              0);
  }
}

TEST(Cli, ARunWritingToStdoutPrintsItsSummaryOnStderr) {
  TempDir dir;
  const std::string yaml = dir.write("lines.yaml", kJsonlToStdout);
  Result r = run_cli(dir, {"run", yaml});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json_lines(r.out).size(), 50U) << r.out.substr(0, 2000);
  EXPECT_NE(r.err.find("pipeline lines: ok"), std::string::npos) << r.err;
}

TEST(Cli, QuietRunPrintsNoSummary) {
  TempDir dir;
  const std::string yaml = dir.write("q.yaml",
                                     "pipeline: q\n"
                                     "stages:\n"
                                     "  - {id: src, type: sim.source, params: {count: 50}}\n"
                                     "  - {id: sink, type: sim.sink, inputs: {in: src/out}}\n");
  Result r = run_cli(dir, {"run", yaml, "--quiet"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err.find("pipeline q: ok"), std::string::npos) << r.err;
}

/// A pipeline of the test camera through example.brightness into `lines`,
/// loading the plugin with `plugins_line` (empty: the plugin comes otherwise).
std::string brightness_pipeline(const std::string& plugins_line, const std::string& lines) {
  return "pipeline: bright\n" + plugins_line +
         "stages:\n"
         "  - {id: cam, type: video.source, params: {uri: \"test://smpte\", width: 4, height: 2, count: 5}}\n"
         "  - {id: bright, type: example.brightness, inputs: {frames: cam/frames}, params: {gain: 0, offset: 7}}\n"
         "  - {id: out, type: io.jsonl, inputs: {in: bright/frames}, params: {path: \"" + lines + "\"}}\n";
}

/// Every frame in `lines` has its 4x2 BGR pixels set to `value`.
void expect_frames_of(const std::string& lines, std::size_t frames, int value) {
  const auto parsed = json_lines(slurp(lines));
  EXPECT_EQ(parsed.size(), frames);
  for (const auto& line : parsed) {
    const auto& pixels = line["payload"]["pixels"];
    ASSERT_EQ(pixels.size(), 24U) << line.dump();
    for (const auto& p : pixels) EXPECT_EQ(p.get<int>(), value);
  }
}

TEST(Cli, APluginGivenWithPluginIsDescribedValidatedAndRun) {
  TempDir dir;
  Result d = run_cli(dir, {"--plugin", SWARMFLOW_TEST_PLUGIN, "describe", "example.brightness"});
  ASSERT_EQ(d.exit_code, 0) << d.err;
  EXPECT_NE(d.out.find("gain"), std::string::npos) << d.out;
  // The option may also follow the subcommand.
  EXPECT_EQ(run_cli(dir, {"describe", "example", "--plugin", SWARMFLOW_TEST_PLUGIN}).exit_code, 0);
  EXPECT_EQ(run_cli(dir, {"describe", "example.brightness"}).exit_code, 2);

  const std::string lines = dir.file("frames.jsonl");
  const std::string yaml = dir.write("bright.yaml", brightness_pipeline("", lines));
  EXPECT_EQ(run_cli(dir, {"validate", yaml}).exit_code, 2);
  Result v = run_cli(dir, {"validate", yaml, "--plugin", SWARMFLOW_TEST_PLUGIN});
  EXPECT_EQ(v.exit_code, 0) << v.err;
  Result g = run_cli(dir, {"graph", yaml, "--plugin", SWARMFLOW_TEST_PLUGIN});
  EXPECT_NE(g.out.find("example.brightness"), std::string::npos) << g.out << g.err;
  Result r = run_cli(dir, {"--plugin", SWARMFLOW_TEST_PLUGIN, "run", yaml, "--quiet"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_frames_of(lines, 5, 7);
}

TEST(Cli, PluginsListedInThePipelineAreFoundRelativeToIt) {
  TempDir dir;
  std::filesystem::create_directories(dir.file("lib"));
  std::filesystem::copy_file(SWARMFLOW_TEST_PLUGIN, dir.file("lib/libbright.so"));
  const std::string lines = dir.file("frames.jsonl");
  const std::string yaml = dir.write("bright.yaml", brightness_pipeline("plugins: [lib/libbright.so]\n", lines));
  Result r = run_cli(dir, {"run", yaml, "--quiet"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_frames_of(lines, 5, 7);

  const std::string missing =
      dir.write("missing.yaml", brightness_pipeline("plugins:\n  - lib/libnothere.so\n", lines));
  Result m = run_cli(dir, {"validate", missing});
  EXPECT_EQ(m.exit_code, 2);
  EXPECT_NE(m.err.find(missing + ":3:5: error: plugin file not found: " + dir.file("lib/libnothere.so")),
            std::string::npos)
      << m.err;
}

TEST(Cli, APluginBuiltForAnotherSwarmflowIsRefusedNamingBothVersions) {
  TempDir dir;
  const std::string plugin = SWARMFLOW_MISMATCHED_PLUGIN;
  Result r = run_cli(dir, {"--plugin", plugin, "describe"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find(plugin + " was built for swarmflow 99.0.0"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(std::string("this program is swarmflow ") + SWARMFLOW_VERSION), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("asked to register"), std::string::npos) << r.err;

  // Named by the pipeline: the refusal is a diagnostic at its place.
  const std::string yaml = dir.write("p.yaml",
                                     "pipeline: p\n"
                                     "plugins: [\"" + plugin + "\"]\n"
                                     "stages:\n"
                                     "  - {id: src, type: sim.source}\n");
  Result v = run_cli(dir, {"validate", yaml});
  EXPECT_EQ(v.exit_code, 2);
  EXPECT_NE(v.err.find(yaml + ":2:11: error: plugin " + plugin + " was built for swarmflow 99.0.0"),
            std::string::npos)
      << v.err;
}

TEST(Cli, PluginsOnSwarmflowPluginPathAreLoaded) {
  TempDir dir;
  const std::string folder = std::filesystem::path(SWARMFLOW_TEST_PLUGIN).parent_path().string();
  EXPECT_EQ(run_bash("SWARMFLOW_PLUGIN_PATH=" + folder + " \"" SWARMFLOW_CLI
                     "\" describe example.brightness > /dev/null"),
            0);
  // An entry that is not there is a mistake, not something to skip quietly.
  EXPECT_EQ(run_bash("SWARMFLOW_PLUGIN_PATH=" + folder + ":/no/such/folder \"" SWARMFLOW_CLI
                     "\" describe example.brightness > /dev/null 2>&1"),
            2);
}

/// Two units in this process; sim.work fails now and then, which its host logs.
const std::string kFailingWork =
    "pipeline: f\n"
    "units: 2\n"
    "stages:\n"
    "  - {id: src, type: sim.source, params: {count: 200}}\n"
    "  - {id: work, type: sim.work, inputs: {in: src/out}, params: {fail_every: 50}}\n"
    "  - {id: sink, type: sim.sink, inputs: {in: work/out}}\n";

TEST(Cli, LogLinesCarryTimeLevelAndUnitsAndGoToTheLogFile) {
  TempDir dir;
  const std::string yaml = dir.write("f.yaml", kFailingWork);
  Result plain = run_cli(dir, {"run", yaml, "--quiet"});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const std::regex line(R"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} warning u0,u1 swarmflow: work: replica \d failed)");
  EXPECT_TRUE(std::regex_search(plain.err, line)) << plain.err;

  const std::string log = dir.file("logs.txt");
  Result to_file = run_cli(dir, {"run", yaml, "--quiet", "--log-file", log});
  ASSERT_EQ(to_file.exit_code, 0) << to_file.err;
  EXPECT_TRUE(std::regex_search(slurp(log), line)) << slurp(log);
  EXPECT_EQ(to_file.err.find("failed"), std::string::npos) << to_file.err;
}

TEST(Cli, LogLevelFromTheFlagOrSwarmflowLog) {
  TempDir dir;
  const std::string yaml = dir.write("f.yaml", kFailingWork);
  Result off = run_cli(dir, {"run", yaml, "--quiet", "--log-level", "error"});
  ASSERT_EQ(off.exit_code, 0) << off.err;
  EXPECT_EQ(off.err.find("failed"), std::string::npos) << off.err;

  const std::string err = dir.file("env.err");
  EXPECT_EQ(run_bash("SWARMFLOW_LOG=off \"" SWARMFLOW_CLI "\" run \"" + yaml + "\" --quiet 2> \"" + err + "\""), 0);
  EXPECT_EQ(slurp(err), "");
  EXPECT_EQ(run_bash("SWARMFLOW_LOG=loud \"" SWARMFLOW_CLI "\" run \"" + yaml + "\" --quiet 2> \"" + err + "\""), 2);
  EXPECT_NE(slurp(err).find("SWARMFLOW_LOG: unknown level 'loud'"), std::string::npos) << slurp(err);
  EXPECT_EQ(run_cli(dir, {"validate", yaml, "--log-level", "loud"}).exit_code, 2);
}

TEST(Cli, ValidateRefusesACropOutsideTheDeclaredFrameSize) {
  TempDir dir;
  const std::string yaml = dir.write("crop.yaml",
                                     "pipeline: crop\n"
                                     "stages:\n"
                                     "  - {id: cam, type: video.source, params: {uri: \"test://smpte\", width: 320, height: 240}}\n"
                                     "  - id: crop\n"
                                     "    type: vision.crop\n"
                                     "    inputs: {frames: cam/frames}\n"
                                     "    params: {x: 2000, width: 100}\n"
                                     "  - {id: out, type: video.sink, inputs: {frames: crop/frames}}\n");
  Result r = run_cli(dir, {"validate", yaml});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find(yaml + ":7:17: error: the region of stage 'crop' starts at x 2000, y 0, outside the 320x240 "
                              "frames of 'cam/frames'"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(run_cli(dir, {"run", yaml, "--quiet"}).exit_code, 2);
}

}  // namespace
