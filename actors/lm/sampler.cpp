#include "lm/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "lm/matmul.hpp"

namespace swarmflow::lm {

std::string Sampler::state() const {
  std::ostringstream out;
  out << rng_;
  return out.str();
}

bool Sampler::set_state(const std::string& state) {
  std::istringstream in(state);
  std::mt19937_64 rng;
  in >> rng;
  if (in.fail()) return false;
  rng_ = rng;
  return true;
}

SampledToken Sampler::sample(const float* logits, int vocab) {
  int best = 0;
  for (int i = 1; i < vocab; ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  const double log_z = logits[best] + std::log(sum_exp(logits, vocab, logits[best]));
  auto logprob = [&](int id) { return static_cast<double>(logits[id]) - log_z; };
  if (params_.temperature <= 0.0) return {best, logprob(best)};

  candidates_.clear();
  for (int i = 0; i < vocab; ++i) {
    candidates_.emplace_back((static_cast<double>(logits[i]) - logits[best]) / params_.temperature, i);
  }
  // Highest first; ties by id so the order never depends on the sort.
  std::sort(candidates_.begin(), candidates_.end(),
            [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; });
  if (params_.top_k > 0 && params_.top_k < vocab) candidates_.resize(static_cast<std::size_t>(params_.top_k));
  double total = 0;
  for (auto& c : candidates_) {
    c.first = std::exp(c.first);
    total += c.first;
  }
  if (params_.top_p < 1.0) {
    double kept = 0;
    std::size_t n = 0;
    while (n < candidates_.size() && kept < params_.top_p * total) kept += candidates_[n++].first;
    candidates_.resize(std::max<std::size_t>(n, 1));
    total = kept > 0 ? kept : candidates_[0].first;
  }
  const double u = std::uniform_real_distribution<double>(0.0, total)(rng_);
  double acc = 0;
  for (const auto& c : candidates_) {
    acc += c.first;
    if (u < acc) return {c.second, logprob(c.second)};
  }
  return {candidates_.back().second, logprob(candidates_.back().second)};
}

}  // namespace swarmflow::lm
