#pragma once
/// \file sampler.hpp
/// Picks the next token from a row of logits: greedy at temperature 0, else
/// temperature, top-k and top-p (nucleus) sampling from a seeded generator.

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace swarmflow::lm {

struct SamplingParams {
  double temperature = 0.0;  ///< 0 = greedy (deterministic)
  int top_k = 0;             ///< 0 = no limit
  double top_p = 1.0;        ///< 1 = no limit
  std::uint64_t seed = 0;
};

struct SampledToken {
  int id = 0;
  /// Natural log of the token's probability under the model (temperature 1).
  double logprob = 0.0;
};

/// One request's sampler; its generator is seeded once, so a request gives
/// the same tokens whatever it is batched with.
class Sampler {
 public:
  explicit Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {}
  SampledToken sample(const float* logits, int vocab);
  /// The generator's state, to continue the same draws elsewhere (a
  /// snapshot), and setting it back; false if `state` is not one.
  std::string state() const;
  bool set_state(const std::string& state);

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<std::pair<double, int>> candidates_;
};

}  // namespace swarmflow::lm
