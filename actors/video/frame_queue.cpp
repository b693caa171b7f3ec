#include "video/frame_queue.hpp"

#include <algorithm>
#include <utility>

namespace swarmflow::video {

FrameQueue::FrameQueue(std::size_t capacity) : capacity_(std::max<std::size_t>(capacity, 1)) {}

bool FrameQueue::push_wait(CapturedFrame frame) {
  std::unique_lock<std::mutex> lock(mutex_);
  room_.wait(lock, [this] { return outcome_ != Outcome::running || frames_.size() < capacity_; });
  if (outcome_ != Outcome::running) return false;
  frames_.push_back(std::move(frame));
  return true;
}

std::size_t FrameQueue::push_drop_oldest(CapturedFrame frame) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (outcome_ != Outcome::running) return 1;
  std::size_t dropped = 0;
  if (frames_.size() >= capacity_) {
    frames_.pop_front();
    dropped = 1;
  }
  frames_.push_back(std::move(frame));
  return dropped;
}

FrameQueue::Pop FrameQueue::try_pop(CapturedFrame* frame, std::string* error) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!frames_.empty()) {
    *frame = std::move(frames_.front());
    frames_.pop_front();
    lock.unlock();
    room_.notify_one();
    return Pop::frame;
  }
  switch (outcome_) {
    case Outcome::running:
      return Pop::empty;
    case Outcome::ended:
      return Pop::ended;
    case Outcome::failed:
      if (error != nullptr) *error = message_;
      return Pop::failed;
    case Outcome::stopped:
      break;
  }
  return Pop::stopped;
}

void FrameQueue::close(Outcome how, std::string message) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (outcome_ != Outcome::running) return;
    outcome_ = how;
    message_ = std::move(message);
  }
  room_.notify_all();
}

std::size_t FrameQueue::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return frames_.size();
}

}  // namespace swarmflow::video
