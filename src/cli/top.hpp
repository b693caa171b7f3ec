#pragma once
// `swarmflow top HOST:PORT`: attaches to a running coordinator's `--metrics`
// (or `--web`) address, reads /api/v1/state once a second and redraws a
// terminal view of units, stages, edges and failovers. q, Ctrl-C or the
// coordinator going away end it; the terminal is left as it was.

#include <string>
#include <vector>

namespace swarmflow::cli {

/// The view's lines for a terminal of `width` x `height` (each line at most
/// `width` characters, at most `height` lines; sections are cut short with
/// "+N more" when they do not fit), from the state now and the state
/// `interval_s` before (empty: no rates yet; rates use the difference of the
/// states' `duration_s` where it is positive). `address` is shown in the
/// title. Pure: no terminal, no network.
std::vector<std::string> top_lines(const std::string& state, const std::string& previous, double interval_s,
                                   const std::string& address, int width, int height);

/// Runs `swarmflow top`: 0 once asked to quit or once the coordinator it
/// was attached to is gone, 1 when it cannot reach it at all.
int run_top(const std::string& address, double interval_s);

}  // namespace swarmflow::cli
