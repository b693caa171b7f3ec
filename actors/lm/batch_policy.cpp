#include "lm/batch_policy.hpp"

#include <algorithm>

namespace swarmflow::lm {

std::string BatchPolicy::submit(const BatchRequest& request) {
  if (request.prompt_tokens <= 0) return "empty prompt";
  if (need(request) > settings_.kv_budget_tokens) {
    return "needs " + std::to_string(need(request)) + " tokens of KV cache (prompt " +
           std::to_string(request.prompt_tokens) + " + max_tokens " + std::to_string(request.max_tokens) +
           "), more than the budget of " + std::to_string(settings_.kv_budget_tokens);
  }
  if (static_cast<int>(queue_.size()) >= settings_.max_queue) {
    return "queue full (" + std::to_string(settings_.max_queue) + " requests waiting)";
  }
  queue_.push_back(request);
  return {};
}

StepPlan BatchPolicy::plan(std::int64_t now_ns) {
  StepPlan plan;
  if (running_.empty() && !queue_.empty()) {
    const bool full = static_cast<int>(queue_.size()) >= settings_.max_size;
    const std::int64_t due = queue_.front().arrived_ns + settings_.max_wait_ns;
    if (!full && now_ns < due) {
      plan.wake_ns = due;
      return plan;
    }
  }
  // Oldest first; a request that does not fit waits, and so do those behind it.
  while (!queue_.empty() && static_cast<int>(running_.size()) < settings_.max_size &&
         reserved_ + need(queue_.front()) <= settings_.kv_budget_tokens) {
    running_.push_back(Running{queue_.front(), 0});
    reserved_ += need(queue_.front());
    plan.joined.push_back(queue_.front().id);
    queue_.pop_front();
  }
  int prefill_left = std::max(1, settings_.prefill_chunk);
  for (Running& r : running_) {
    const int prompt = r.request.prompt_tokens;
    StepSlot slot;
    slot.id = r.request.id;
    slot.first = r.fed;
    if (r.fed < prompt) {
      if (prefill_left == 0) continue;
      slot.count = std::min(prompt - r.fed, prefill_left);
      prefill_left -= slot.count;
      slot.samples = r.fed + slot.count == prompt;
    } else {
      slot.count = 1;
      slot.samples = true;
    }
    r.fed += slot.count;
    plan.slots.push_back(slot);
  }
  return plan;
}

void BatchPolicy::finish(std::uint64_t id) {
  auto it = std::find_if(running_.begin(), running_.end(), [id](const Running& r) { return r.request.id == id; });
  if (it != running_.end()) {
    reserved_ -= need(it->request);
    running_.erase(it);
    return;
  }
  auto q = std::find_if(queue_.begin(), queue_.end(), [id](const BatchRequest& r) { return r.id == id; });
  if (q != queue_.end()) queue_.erase(q);
}

void BatchPolicy::rewind(std::uint64_t id, int fed) {
  for (Running& r : running_) {
    if (r.request.id == id) r.fed = std::min(r.fed, std::max(0, fed));
  }
}

}  // namespace swarmflow::lm
