#pragma once
// Deterministic randomness for the synthetic sources: splitmix64, which gives
// the same numbers on every platform (std:: distributions do not), so that a
// seed renders the same frames and truth everywhere.

#include <cstdint>
#include <initializer_list>

namespace swarmflow::video::splitmix {

inline std::uint64_t mix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/// A hash of `values` from `salt` (each source has its own salt).
inline std::uint64_t hash_of(std::uint64_t salt, std::initializer_list<std::uint64_t> values) {
  std::uint64_t h = salt;
  for (std::uint64_t v : values) h = mix64(h ^ mix64(v));
  return h;
}

class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    state_ += 0x9e3779b97f4a7c15ULL;
    return mix64(state_);
  }
  /// Uniform in [0, 1).
  double unit() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }
  double uniform(double lo, double hi) { return lo + (hi - lo) * unit(); }
  bool chance(double p) { return unit() < p; }
  /// Uniform integer in [lo, hi].
  int range(int lo, int hi) { return lo + static_cast<int>(next() % static_cast<std::uint64_t>(hi - lo + 1)); }
  double sign() { return chance(0.5) ? 1.0 : -1.0; }

 private:
  std::uint64_t state_;
};

}  // namespace swarmflow::video::splitmix
