#pragma once
// The small bounded hand-off between a capture thread and the stage's
// process(): finished frames in, taken without ever blocking the taker.

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <string>

#include <swarmflow/envelope.hpp>

namespace swarmflow::video {

/// A frame made by a capture thread: its envelope header and its finished
/// `schema::Frame` payload.
struct CapturedFrame {
  EnvelopeHeader header;
  PayloadPtr payload;
};

/// Bounded queue of captured frames. Files wait for room (no frame is lost);
/// live sources drop the oldest frame instead (the source never blocks). The
/// producer closes it with the way the capture ended; frames queued before
/// that are still taken first.
class FrameQueue {
 public:
  /// How the capture ended (`running` until it does).
  enum class Outcome { running, ended, failed, stopped };
  /// What `try_pop` found.
  enum class Pop { frame, empty, ended, failed, stopped };

  explicit FrameQueue(std::size_t capacity);

  /// Waits for room; false (frame discarded) when the queue is closed meanwhile.
  bool push_wait(CapturedFrame frame);
  /// Never waits: when full, drops the oldest frame. Returns the number of
  /// frames dropped (0 or 1); a closed queue drops `frame` itself.
  std::size_t push_drop_oldest(CapturedFrame frame);
  /// Takes the oldest frame if there is one, else says whether and how the
  /// capture ended (with its message in `*error` for `failed`). Never waits.
  Pop try_pop(CapturedFrame* frame, std::string* error = nullptr);
  /// Ends the capture: wakes a waiting producer, refuses further frames.
  void close(Outcome how, std::string message = {});

  std::size_t size() const;
  std::size_t capacity() const { return capacity_; }

 private:
  const std::size_t capacity_;
  mutable std::mutex mutex_;
  std::condition_variable room_;
  std::deque<CapturedFrame> frames_;
  Outcome outcome_ = Outcome::running;
  std::string message_;
};

}  // namespace swarmflow::video
