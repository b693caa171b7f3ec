#pragma once
// Text the `swarmflow` command prints: the live progress line and the summary.

#include <string>

#include <swarmflow/report.hpp>

namespace swarmflow::cli {

/// One line: elapsed time, then per stage its rate since `previous`, queue
/// depth and drops on its inputs.
std::string progress_line(const RunReport& now, const RunReport& previous, double interval_s);

/// The table printed when a run ends: stages, edges and sinks.
std::string summary_table(const RunReport& report);

}  // namespace swarmflow::cli
