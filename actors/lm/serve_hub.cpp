#include "lm/serve_hub.hpp"

#include <algorithm>
#include <atomic>

namespace swarmflow::lm {

namespace {
std::atomic<ServeHub*> g_hub{nullptr};
}

void attach_serve_hub(ServeHub* hub) { g_hub.store(hub); }
ServeHub* serve_hub() { return g_hub.load(); }

std::optional<std::uint64_t> ServeHub::admit(ServeRequest request) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (closed_ || active_.size() >= max_active_) {
    ++figures_.overloaded;
    return std::nullopt;
  }
  request.id = next_id_++;
  request.cancel = false;
  const std::uint64_t id = request.id;
  active_.try_emplace(id);
  queue_.push_back(std::move(request));
  ++figures_.admitted;
  return id;
}

bool ServeHub::next(std::uint64_t id, ServeEvent& event, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto it = active_.find(id);
  if (it == active_.end()) return false;
  Active& a = it->second;
  if (!a.ready.wait_for(lock, timeout, [&] { return !a.events.empty(); })) return false;
  event = std::move(it->second.events.front());
  it->second.events.pop_front();
  return true;
}

void ServeHub::cancel(std::uint64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = active_.find(id);
  if (it == active_.end()) return;
  active_.erase(it);
  ++figures_.cancelled;
  // Not yet in the pipeline: it never goes. Else the pipeline is told.
  for (auto q = queue_.begin(); q != queue_.end(); ++q) {
    if (q->id == id && !q->cancel) {
      queue_.erase(q);
      return;
    }
  }
  ServeRequest withdraw;
  withdraw.id = id;
  withdraw.cancel = true;
  queue_.push_back(std::move(withdraw));
}

void ServeHub::forget(std::uint64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (active_.erase(id) > 0) ++figures_.completed;
}

void ServeHub::close() {
  std::lock_guard<std::mutex> lock(mutex_);
  closed_ = true;
}

std::optional<ServeRequest> ServeHub::take() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (queue_.empty()) return std::nullopt;
  ServeRequest r = std::move(queue_.front());
  queue_.pop_front();
  return r;
}

bool ServeHub::closed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return closed_;
}

void ServeHub::deliver(std::uint64_t id, ServeEvent event) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (followed_) {
    if (log_.size() >= backlog_) log_.pop_front();
    log_.push_back(FollowedEvent{log_next_++, id, std::move(event)});
    ++figures_.followed_events;
    log_grew_.notify_all();
    return;
  }
  auto it = active_.find(id);
  if (it == active_.end()) return;
  it->second.events.push_back(std::move(event));
  it->second.ready.notify_one();
}

void ServeHub::end_streams() {
  std::lock_guard<std::mutex> lock(mutex_);
  ended_ = true;
  log_grew_.notify_all();
}

std::uint64_t ServeHub::follow_next() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return log_next_;
}

FollowBatch ServeHub::follow(std::uint64_t from, std::size_t max, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  FollowBatch batch;
  const bool oldest = from == 0;
  from = std::max<std::uint64_t>(from, 1);
  log_grew_.wait_for(lock, timeout, [&] { return log_next_ > from || ended_; });
  const std::uint64_t first = log_.empty() ? log_next_ : log_.front().number;
  if (oldest) from = std::max(from, first);
  if (from < first) {
    batch.lost = first - from;
    figures_.follow_lost += batch.lost;
    from = first;
  }
  for (std::uint64_t k = from - first; k < log_.size() && batch.events.size() < max; ++k) {
    batch.events.push_back(log_[static_cast<std::size_t>(k)]);
  }
  batch.ended = ended_ && from + batch.events.size() >= log_next_;
  return batch;
}

bool ServeHub::add_follower(std::size_t max_followers) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (figures_.followers >= max_followers) return false;
  ++figures_.followers;
  return true;
}

void ServeHub::remove_follower() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (figures_.followers > 0) --figures_.followers;
}

ServeHub::Figures ServeHub::figures() const {
  std::lock_guard<std::mutex> lock(mutex_);
  Figures f = figures_;
  f.active = active_.size();
  f.queued = queue_.size();
  return f;
}

}  // namespace swarmflow::lm
