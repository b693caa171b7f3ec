// The `swarmflow` command as a function (swarmflow/cli.hpp): run, validate,
// graph and describe pipelines; calibrate a camera; make keys; print its
// shell completion. Exit codes: 0 ok, 1 runtime failure, 2 invalid pipeline
// or usage.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <set>
#include <thread>
#include <variant>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <swarmflow/cli.hpp>
#include <swarmflow/log.hpp>
#include <swarmflow/swarmflow.hpp>
#include <swarmflow/version.hpp>

#include "cli/catalogue.hpp"
#include "cli/completion.hpp"
#include "cli/metrics_server.hpp"
#include "cli/progress.hpp"
#include "cli/serve_api.hpp"
#include "cli/top.hpp"
#include "config/pipeline_spec.hpp"
#include "graph/graph.hpp"
#include "lm/serve_hub.hpp"
#include "metrics/prometheus.hpp"

// The packs on OpenCV and GStreamer that this build has (SWARMFLOW_WITH_*).
#if SWARMFLOW_WITH_VIDEO
#include "video/video.hpp"
#endif
#if SWARMFLOW_WITH_VISION
#include "vision/vision.hpp"
#endif
#if SWARMFLOW_WITH_INSPECTION
#include "inspection/batch_quality.hpp"
#include "inspection/inspection.hpp"
#endif
#if SWARMFLOW_WITH_ULTRASOUND
#include "ultrasound/ultrasound.hpp"
#endif
#if SWARMFLOW_WITH_VIDEO && SWARMFLOW_WITH_VISION
#define SWARMFLOW_WITH_CALIBRATE 1
#include "cli/calibrate.hpp"
#endif

namespace {

constexpr int kExitOk = 0;
constexpr int kExitRuntime = 1;
constexpr int kExitInvalid = 2;

std::atomic<int> g_signals{0};

void on_signal(int) {
  if (g_signals.fetch_add(1) >= 1) _exit(kExitRuntime);  // second signal: stop now
}

/// Adds the packs of this build beyond the runtime's own (sim, io).
void register_media_packs([[maybe_unused]] swarmflow::Registry& registry) {
#if SWARMFLOW_WITH_VIDEO
  swarmflow::register_video_stages(registry);
#endif
#if SWARMFLOW_WITH_VISION
  swarmflow::register_vision_stages(registry);
#endif
#if SWARMFLOW_WITH_INSPECTION
  swarmflow::register_inspection_stages(registry);
  swarmflow::inspection::register_batch_quality(registry);
#endif
#if SWARMFLOW_WITH_ULTRASOUND
  swarmflow::register_ultrasound_stages(registry);
#endif
}

/// The stage types every registry of this command gets beyond the runtime's
/// own packs: the packs of this build, the application's own (CliOptions),
/// then the plugins of SWARMFLOW_PLUGIN_PATH, then those of `--plugin`.
struct StageSources {
  const swarmflow::CliOptions* options = nullptr;
  std::vector<std::string> plugins;  ///< --plugin, in order

