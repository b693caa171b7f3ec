// RunState's methods: completion, failovers, loads and remote figures.

#include "runtime/run_state.hpp"

#include <algorithm>
#include <chrono>

namespace swarmflow::runtime {

void RunState::replica_finished(int count) {
  std::lock_guard<std::mutex> lock(mutex_);
  const bool was_done = finished_ >= total_replicas;
  finished_ += count;
  if (!was_done && finished_ >= total_replicas) {
    end_ns.store(steady_now_ns());
    cv_.notify_all();
  }
}

void RunState::record_failover(FailoverReport failover, std::int64_t detected_ns, std::int64_t planned_ns) {
  std::lock_guard<std::mutex> lock(mutex_);
  failovers_.push_back(std::move(failover));
  failover_times_.push_back(FailoverTimes{detected_ns, planned_ns});
}

void RunState::record_first_output(std::uint32_t epoch, std::int64_t ns, bool after_plan) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (std::size_t i = 0; i < failovers_.size(); ++i) {
    if (failovers_[i].epoch != epoch) continue;
    const FailoverTimes& t = failover_times_[i];
    const std::int64_t since = after_plan ? t.planned_ns - t.detected_ns + ns : ns - t.detected_ns;
    const double ms = static_cast<double>(std::max<std::int64_t>(0, since)) / 1e6;
    double& first = failovers_[i].first_output_ms;
    if (first < 0 || ms < first) first = ms;
  }
}

std::vector<FailoverReport> RunState::failovers() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return failovers_;
}

void RunState::reset_replicas(int total) {
  std::lock_guard<std::mutex> lock(mutex_);
  total_replicas = total;
  finished_ = 0;
  cv_.notify_all();
}

int RunState::replicas_total() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return total_replicas;
}

void RunState::adopt_replicas(int count) {
  std::lock_guard<std::mutex> lock(mutex_);
  total_replicas += count;
  cv_.notify_all();
}

void RunState::release_replicas(int count) {
  std::lock_guard<std::mutex> lock(mutex_);
  const bool was_done = finished_ >= total_replicas;
  total_replicas -= count;
  if (!was_done && finished_ >= total_replicas) {
    end_ns.store(steady_now_ns());
    cv_.notify_all();
  }
}

void RunState::record_drained_on(int node, int replica, int unit) {
  std::lock_guard<std::mutex> lock(mutex_);
  drained_on_.insert({node, replica, unit});
}

bool RunState::drained_on(int node, int replica, int unit) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return drained_on_.count({node, replica, unit}) != 0;
}

std::vector<std::tuple<int, int, int>> RunState::drained_hosts() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return {drained_on_.begin(), drained_on_.end()};
}

void RunState::abort(const std::string& message) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (error_.empty()) error_ = message;
  if (!aborted_ && finished_ < total_replicas) end_ns.store(steady_now_ns());
  aborted_ = true;
  cv_.notify_all();
}

bool RunState::aborted() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return aborted_;
}

void RunState::record_load(int unit, double utilisation) {
  std::lock_guard<std::mutex> lock(mutex_);
  UnitLoad& l = loads_[unit];
  ++l.reports;
  l.utilisation = utilisation;
  l.at_ns = steady_now_ns();
}

UnitLoad RunState::load(int unit) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = loads_.find(unit);
  return it == loads_.end() ? UnitLoad{} : it->second;
}

void RunState::set_remote_transport(int unit, const RemoteTransportStats& stats) {
  std::lock_guard<std::mutex> lock(mutex_);
  remote_transport_[unit] = stats;
}

std::optional<RemoteTransportStats> RunState::remote_transport(int unit) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = remote_transport_.find(unit);
  if (it == remote_transport_.end()) return std::nullopt;
  return it->second;
}

void RunState::set_clock_offset(int unit, std::int64_t offset_ns, std::int64_t delay_ns) {
  const auto u = static_cast<std::size_t>(unit);
  if (unit < 0 || u >= clock_offset_ns.size()) return;
  clock_offset_ns[u]->store(offset_ns, std::memory_order_relaxed);
  clock_delay_ns[u]->store(delay_ns, std::memory_order_relaxed);
}

std::int64_t RunState::clock_shift_ns(int from, int to) const {
  const auto f = static_cast<std::size_t>(from);
  const auto t = static_cast<std::size_t>(to);
  if (from < 0 || to < 0 || f >= clock_offset_ns.size() || t >= clock_offset_ns.size()) return 0;
  if (clock_delay_ns[f]->load(std::memory_order_relaxed) < 0 || clock_delay_ns[t]->load(std::memory_order_relaxed) < 0) {
    return 0;
  }
  // from's time + its offset = the coordinator's time; minus to's offset = to's time.
  return clock_offset_ns[f]->load(std::memory_order_relaxed) - clock_offset_ns[t]->load(std::memory_order_relaxed);
}

void RunState::fail(const std::string& message) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (error_.empty()) error_ = message;
}

bool RunState::wait_finished(std::int64_t timeout_ms) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto done = [this] { return aborted_ || finished_ >= total_replicas; };
  if (timeout_ms < 0) {
    cv_.wait(lock, done);
    return true;
  }
  return cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), done);
}

bool RunState::ok() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return error_.empty();
}

std::string RunState::error() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return error_;
}

bool RunState::finished() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return aborted_ || finished_ >= total_replicas;
}

}  // namespace swarmflow::runtime

namespace swarmflow::runtime {

void RunState::record_move(MoveReport move) {
  std::lock_guard<std::mutex> lock(mutex_);
  moves_.push_back(std::move(move));
}

std::vector<MoveReport> RunState::moves() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return moves_;
}

void RunState::set_move_latency(std::size_t index, double p99_ms) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (index < moves_.size()) moves_[index].latency_p99_around_ms = p99_ms;
}

std::size_t RunState::move_count() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return moves_.size();
}

}  // namespace swarmflow::runtime
