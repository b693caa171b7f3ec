#pragma once
// When to rebuild a live source's pipeline after it failed, and how long the
// outage lasted. Pure logic fed with explicit time (no GStreamer, no clock).

#include <cstdint>
#include <optional>

namespace swarmflow::video {

/// Exponential backoff between reconnect attempts of a live source. A failure
/// (an error or an unexpected end of stream) starts an outage; each further
/// failure without a frame in between doubles the wait, up to a cap. The first
/// frame after an outage ends it and resets the backoff.
class ReconnectWatchdog {
 public:
  /// `max_reconnects` is the number of consecutive attempts without a frame
  /// after which the source gives up; 0 = never give up.
  ReconnectWatchdog(std::int64_t initial_backoff_ns, std::int64_t max_backoff_ns, std::int64_t max_reconnects);

  /// The pipeline failed at `now_ns`. Returns when to rebuild it, or nothing
  /// when `max_reconnects` consecutive attempts have failed.
  std::optional<std::int64_t> on_failure(std::int64_t now_ns);
  /// A frame arrived at `now_ns`. Returns the length of the outage it ends, in
  /// nanoseconds, or 0 when there was none.
  std::int64_t on_frame(std::int64_t now_ns);

  /// True between a failure and the next frame.
  bool in_outage() const { return in_outage_; }
  /// Failures since the last frame.
  std::int64_t consecutive_failures() const { return failures_; }

 private:
  std::int64_t initial_ns_;
  std::int64_t max_ns_;
  std::int64_t max_reconnects_;
  std::int64_t failures_ = 0;
  bool in_outage_ = false;
  std::int64_t outage_start_ns_ = 0;
};

}  // namespace swarmflow::video