  /// Adds them to `registry`; false, having said why, when one fails.
  bool add_to(swarmflow::Registry& registry) const {
    register_media_packs(registry);
    for (const auto& pack : options->stage_packs) {
      if (swarmflow::Status s = pack(registry); !s.ok()) {
        std::fprintf(stderr, "%s: %s\n", options->program.c_str(), s.message().c_str());
        return false;
      }
    }
    if (const char* path = std::getenv("SWARMFLOW_PLUGIN_PATH"); path != nullptr) {
      if (swarmflow::Status s = registry.load_plugins(path); !s.ok()) {
        std::fprintf(stderr, "%s: SWARMFLOW_PLUGIN_PATH: %s\n", options->program.c_str(), s.message().c_str());
        return false;
      }
    }
    for (const auto& p : plugins) {
      if (swarmflow::Status s = registry.load_plugin(p); !s.ok()) {
        std::fprintf(stderr, "%s: --plugin: %s\n", options->program.c_str(), s.message().c_str());
        return false;
      }
    }
    return true;
  }
};

void install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

int load(swarmflow::Runtime& rt, const std::string& file) {
  std::vector<swarmflow::Diagnostic> diagnostics;
  swarmflow::Status s = rt.load_file(file, &diagnostics);
  if (s.ok()) return kExitOk;
  std::fputs(swarmflow::format_diagnostics(diagnostics).c_str(), stderr);
  std::fprintf(stderr, "%zu error%s in %s\n", diagnostics.size(), diagnostics.size() == 1 ? "" : "s", file.c_str());
  return kExitInvalid;
}

struct RunArgs {
  std::string file;
  std::string report;
  double duration_s = 0;
  bool quiet = false;     ///< --quiet: no progress line, no summary
  bool progress = true;   ///< false for `swarmflow unit`, which still prints its summary
  int threads = 0;
  std::vector<std::string> units;  ///< units hosted here; empty = all
  bool coordinator = true;         ///< false for `swarmflow unit`
  int join_timeout_ms = 30000;
  std::string secret_key;
  std::string metrics;  ///< --metrics HOST:PORT: serve /metrics and /api/v1 there
  std::string web;      ///< --web HOST:PORT: serve the live web view there
  int figures_ms = 500;  ///< --figures-ms: a unit process sends its figures this often
  std::string trace;     ///< --trace FILE: Chrome trace events of a sample of envelopes
  std::uint64_t trace_every = 100;  ///< --trace-every N: sample envelopes whose seq is a multiple of N
  /// `swarmflow serve`: the HTTP API's options (address empty for `run`).
  swarmflow::cli::ServeOptions serve;
  std::size_t max_active = 64;  ///< --max-active: requests in flight at most; more get 429
  /// --follow-backlog: token events a followed pipeline's log keeps for its followers
  std::size_t follow_backlog = swarmflow::lm::ServeHub::kFollowBacklog;
};

/// /api/v1/state: the run report as it stands, on one line (an SSE event
/// carries it as one `data:` line), with the API's version.
std::string api_state(const swarmflow::Runtime& rt) {
  auto j = nlohmann::ordered_json::parse(rt.report().to_json(), nullptr, false);
  if (!j.is_object()) return "{}";
  j["api_version"] = 1;
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

/// What the summary needs to know of the pipeline beyond the report.
struct PipelineFacts {
  std::set<std::string> keyed;  ///< stages keyed (`key:`), for the note on reordering
  bool stdout_is_data = false;  ///< a stage writes to standard output
};

PipelineFacts pipeline_facts(swarmflow::Runtime& rt, const std::string& file) {
  PipelineFacts facts;
  std::vector<swarmflow::Diagnostic> diagnostics;
  if (auto spec = swarmflow::config::load_pipeline_file(file, rt.registry(), diagnostics)) {
    for (const auto& s : spec->stages) {
      if (s.keyed) facts.keyed.insert(s.id);
    }
    facts.stdout_is_data = swarmflow::cli::writes_to_stdout(*spec, rt.registry());
  }
  return facts;
}

/// What GET /health adds of the run: whether it still runs, and the
/// generation figures of its lm.generate stages.
std::string serve_health(const swarmflow::RunReport& report) {
  std::int64_t tokens = 0;
  std::int64_t cancelled = 0;
  std::int64_t refused = 0;
  for (const auto& st : report.stages) {
    if (st.type != "lm.generate") continue;
    auto get = [&st](const char* name) {
      auto it = st.counters.find(name);
      return it == st.counters.end() ? std::int64_t{0} : it->second;
    };
    tokens += get("tokens");
    cancelled += get("cancelled");
    refused += get("refused");
  }
  return "{\"running\": " + std::string(report.finished ? "false" : "true") + ", \"generated_tokens\": " +
         std::to_string(tokens) + ", \"generate_cancelled\": " + std::to_string(cancelled) +
         ", \"generate_refused\": " + std::to_string(refused) + "}";
}

/// How long a unit process waits for its peers to drain after a signal
/// before it leaves without them.
constexpr int kUnitDrainMs = 500;
/// How long a unit process that asked to leave waits for the coordinator
/// to hand its replicas over before it stops as if it could not.
constexpr int kUnitHandOverMs = 5000;

/// What `swarmflow serve` needs of the pipeline: where answers leave
/// (lm.detokenize) and, if it takes requests, where they enter
/// (lm.prompts), in units of this process, and the model it names. False,
/// having said why, when the file cannot serve. `*followed`: it takes no
/// requests, and clients follow the token streams it makes itself.
bool check_servable(swarmflow::Runtime& rt, const RunArgs& args, swarmflow::cli::ServeOptions& serve,
                    bool* followed) {
  std::vector<swarmflow::Diagnostic> diagnostics;
  const auto spec = swarmflow::config::load_pipeline_file(args.file, rt.registry(), diagnostics);
  if (!spec) return false;  // load() has said why
  bool prompts = false;
  bool detokenize = false;
  bool generate = false;
  for (const auto& s : spec->stages) {
    const bool end = s.type == "lm.prompts" || s.type == "lm.detokenize";
    prompts = prompts || s.type == "lm.prompts";
    detokenize = detokenize || s.type == "lm.detokenize";
    if (end && !args.units.empty()) {
      // Its replicas must be on units of this process, where the server is.
      bool here = !s.pin_units.empty();
      for (const auto& u : s.pin_units) {
        here = here && std::find(args.units.begin(), args.units.end(), u) != args.units.end();
      }
      if (!here) {
        std::fprintf(stderr,
                     "swarmflow: serve: stage '%s' (%s) must be pinned to units this process hosts "
                     "(placement: {units: [...]} within --units), since requests enter and answers leave there\n",
                     s.id.c_str(), s.type.c_str());
        return false;
      }
    }
    if (s.type == "lm.generate") {
      generate = true;
      for (const auto& p : s.params) {
        if (p.name == "model" && std::holds_alternative<std::string>(p.value)) {
          serve.model = std::filesystem::path(std::get<std::string>(p.value)).stem().string();
        }
      }
    }
  }
  if (!detokenize) {
    std::fprintf(stderr,
                 "swarmflow: serve: %s has no lm.detokenize stage; token streams leave a served pipeline there "
                 "(requests, if it takes them, enter at lm.prompts; docs/serving.md)\n",
                 args.file.c_str());
    return false;
  }
  *followed = !prompts;
  if (generate && serve.model == "swarmflow") serve.model = "devil-1m";  // lm.generate's default model
  return true;
}

int cmd_run(const RunArgs& args, const StageSources& stages) {
  swarmflow::RuntimeOptions options;
  options.threads = args.threads;
  options.units = args.units;
  options.coordinator = args.coordinator;
  options.join_timeout_ms = args.join_timeout_ms;
  options.secret_key_path = args.secret_key;
  options.figures_ms = args.figures_ms;
  if (!args.trace.empty()) options.trace_every = args.trace_every;
  swarmflow::Runtime rt(options);
  if (!stages.add_to(rt.registry())) return kExitInvalid;
  if (int rc = load(rt, args.file); rc != kExitOk) return rc;
  if (!args.trace.empty() && !std::ofstream(args.trace)) {
    std::fprintf(stderr, "swarmflow: --trace: cannot write to %s\n", args.trace.c_str());
    return kExitInvalid;
  }
  std::unique_ptr<swarmflow::cli::MetricsServer> metrics;
  if (!args.metrics.empty()) {
    std::string error;
    swarmflow::cli::HttpViews views;
    views.metrics = [&rt] { return swarmflow::metrics::to_prometheus(rt.report()); };
    views.state = [&rt] { return api_state(rt); };
    views.set_speed = [&rt](const std::string& unit, double speed) { return rt.set_unit_speed(unit, speed).message(); };
    views.scale = [&rt](const std::string& stage, bool add, const std::string& unit) {
      return (add ? rt.add_replica(stage, unit) : rt.remove_replica(stage)).message();
    };
    views.move = [&rt](const std::string& stage, int replica, const std::string& unit) {
      return rt.move_replica(stage, replica, unit).message();
    };
    metrics = swarmflow::cli::MetricsServer::start("--metrics", args.metrics, std::move(views), &error);
    if (!metrics) {
      std::fprintf(stderr, "swarmflow: %s\n", error.c_str());
      return kExitInvalid;
    }
  }
  // `swarmflow serve`: the HTTP API feeds lm.prompts and is fed by lm.detokenize.
  std::unique_ptr<swarmflow::lm::ServeHub> hub;
  std::unique_ptr<swarmflow::cli::ApiServer> api;
  const bool serving = !args.serve.address.empty();
  if (serving) {
    swarmflow::cli::ServeOptions serve = args.serve;
    bool followed = false;
    if (!check_servable(rt, args, serve, &followed)) return kExitInvalid;
    hub = std::make_unique<swarmflow::lm::ServeHub>(args.max_active, followed, args.follow_backlog);
    std::string error;
    api = swarmflow::cli::ApiServer::start(serve, *hub, [&rt] { return serve_health(rt.report()); }, &error);
    if (!api) {
      std::fprintf(stderr, "swarmflow: %s\n", error.c_str());
      return kExitInvalid;
    }
    swarmflow::lm::attach_serve_hub(hub.get());
    std::signal(SIGPIPE, SIG_IGN);  // a client gone mid-stream is an error on write, not a signal
    if (followed) {
      std::fprintf(stderr, "swarmflow: serving %s (its token streams at /v1/streams) at http://%s:%d\n",
                   args.file.c_str(), serve.address.substr(0, serve.address.rfind(':')).c_str(), api->port());
    } else {
      std::fprintf(stderr, "swarmflow: serving %s (model %s) at http://%s:%d\n", args.file.c_str(),
                   serve.model.c_str(), serve.address.substr(0, serve.address.rfind(':')).c_str(), api->port());
    }
  }
  struct Detach {
    bool on;
    ~Detach() {
      if (on) swarmflow::lm::attach_serve_hub(nullptr);
    }
  } detach{serving};
  std::unique_ptr<swarmflow::cli::MetricsServer> web;
  if (!args.web.empty()) {
    std::string error;
    swarmflow::cli::HttpViews views;
    views.metrics = [&rt] { return swarmflow::metrics::to_prometheus(rt.report()); };
    views.state = [&rt] { return api_state(rt); };
    views.set_speed = [&rt](const std::string& unit, double speed) { return rt.set_unit_speed(unit, speed).message(); };
    views.scale = [&rt](const std::string& stage, bool add, const std::string& unit) {
      return (add ? rt.add_replica(stage, unit) : rt.remove_replica(stage)).message();
    };
    views.move = [&rt](const std::string& stage, int replica, const std::string& unit) {
      return rt.move_replica(stage, replica, unit).message();
    };
    views.web = true;
    web = swarmflow::cli::MetricsServer::start("--web", args.web, std::move(views), &error);
    if (!web) {
      std::fprintf(stderr, "swarmflow: %s\n", error.c_str());
      return kExitInvalid;
    }
  }
  install_signal_handlers();
  swarmflow::Status s = rt.start();
  if (!s.ok()) {
    std::fprintf(stderr, "swarmflow: %s\n", s.message().c_str());
    return kExitRuntime;
  }
  const bool tty = isatty(STDERR_FILENO) != 0;
  const auto t0 = std::chrono::steady_clock::now();
  auto last_print = t0;
  swarmflow::RunReport previous = rt.report();
  bool stop_sent = false;
  bool streams_ended = false;
  bool leave_asked = false;
  bool leaving = false;
  auto stop_time = t0;
  while (true) {
    std::this_thread::sleep_for(std::chrono::milliseconds(args.coordinator ? 100 : 20));
    swarmflow::RunReport now = rt.report();
    const auto t = std::chrono::steady_clock::now();
    const double elapsed = std::chrono::duration<double>(t - t0).count();
    if (now.finished) {
      // A followed pipeline whose sources have ended: its followers read to
      // the end of its streams, and the server answers until it is stopped.
      if (serving && hub->followed() && !stop_sent) {
        if (!streams_ended) {
          hub->end_streams();
          streams_ended = true;
          if (!args.quiet) {
            std::fputs("\nswarmflow: the pipeline has finished; its streams stay at /v1/streams until stopped "
                       "(SIGINT, SIGTERM or --duration)\n",
                       stderr);
          }
        }
        if (g_signals.load() == 0 && !(args.duration_s > 0 && elapsed >= args.duration_s)) continue;
        api->stop();
        hub->close();
      }
      break;
    }
    // A unit process asked to stop leaves the run: the coordinator hands its
    // replicas over to the other units and the run goes on without it.
    if (!stop_sent && !leave_asked && !args.coordinator && g_signals.load() > 0) {
      leave_asked = true;
      leaving = rt.leave().ok();
      if (leaving) {
        stop_time = t;
        continue;
      }
    }
    // No handover (the coordinator is gone, or it does not answer): stop as below.
    if (leaving && (!rt.leave().ok() ||
                    std::chrono::duration<double, std::milli>(t - stop_time).count() >= kUnitHandOverMs)) {
      leaving = false;
    }
    if (!stop_sent && !leaving && (g_signals.load() > 0 || (args.duration_s > 0 && elapsed >= args.duration_s))) {
      if (g_signals.load() > 0 && !args.quiet && args.progress) {
        std::fputs("\nswarmflow: stopping, draining what is in flight (again to abort)\n", stderr);
      }
      if (serving) {
        // No new requests; streams being answered are cut off (and cancelled).
        api->stop();
        hub->close();
      }
      rt.request_stop();
      stop_sent = true;
      stop_time = t;
    }
    // A unit process cannot wait for peers that may be gone: after a short
    // drain it leaves, and what was still in flight is reported lost.
    if (stop_sent && !args.coordinator && g_signals.load() > 0 &&
        std::chrono::duration<double, std::milli>(t - stop_time).count() >= kUnitDrainMs) {
      rt.abort("unit stopped by a signal before its peers drained");
      break;
    }
    const double since = std::chrono::duration<double>(t - last_print).count();
    if (!args.quiet && args.progress && since >= (tty ? 0.5 : 2.0)) {
      const std::string line = swarmflow::cli::progress_line(now, previous, since);
      std::fprintf(stderr, tty ? "\r%s\x1b[K" : "%s\n", line.c_str());
      previous = std::move(now);
      last_print = t;
    }
  }
  s = rt.wait();
  if (!args.quiet && args.progress && tty) std::fputs("\n", stderr);
  const swarmflow::RunReport report = rt.report();
  const PipelineFacts facts = pipeline_facts(rt, args.file);
  switch (swarmflow::cli::summary_target(args.quiet, facts.stdout_is_data)) {
    case swarmflow::cli::SummaryTarget::standard_output:
      std::fputs(swarmflow::cli::summary_table(report, facts.keyed).c_str(), stdout);
      break;
    case swarmflow::cli::SummaryTarget::standard_error:
      std::fputs(swarmflow::cli::summary_table(report, facts.keyed).c_str(), stderr);
      break;
    case swarmflow::cli::SummaryTarget::nowhere:
      break;
  }
  if (!args.report.empty()) {
    std::ofstream out(args.report);
    out << report.to_json() << '\n';
    if (!out) {
      std::fprintf(stderr, "swarmflow: cannot write report to %s\n", args.report.c_str());
      return kExitRuntime;
    }
  }
  if (!args.trace.empty()) {
    std::ofstream out(args.trace);
    out << rt.trace() << '\n';
    if (!out) {
      std::fprintf(stderr, "swarmflow: cannot write the trace to %s\n", args.trace.c_str());
      return kExitRuntime;
    }
  }
  if (!s.ok()) {
    std::fprintf(stderr, "swarmflow: run failed: %s\n", s.message().c_str());
    // A unit told to leave by a signal has done what it was asked.
    return (!args.coordinator && g_signals.load() > 0) ? kExitOk : kExitRuntime;
  }
  return kExitOk;
}

int cmd_keygen(const std::string& path, bool force) {
  // `keygen keys/u0.key` in a fresh checkout: make `keys/` first.
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(parent, ec);
    if (ec) {
      std::fprintf(stderr, "swarmflow: cannot create the folder %s for %s: %s\n", parent.c_str(), path.c_str(),
                   ec.message().c_str());
      return kExitRuntime;
    }
  }
  swarmflow::Status s = swarmflow::write_key_pair(path, force);
  if (!s.ok()) {
    std::fprintf(stderr, "swarmflow: %s\n", s.message().c_str());
    return kExitRuntime;
  }
  std::printf("wrote %s (secret, keep it private) and %s.pub (public: list it as the unit's public_key)\n",
              path.c_str(), path.c_str());
  return kExitOk;
}

/// The pipeline in `file`, checked against `registry` (the runtime's packs,
/// then `stages`) as a run would check it, its `plugins:` loaded; null, with
/// every mistake printed, when it does not hold. No runtime is made: checking
/// allocates nothing of a run (replica figures, routing), so a file of
/// 100,000 stages validates in the memory its text and graph need.
std::optional<swarmflow::config::PipelineSpec> check_file(swarmflow::Registry& registry, const StageSources& stages,
                                                          const std::string& file) {
  swarmflow::register_builtin_stages(registry);
  if (!stages.add_to(registry)) return std::nullopt;
  std::vector<swarmflow::Diagnostic> diagnostics;
  auto spec = swarmflow::config::load_pipeline_file(
      file, registry, diagnostics, [&registry](const std::string& path) { return registry.load_plugin(path); });
  if (!spec) {
    std::fputs(swarmflow::format_diagnostics(diagnostics).c_str(), stderr);
    std::fprintf(stderr, "%zu error%s in %s\n", diagnostics.size(), diagnostics.size() == 1 ? "" : "s", file.c_str());
  }
  return spec;
}

int cmd_validate(const std::string& file, const StageSources& stages) {
  swarmflow::Registry registry;
  if (!check_file(registry, stages, file)) return kExitInvalid;
  std::printf("%s: ok\n", file.c_str());
  return kExitOk;
}

int cmd_graph(const std::string& file, const StageSources& stages) {
  swarmflow::Registry registry;
  const auto spec = check_file(registry, stages, file);
  if (!spec) return kExitInvalid;
  std::fputs(swarmflow::graph::Graph::build(*spec, registry).to_dot(spec->name).c_str(), stdout);
  return kExitOk;
}

/// What `swarmflow describe` prints.
enum class DescribeFormat { text, json, markdown };

int cmd_describe(const std::string& what, DescribeFormat format, const StageSources& stages) {
  swarmflow::Runtime rt;
  if (!stages.add_to(rt.registry())) return kExitInvalid;
  const auto& registry = rt.registry();
  std::string error;
  const auto entries = swarmflow::cli::select_stages(registry, what, &error);
  if (entries.empty()) {
    std::fprintf(stderr, "swarmflow: %s\n", error.c_str());
    return kExitInvalid;
  }
  switch (format) {
    case DescribeFormat::json:
      std::fputs(swarmflow::cli::describe_json(entries).c_str(), stdout);
      return kExitOk;
    case DescribeFormat::markdown:
      if (what.empty() || registry.find(what) != nullptr) {
        std::fprintf(stderr, "swarmflow: --markdown writes the page of one pack: %s\n",
                     what.empty() ? "name it" : ("'" + what + "' is a stage type").c_str());
        return kExitInvalid;
      }
      std::fputs(swarmflow::cli::describe_markdown(what, entries).c_str(), stdout);
      return kExitOk;
    case DescribeFormat::text:
      break;
  }
  if (what.empty()) {
    for (const auto& e : entries) std::printf("%-24s %s\n", e.type->name.c_str(), e.type->description.c_str());
    return kExitOk;
  }
  for (std::size_t i = 0; i < entries.size(); ++i) {
    if (i > 0) std::fputs("\n\n", stdout);
    std::fputs(swarmflow::cli::describe_text(entries[i]).c_str(), stdout);
  }
  return kExitOk;
}

int cmd_completion(const CLI::App& app, const std::string& shell, const StageSources& stages) {
  if (shell != "bash") {
    std::fprintf(stderr, "swarmflow: no completion for '%s' (there is one for bash)\n", shell.c_str());
    return kExitInvalid;
  }
  swarmflow::Runtime rt;
  if (!stages.add_to(rt.registry())) return kExitInvalid;
  std::vector<std::string> types;
  for (const auto* t : rt.registry().all()) types.push_back(t->name);
  std::fputs(swarmflow::cli::bash_completion(app, types).c_str(), stdout);
  return kExitOk;
}

}  // namespace

