#pragma once
// The run's figures in the Prometheus text exposition format (version
// 0.0.4), as `--metrics HOST:PORT` serves them at /metrics. Every family has
// HELP and TYPE lines; label values are escaped, so any stage or unit name
// is safe. docs/observability.md lists the families and their labels.

#include <string>

#include <swarmflow/report.hpp>

namespace swarmflow::metrics {

std::string to_prometheus(const RunReport& report);

/// A label value escaped for the text format: backslash, double quote and
/// newline become \\, \" and \n.
std::string escape_label(const std::string& value);

}  // namespace swarmflow::metrics
