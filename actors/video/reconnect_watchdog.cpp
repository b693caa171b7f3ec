#include "video/reconnect_watchdog.hpp"

#include <algorithm>

namespace swarmflow::video {

ReconnectWatchdog::ReconnectWatchdog(std::int64_t initial_backoff_ns, std::int64_t max_backoff_ns,
                                     std::int64_t max_reconnects)
    : initial_ns_(std::max<std::int64_t>(initial_backoff_ns, 0)),
      max_ns_(std::max(max_backoff_ns, initial_ns_)),
      max_reconnects_(max_reconnects) {}

std::optional<std::int64_t> ReconnectWatchdog::on_failure(std::int64_t now_ns) {
  if (!in_outage_) {
    in_outage_ = true;
    outage_start_ns_ = now_ns;
  }
  ++failures_;
  if (max_reconnects_ > 0 && failures_ > max_reconnects_) return std::nullopt;
  std::int64_t delay = initial_ns_;
  for (std::int64_t i = 1; i < failures_ && delay < max_ns_; ++i) delay *= 2;
  return now_ns + std::min(delay, max_ns_);
}

std::int64_t ReconnectWatchdog::on_frame(std::int64_t now_ns) {
  failures_ = 0;
  if (!in_outage_) return 0;
  in_outage_ = false;
  return std::max<std::int64_t>(now_ns - outage_start_ns_, 0);
}

}  // namespace swarmflow::video
