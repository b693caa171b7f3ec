#pragma once
// Small GStreamer helpers shared by the video stages. No GStreamer types in
// this header, so stage headers stay free of GStreamer include paths.

#include <cstdint>
#include <mutex>
#include <string>

namespace swarmflow::video {

/// Calls gst_init once per process (std::call_once); safe from any thread.
void ensure_gst_initialised();

/// True when an element factory called `name` is installed (x264enc, ...).
bool gst_element_available(const std::string& name);

/// True when `pattern` is a nick of videotestsrc's `pattern` property
/// (smpte, ball, snow, ...); otherwise `*known` lists the valid ones.
bool is_test_pattern(const std::string& pattern, std::string* known);

/// Logs to stderr as "swarmflow: NAME: message", at most once per interval;
/// the messages in between are counted and reported with the next one.
class RateLimitedLog {
 public:
  explicit RateLimitedLog(std::string name, std::int64_t interval_ns = 1'000'000'000);
  void log(const std::string& message);

 private:
  std::string name_;
  std::int64_t interval_ns_;
  std::mutex mutex_;
  std::int64_t last_ns_ = 0;
  std::int64_t suppressed_ = 0;
};

}  // namespace swarmflow::video