namespace swarmflow {

int cli_main(int argc, char** argv, const CliOptions& cli_options) {
  CLI::App app{cli_options.program + ": actor-model streaming pipelines"};
  app.require_subcommand(1);
  // Options of the command itself may also follow the subcommand.
  app.fallthrough();
  using swarmflow::cli::kFileValue, swarmflow::cli::kPipelineValue, swarmflow::cli::kShellValue,
      swarmflow::cli::kStageTypeValue;
  app.set_version_flag("--version", cli_options.program + " " + SWARMFLOW_VERSION_STRING, "print the version and exit");
  StageSources stages;
  stages.options = &cli_options;
  std::string log_level;
  std::string log_file;
  app.add_option("--log-level", log_level, "trace, debug, info (default), warn, error or off; else $SWARMFLOW_LOG")
      ->type_name("LEVEL");
  app.add_option("--log-file", log_file, "append log lines to this file instead of standard error")
      ->type_name(kFileValue);
  app.add_option("--plugin", stages.plugins,
                 "load a stage pack built as a shared library (repeatable; SWARMFLOW_PLUGIN_PATH also lists them)")
      ->type_name(kFileValue);

  RunArgs run_args;
  auto* run = app.add_subcommand("run", "run a pipeline until its sources end (Ctrl-C stops it cleanly)");
  run->add_option("file", run_args.file, "pipeline definition (YAML)")->required()->type_name(kPipelineValue);
  run->add_option("--report", run_args.report, "write the run report as JSON to this file")->type_name(kFileValue);
  run->add_option("--duration", run_args.duration_s, "stop sources after this many seconds");
  run->add_option("--threads", run_args.threads, "worker threads per unit");
  run->add_flag("--quiet", run_args.quiet, "no progress line and no summary: stdout carries data alone");
  run->add_option("--units", run_args.units, "host only these units here (the rest join as `swarmflow unit`)")
      ->delimiter(',');
  run->add_option("--join-timeout-ms", run_args.join_timeout_ms, "how long to wait for units to join");
  run->add_option("--metrics", run_args.metrics, "serve the run's figures for Prometheus at http://HOST:PORT/metrics")
      ->type_name("HOST:PORT");
  run->add_option("--secret-key", run_args.secret_key, "key pair of the units and coordinator hosted here (tcp)")
      ->type_name(kFileValue);
  run->add_option("--web", run_args.web, "serve a live web view of the run at http://HOST:PORT/")
      ->type_name("HOST:PORT");
  run->add_option("--trace", run_args.trace,
                  "write a sample of envelopes' steps as Chrome trace events (Perfetto, chrome://tracing) to this file")
      ->type_name(kFileValue);
  run->add_option("--trace-every", run_args.trace_every, "with --trace: sample the envelopes whose seq is a multiple of N")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 40));

  RunArgs serve_args;
  auto* serve = app.add_subcommand(
      "serve", "run a pipeline behind an OpenAI-compatible HTTP API, or with its token streams to follow, until "
               "stopped (docs/serving.md)");
  serve->add_option("file", serve_args.file,
                    "pipeline definition (YAML) with lm.detokenize, and lm.prompts if it takes requests")
      ->required()
      ->type_name(kPipelineValue);
  serve->add_option("--http", serve_args.serve.address, "serve the API at http://HOST:PORT (port 0: any free one)")
      ->required()
      ->type_name("HOST:PORT");
  serve->add_option("--max-active", serve_args.max_active, "requests in flight at most; more are answered 429")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  serve->add_option("--max-prompt-bytes", serve_args.serve.max_prompt_bytes, "longer prompts are answered 400")
      ->check(CLI::Range(1, 1 << 24))
      ->capture_default_str();
  serve->add_option("--follow-backlog", serve_args.follow_backlog,
                    "a pipeline without lm.prompts: token events kept for clients that follow /v1/streams")
      ->check(CLI::Range(1, 1 << 24))
      ->capture_default_str();
  serve->add_option("--report", serve_args.report, "write the run report as JSON to this file when it stops")
      ->type_name(kFileValue);
  serve->add_option("--duration", serve_args.duration_s, "stop after this many seconds");
  serve->add_option("--threads", serve_args.threads, "worker threads per unit");
  serve->add_flag("--quiet", serve_args.quiet, "no progress line and no summary");
  serve->add_option("--units", serve_args.units, "host only these units here (the rest join as `swarmflow unit`)")
      ->delimiter(',');
  serve->add_option("--join-timeout-ms", serve_args.join_timeout_ms, "how long to wait for units to join");
  serve->add_option("--metrics", serve_args.metrics, "serve the run's figures for Prometheus at http://HOST:PORT/metrics")
      ->type_name("HOST:PORT");
  serve->add_option("--secret-key", serve_args.secret_key, "key pair of the units and coordinator hosted here (tcp)")
      ->type_name(kFileValue);

  RunArgs unit_args;
  unit_args.coordinator = false;
  unit_args.progress = false;
  std::vector<std::string> unit_ids;
  auto* unit = app.add_subcommand("unit", "run one unit of a pipeline as its own process; it joins the coordinator");
  unit->add_option("file", unit_args.file, "pipeline definition (YAML)")->required()->type_name(kPipelineValue);
  unit->add_option("--id", unit_ids, "the unit to run, as listed in the file (or several: u1,u2)")
      ->required()
      ->delimiter(',');
  unit->add_option("--threads", unit_args.threads, "worker threads");
  unit->add_option("--report", unit_args.report, "write this unit's own figures as JSON to this file")
      ->type_name(kFileValue);
  unit->add_option("--join-timeout-ms", unit_args.join_timeout_ms, "how long to wait for the coordinator");
  unit->add_option("--metrics", unit_args.metrics, "serve this unit's figures for Prometheus at http://HOST:PORT/metrics")
      ->type_name("HOST:PORT");
  unit->add_option("--secret-key", unit_args.secret_key, "this unit's key pair file (for tcp endpoints)")
      ->type_name(kFileValue);
  unit->add_option("--trace", unit_args.trace,
                   "write a sample of this unit's envelope steps as Chrome trace events, on the coordinator's clock")
      ->type_name(kFileValue);
  unit->add_option("--trace-every", unit_args.trace_every, "with --trace: sample the envelopes whose seq is a multiple of N")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 40));
  unit->add_option("--figures-ms", unit_args.figures_ms,
                   "send this unit's figures to the coordinator this often, in ms (0: only at the end)")
      ->check(CLI::Range(0, 3600000));

  std::string top_address;
  double top_interval_s = 1.0;
  auto* top = app.add_subcommand("top", "attach to a running coordinator and show its units, stages, edges and failovers");
  top->add_option("address", top_address, "the coordinator's --metrics or --web address")
      ->required()
      ->type_name("HOST:PORT");
  top->add_option("--interval", top_interval_s, "seconds between looks")->check(CLI::Range(0.1, 60.0));

  std::string keygen_path;
  bool keygen_force = false;
  auto* keygen = app.add_subcommand("keygen", "write a CURVE key pair: PATH (secret, mode 0600) and PATH.pub");
  keygen->add_option("path", keygen_path, "where to write the key pair (missing folders are made)")
      ->required()
      ->type_name(kFileValue);
  keygen->add_flag("--force", keygen_force, "replace existing files");

  std::string validate_file;
  auto* validate = app.add_subcommand("validate", "check a pipeline definition and report every mistake");
  validate->add_option("file", validate_file, "pipeline definition (YAML)")->required()->type_name(kPipelineValue);

  std::string graph_file;
  auto* graph = app.add_subcommand("graph", "print a pipeline as Graphviz DOT");
  graph->add_option("file", graph_file, "pipeline definition (YAML)")->required()->type_name(kPipelineValue);

  std::string describe_what;
  bool describe_json = false;
  bool describe_markdown = false;
  auto* describe = app.add_subcommand(
      "describe", "list stage types, or show the ports, parameters and an example of one stage or a pack");
  describe->add_option("type", describe_what, "stage type (sim.work) or pack (vision); none = all")
      ->type_name(kStageTypeValue);
  auto* json_flag = describe->add_flag("--json", describe_json, "print the stages as JSON");
  describe->add_flag("--markdown", describe_markdown, "print a pack's page of docs/stages/ (Markdown)")
      ->excludes(json_flag);

