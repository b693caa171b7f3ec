#pragma once
// Text the `swarmflow` command prints: the live progress line and the summary.

#include <set>
#include <string>

#include <swarmflow/report.hpp>

namespace swarmflow::cli {

/// One line: elapsed time, then per stage its rate since `previous`, queue
/// depth and drops on its inputs.
std::string progress_line(const RunReport& now, const RunReport& previous, double interval_s);

/// The table printed when a run ends: stages, edges and sinks, then a note
/// on what a sink's nonzero `reorder` means. `keyed` holds the ids of the
/// stages the pipeline keys (`key:`), whose streams stay on one replica;
/// docs/report.md explains every column.
std::string summary_table(const RunReport& report, const std::set<std::string>& keyed = {});

}  // namespace swarmflow::cli
