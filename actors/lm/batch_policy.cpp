#include "lm/batch_policy.hpp"

#include <algorithm>
#include <cmath>

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
  const int cap = step_token_cap();
  const int max_running = cap > 0 ? std::min(settings_.max_size, cap) : settings_.max_size;
  if (running_.empty() && !queue_.empty()) {
    const bool full = static_cast<int>(queue_.size()) >= max_running;
    const std::int64_t due = queue_.front().arrived_ns + settings_.max_wait_ns;
    if (!full && now_ns < due) {
      plan.wake_ns = due;
      return plan;
    }
  }
  // Oldest first; a request that does not fit waits, and so do those behind it.
  while (!queue_.empty() && static_cast<int>(running_.size()) < max_running &&
         reserved_ + need(queue_.front()) <= settings_.kv_budget_tokens) {
    running_.push_back(Running{queue_.front(), 0});
    reserved_ += need(queue_.front());
    plan.joined.push_back(queue_.front().id);
    queue_.pop_front();
  }
  int prefill_left = std::max(1, settings_.prefill_chunk);
  if (cap > 0) {
    // Every decoding request feeds its token; prompts share what is left of
    // the cap, and at least one token, so that they always advance.
    int decoding = 0;
    for (const Running& r : running_) decoding += r.fed >= r.request.prompt_tokens ? 1 : 0;
    prefill_left = std::min(prefill_left, std::max(1, cap - decoding));
  }
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

double StepCost::predict(int tokens) const {
  const std::size_t n = static_cast<std::size_t>(std::max(0, tokens));
  if (n < fastest_ns.size() && fastest_ns[n] > 0) return fastest_ns[n];
  double floor = 0;
  for (std::size_t t = 1; t < std::min(n, fastest_ns.size()); ++t) floor = std::max(floor, fastest_ns[t]);
  return std::max(per_token_ns > 0 ? fitted(tokens) : 0.0, floor);
}

void BatchPolicy::observe_step(int tokens, std::int64_t duration_ns) {
  if (tokens <= 0 || duration_ns <= 0) return;
  double d = static_cast<double>(duration_ns);
  const std::size_t most =
      static_cast<std::size_t>(settings_.max_size) + static_cast<std::size_t>(std::max(1, settings_.prefill_chunk));
  if (cost_.fastest_ns.size() < most + 1) cost_.fastest_ns.resize(most + 1, 0.0);
  if (static_cast<std::size_t>(tokens) <= most) {
    double& fastest = cost_.fastest_ns[static_cast<std::size_t>(tokens)];
    if (fastest == 0 || d < fastest) fastest = d;
  }

  // The fit: a step the machine held up (preempted) counts as at most 3
  // times what the fit expected, so one outlier cannot swing it.
  if (cost_.per_token_ns > 0) d = std::min(d, 3 * cost_.fitted(tokens));
  constexpr double kKeep = 0.98;  // each older step weighs 2 % less
  const double t = tokens;
  w_ = kKeep * w_ + 1;
  t_ = kKeep * t_ + t;
  d_ = kKeep * d_ + d;
  tt_ = kKeep * tt_ + t * t;
  td_ = kKeep * td_ + t * d;
  const double mean_t = t_ / w_, mean_d = d_ / w_;
  const double var_t = tt_ / w_ - mean_t * mean_t;
  // Steps of one size only tell nothing of the slope: keep the last fit.
  if (var_t >= 0.25) {
    const double slope = (td_ / w_ - mean_t * mean_d) / var_t;
    if (slope > 0) {
      cost_.per_token_ns = slope;
      cost_.fixed_ns = std::max(0.0, mean_d - slope * mean_t);
    }
  }
  cap_ = choose_cap();
}

int BatchPolicy::choose_cap() const {
  if (!(settings_.max_step_factor > 0)) return 0;
  const std::vector<double>& fastest = cost_.fastest_ns;
  const bool timed_one = fastest.size() > 1 && fastest[1] > 0;
  // Nothing to go on yet: neither a one-token step nor a fit.
  if (!timed_one && !(cost_.per_token_ns > 0)) return 0;
  const int most = settings_.max_size + std::max(1, settings_.prefill_chunk);
  const double budget = settings_.max_step_factor * cost_.predict(1);
  // Every size within the budget is a candidate. Under load the steps run
  // at the cap, so the cap sets the tokens/s: of the sizes within 5 % of
  // the most tokens per second of step, the fewest tokens, whose steps
  // (the time per output token) are the shortest. Two passes over the same
  // costs: the best rate, then the first size near it.
  const bool line = cost_.per_token_ns > 0;
  auto rates = [&](auto&& visit) {
    double floor = 0;  // the dearest size timed so far (StepCost::predict, in one pass)
    for (int t = 1; t <= most; ++t) {
      const std::size_t n = static_cast<std::size_t>(t);
      const double timed = n < fastest.size() ? fastest[n] : 0.0;
      floor = std::max(floor, timed);
      if (timed <= 0 && !line) continue;  // nothing predicts it
      const double cost = timed > 0 ? timed : std::max(cost_.fitted(t), floor);
      if (t > 1 && cost > budget * (1 + 1e-9)) continue;
      if (!visit(t, t / std::max(cost, 1.0))) return;
    }
  };
  double best = 0;
  rates([&](int, double rate) {
    best = std::max(best, rate);
    return true;
  });
  constexpr double kNearBest = 0.95;
  int cap = 1;
  rates([&](int t, double rate) {
    if (rate < kNearBest * best) return true;
    cap = t;
    return false;
  });
  return cap;
}

void BatchPolicy::rewind(std::uint64_t id, int fed) {
  for (Running& r : running_) {
    if (r.request.id == id) r.fed = std::min(r.fed, std::max(0, fed));
  }
}

}  // namespace swarmflow::lm