#if SWARMFLOW_WITH_CALIBRATE
  swarmflow::cli::CalibrateArgs calibrate_args;
  auto* calibrate = app.add_subcommand(
      "calibrate", "calibrate a camera from frames of a checkerboard and write its calibration file");
  calibrate->add_option("uri", calibrate_args.uri, "video.source URI of the frames (file://, synthetic://checkerboard?...)")
      ->required();
  calibrate->add_option("--board", calibrate_args.board, "inner corners of the board, WxH (e.g. 9x6)")->required();
  calibrate->add_option("--square-mm", calibrate_args.square_mm, "side of a square of the board, mm")->required();
  calibrate->add_option("--out", calibrate_args.out, "calibration file to write (YAML)")
      ->required()
      ->type_name(kFileValue);
  calibrate->add_option("--frames", calibrate_args.frames, "frames to look at, 0 = until the source ends")
      ->capture_default_str();
  calibrate->add_option("--min-views", calibrate_args.min_views, "refuse with fewer views where the board is found")
      ->capture_default_str();
  calibrate->add_option("--max-rms", calibrate_args.max_rms_px, "refuse above this RMS reprojection error, px")
      ->capture_default_str();
  calibrate->add_option("--plane-frame", calibrate_args.plane_frame,
                        "frame showing the board flat on the working plane (gives mm_per_px)")
      ->capture_default_str();
