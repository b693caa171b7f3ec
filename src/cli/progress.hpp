#pragma once
// Text the `swarmflow` command prints: the live progress line and the summary.

#include <cstdint>
#include <set>
#include <string>

#include <swarmflow/registry.hpp>
#include <swarmflow/report.hpp>

#include "config/pipeline_spec.hpp"

namespace swarmflow::cli {

/// The stage counter in which a source says how many envelopes it will
/// produce in all (each replica its own share; the report sums them). Only a
/// source that knows sets it: `sim.source` with a `count`, `video.source` with
/// a `count` or reading a file whose length and frame rate are known.
inline constexpr const char* kExpectedCounter = "expected";

/// One line: elapsed time, then per stage its rate since `previous`, queue
/// depth, drops on its inputs and, for a source that knows its length
/// (`kExpectedCounter`), how far it has come and when it should end.
std::string progress_line(const RunReport& now, const RunReport& previous, double interval_s);

/// How far a source of known length has come: "45% eta 12s" after `done` of
/// `expected` envelopes in `elapsed_s`, the eta at the average rate so far.
/// Empty when the length is unknown (`expected` <= 0); no eta before the
/// first envelope, nor once `done` reaches `expected` ("100%": a restarted
/// file source reads its file again, so `done` may pass `expected`).
std::string completion_text(std::uint64_t done, std::int64_t expected, double elapsed_s);

/// A time left, for people: "8s", "3m05s", "2h07m".
std::string eta_text(double seconds);

/// The table printed when a run ends: stages, edges and sinks, then a note
/// on what a sink's nonzero `reorder` means. `keyed` holds the ids of the
/// stages the pipeline keys (`key:`), whose streams stay on one replica;
/// docs/report.md explains every column.
std::string summary_table(const RunReport& report, const std::set<std::string>& keyed = {});

/// Where `run` prints its summary.
enum class SummaryTarget { standard_output, standard_error, nowhere };

/// `--quiet` prints no summary; a pipeline that writes its data to standard
/// output gets the summary on standard error, so stdout carries data alone.
SummaryTarget summary_target(bool quiet, bool stdout_is_data);

/// True when a stage of `spec` writes to standard output: its string
/// parameter `path` is `-`, as written or by default (io.jsonl's default).
bool writes_to_stdout(const config::PipelineSpec& spec, const Registry& registry);

}  // namespace swarmflow::cli
