#pragma once
/// \file log.hpp
/// swarmflow's log: levels, a timestamp and the units of this process in
/// every line, to standard error or a file. Written on spdlog, which stays out
/// of this header: the calls take printf-style formats (checked by the
/// compiler) and cost one level test when their level is off.
///
/// A line reads
///   2026-12-01 17:31:18.123 warning u1 swarmflow: unit u1: lost the coordinator at ...
/// The `swarmflow` command sets the level with `--log-level` or the
/// environment variable `SWARMFLOW_LOG`, and the destination with `--log-file`.

#include <optional>
#include <string>
#include <string_view>

#include <swarmflow/status.hpp>

namespace swarmflow::log {

/// How much is logged: everything at the level set and above.
enum class Level { trace, debug, info, warn, error, off };

/// "trace", "debug", "info", "warn", "error" or "off".
const char* to_string(Level level);
/// The level called `name` (as `to_string` writes it; "warning" is also
/// accepted), or nothing.
std::optional<Level> parse_level(std::string_view name);

/// The level of a process: `flag` (--log-level) when given, else `env`
/// (SWARMFLOW_LOG) when set and not empty, else info. An unknown name is an
/// error that names where it came from and the accepted names.
Status choose_level(const std::string& flag, const char* env, Level* level);

/// Where lines go and from which level on. Safe to call again; the last call wins.
struct Options {
  Level level = Level::info;
  std::string file;  ///< append to this file; empty = standard error
};
Status configure(const Options& options);

/// The units this process hosts, shown in every line ("-" until set).
void set_units(const std::string& units);

/// True when a line of `level` would be written.
bool enabled(Level level);

/// Writes one line of `level`: `format` and its arguments as for printf.
void write(Level level, const char* format, ...) __attribute__((format(printf, 2, 3)));

// One function per level, for the call sites.
void trace(const char* format, ...) __attribute__((format(printf, 1, 2)));
void debug(const char* format, ...) __attribute__((format(printf, 1, 2)));
void info(const char* format, ...) __attribute__((format(printf, 1, 2)));
void warn(const char* format, ...) __attribute__((format(printf, 1, 2)));
void error(const char* format, ...) __attribute__((format(printf, 1, 2)));

}  // namespace swarmflow::log