#endif

  std::string completion_shell;
  auto* completion = app.add_subcommand(
      "completion", "print a shell completion script: source <(swarmflow completion bash)");
  completion->add_option("shell", completion_shell, "the shell (bash)")->required()->type_name(kShellValue);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? kExitOk : kExitInvalid;
  }
  swarmflow::log::Options log_options;
  log_options.file = log_file;
  swarmflow::Status logging = swarmflow::log::choose_level(log_level, std::getenv("SWARMFLOW_LOG"), &log_options.level);
  if (logging.ok()) logging = swarmflow::log::configure(log_options);
  if (!logging.ok()) {
    std::fprintf(stderr, "%s: %s\n", cli_options.program.c_str(), logging.message().c_str());
    return kExitInvalid;
  }
  if (*run) return cmd_run(run_args, stages);
  if (*serve) return cmd_run(serve_args, stages);
  if (*unit) {
    unit_args.units = unit_ids;
    return cmd_run(unit_args, stages);
  }
  if (*top) return swarmflow::cli::run_top(top_address, top_interval_s);
  if (*validate) return cmd_validate(validate_file, stages);
  if (*keygen) return cmd_keygen(keygen_path, keygen_force);
  if (*graph) return cmd_graph(graph_file, stages);
  if (*describe) {
    return cmd_describe(describe_what,
                        describe_json       ? DescribeFormat::json
                        : describe_markdown ? DescribeFormat::markdown
                                            : DescribeFormat::text,
                        stages);
  }
  if (*completion) return cmd_completion(app, completion_shell, stages);
#if SWARMFLOW_WITH_CALIBRATE
  if (*calibrate) {
    swarmflow::Runtime rt;
    if (!stages.add_to(rt.registry())) return kExitInvalid;
    return swarmflow::cli::run_calibrate(rt.registry(), calibrate_args);
  }
#endif
  return kExitInvalid;
}

}  // namespace swarmflow
