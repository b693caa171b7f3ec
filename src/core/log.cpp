// swarmflow's log on spdlog (swarmflow/log.hpp).

#include <swarmflow/log.hpp>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <memory>
#include <mutex>
#include <vector>

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

namespace swarmflow::log {

namespace {

/// The logger of the process. Log lines are rare (failures, peers coming and
/// going), so one mutex around the logger and the units is cheap.
struct State {
  std::mutex mutex;
  std::shared_ptr<spdlog::logger> logger;
  std::string units = "-";
  std::atomic<int> level{static_cast<int>(Level::info)};
};

State& state() {
  static State s;
  return s;
}

std::shared_ptr<spdlog::logger> make_logger(spdlog::sink_ptr sink) {
  auto logger = std::make_shared<spdlog::logger>("swarmflow", std::move(sink));
  logger->set_pattern("%Y-%m-%d %H:%M:%S.%e %l %v");
  logger->set_level(spdlog::level::trace);  // the level is tested before a line is made
  logger->flush_on(spdlog::level::trace);   // every line reaches the file at once
  return logger;
}

spdlog::level::level_enum to_spdlog(Level level) {
  switch (level) {
    case Level::trace: return spdlog::level::trace;
    case Level::debug: return spdlog::level::debug;
    case Level::info: return spdlog::level::info;
    case Level::warn: return spdlog::level::warn;
    case Level::error: return spdlog::level::err;
    case Level::off: break;
  }
  return spdlog::level::off;
}

void write_v(Level level, const char* format, va_list args) {
  if (!enabled(level)) return;
  va_list copy;
  va_copy(copy, args);
  char small[512];
  const int n = std::vsnprintf(small, sizeof small, format, copy);
  va_end(copy);
  std::string text;
  if (n < 0) {
    text = format;
  } else if (static_cast<std::size_t>(n) < sizeof small) {
    text.assign(small, static_cast<std::size_t>(n));
  } else {
    std::vector<char> big(static_cast<std::size_t>(n) + 1);
    std::vsnprintf(big.data(), big.size(), format, args);
    text.assign(big.data(), static_cast<std::size_t>(n));
  }
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.logger) s.logger = make_logger(std::make_shared<spdlog::sinks::stderr_sink_st>());
  s.logger->log(to_spdlog(level), "{} swarmflow: {}", s.units, text);
}

}  // namespace

const char* to_string(Level level) {
  switch (level) {
    case Level::trace: return "trace";
    case Level::debug: return "debug";
    case Level::info: return "info";
    case Level::warn: return "warn";
    case Level::error: return "error";
    case Level::off: return "off";
  }
  return "?";
}

std::optional<Level> parse_level(std::string_view name) {
  for (Level l : {Level::trace, Level::debug, Level::info, Level::warn, Level::error, Level::off}) {
    if (name == to_string(l)) return l;
  }
  if (name == "warning") return Level::warn;
  return std::nullopt;
}

Status choose_level(const std::string& flag, const char* env, Level* level) {
  const bool from_flag = !flag.empty();
  const std::string name = from_flag ? flag : (env != nullptr ? env : "");
  if (name.empty()) {
    *level = Level::info;
    return {};
  }
  if (auto l = parse_level(name)) {
    *level = *l;
    return {};
  }
  return Status::error(std::string(from_flag ? "--log-level" : "SWARMFLOW_LOG") + ": unknown level '" + name +
                           "' (trace, debug, info, warn, error or off)",
                       StatusCode::invalid_argument);
}

Status configure(const Options& options) {
  spdlog::sink_ptr sink;
  if (options.file.empty()) {
    sink = std::make_shared<spdlog::sinks::stderr_sink_st>();
  } else {
    try {
      sink = std::make_shared<spdlog::sinks::basic_file_sink_st>(options.file, false);
    } catch (const spdlog::spdlog_ex& e) {
      return Status::error("--log-file: cannot open " + options.file + ": " + e.what(), StatusCode::invalid_argument);
    }
  }
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.logger = make_logger(std::move(sink));
  s.level.store(static_cast<int>(options.level), std::memory_order_relaxed);
  return {};
}

void set_units(const std::string& units) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.units = units.empty() ? "-" : units;
}

bool enabled(Level level) {
  return level != Level::off && static_cast<int>(level) >= state().level.load(std::memory_order_relaxed);
}

void write(Level level, const char* format, ...) {
  va_list args;
  va_start(args, format);
  write_v(level, format, args);
  va_end(args);
}

#define SWARMFLOW_LOG_AT(name, level)      \
  void name(const char* format, ...) {     \
    va_list args;                          \
    va_start(args, format);                \
    write_v(level, format, args);          \
    va_end(args);                          \
  }
SWARMFLOW_LOG_AT(trace, Level::trace)
SWARMFLOW_LOG_AT(debug, Level::debug)
SWARMFLOW_LOG_AT(info, Level::info)
SWARMFLOW_LOG_AT(warn, Level::warn)
SWARMFLOW_LOG_AT(error, Level::error)
#undef SWARMFLOW_LOG_AT

}  // namespace swarmflow::log
