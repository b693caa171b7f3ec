// The phi-accrual failure detector on heartbeat traces with explicit,
// simulated time: regular beats, the jitter of a loaded machine, a peer that
// stops, and its settings.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "config/pipeline_spec.hpp"
#include "placement/failure_detector.hpp"

namespace swarmflow::placement {
namespace {

constexpr std::int64_t kMs = 1'000'000;

/// Arrival times (ns) of heartbeats sent every `interval_ms` for `seconds`.
std::vector<std::int64_t> regular_trace(int interval_ms, double seconds, std::int64_t start_ns = kMs) {
  std::vector<std::int64_t> beats;
  for (std::int64_t t = start_ns; t < start_ns + static_cast<std::int64_t>(seconds * 1000) * kMs;
       t += interval_ms * kMs) {
    beats.push_back(t);
  }
  return beats;
}

/// What a loaded machine (two cores saturated by a CPU hog) does to
/// heartbeats sent every `interval_ms`: every beat a little late (exponential,
/// mean 2 ms), and now and then (`late_share` of beats) one 100-200 ms late.
/// A late beat is late at the sender half of the time (its thread was not
/// scheduled: the beats after it are sent on from then) and at the receiver
/// the other half (it and the beats queued behind it arrive in a burst).
struct LoadedMachine {
  std::uint64_t seed = 1;
  int interval_ms = 25;
  double seconds = 60;
  double late_share = 0.02;

  struct Trace {
    std::vector<std::int64_t> beats;
    int late = 0;                  ///< beats 100-200 ms late
    std::int64_t longest_gap = 0;  ///< longest silence between two arrivals
  };

  Trace make() const {
    std::mt19937_64 rng(seed);
    auto uniform = [&rng] { return static_cast<double>(rng() >> 11) * 0x1.0p-53; };  // [0, 1)
    Trace trace;
    const std::int64_t end = static_cast<std::int64_t>(seconds * 1000) * kMs;
    std::int64_t send = kMs;
    std::int64_t receiver_free_at = 0;  // a stalled receiver reads nothing before this
    while (send < end) {
      std::int64_t arrival = send + static_cast<std::int64_t>(-std::log1p(-uniform()) * 2.0 * kMs);
      if (uniform() < late_share) {
        const auto late = static_cast<std::int64_t>((100 + 100 * uniform()) * kMs);
        ++trace.late;
        if (uniform() < 0.5) {
          send += late;  // the sender stalled: this beat and the schedule after it move
          arrival += late;
        } else {
          receiver_free_at = arrival + late;  // the receiver stalled
        }
      }
      arrival = std::max(arrival, receiver_free_at);
      if (!trace.beats.empty()) arrival = std::max(arrival, trace.beats.back());  // one connection keeps order
      if (!trace.beats.empty()) trace.longest_gap = std::max(trace.longest_gap, arrival - trace.beats.back());
      trace.beats.push_back(arrival);
      send += interval_ms * kMs;
    }
    return trace;
  }
};

/// Feeds `beats` to `d`, checking phi every `step_ns` in between (as the
/// coordinator's watch does); the highest phi seen.
double replay(FailureDetector& d, const std::vector<std::int64_t>& beats, std::int64_t step_ns = kMs) {
  double highest = 0;
  for (std::size_t i = 0; i < beats.size(); ++i) {
    d.heartbeat(beats[i]);
    if (i + 1 == beats.size()) break;
    for (std::int64_t t = beats[i] + step_ns; t < beats[i + 1]; t += step_ns) highest = std::max(highest, d.phi(t));
  }
  return highest;
}

/// The first time after `from_ns`, in steps of `step_ns`, at which `d` suspects its peer.
std::int64_t first_suspicion(const FailureDetector& d, std::int64_t from_ns, std::int64_t step_ns = kMs) {
  for (std::int64_t t = from_ns;; t += step_ns) {
    if (d.suspected(t)) return t;
  }
}

TEST(FailureDetector, NeverSuspectsBeforeTheFirstHeartbeat) {
  FailureDetector d{config::FailureDecl{}};
  EXPECT_FALSE(d.heard());
  EXPECT_EQ(d.phi(3600'000 * kMs), 0.0);
  EXPECT_TRUE(d.available(3600'000 * kMs));
}

TEST(FailureDetector, RegularBeatsAtTheDefaultIntervalAreNeverSuspected) {
  const config::FailureDecl defaults;
  FailureDetector d{defaults};
  const auto beats = regular_trace(defaults.heartbeat_ms, 60);
  const double highest = replay(d, beats);
  EXPECT_LT(highest, 1.0) << "a beat on time should look like one";
  EXPECT_NEAR(d.mean_ms(), defaults.heartbeat_ms, 1e-6);
}

TEST(FailureDetector, TheJitterOfALoadedMachineIsNotSuspectedAtDefaultSettings) {
  const config::FailureDecl defaults;
  for (std::uint64_t seed = 1; seed <= 8; ++seed) {
    LoadedMachine machine;
    machine.seed = seed;
    const auto trace = machine.make();
    // The trace is as bad as it claims: dozens of beats 100-200 ms late,
    // silences of over 200 ms.
    ASSERT_GT(trace.late, 15) << "seed " << seed;
    ASSERT_GT(trace.longest_gap, 200 * kMs) << "seed " << seed;
    FailureDetector d{defaults};
    const double highest = replay(d, trace.beats);
    EXPECT_LT(highest, defaults.phi_threshold)
        << "seed " << seed << ": suspected over 60 s of a loaded machine; longest silence "
        << trace.longest_gap / kMs << " ms";
  }
}

TEST(FailureDetector, TheJitterOfALoadedMachineIsSuspectedWithoutAnAcceptablePause) {
  // The test above can fail: without the acceptable pause, the same traces
  // are suspected.
  config::FailureDecl settings;
  settings.acceptable_pause_ms = 0;
  LoadedMachine machine;
  FailureDetector d{settings};
  EXPECT_GE(replay(d, machine.make().beats), settings.phi_threshold);
}

TEST(FailureDetector, APeerThatStopsIsDeclaredDeadWithin300MsOfItsLastBeat) {
  const config::FailureDecl defaults;
  FailureDetector d{defaults};
  const auto beats = regular_trace(defaults.heartbeat_ms, 10);
  replay(d, beats);
  const std::int64_t last = beats.back();
  const std::int64_t dead_at = first_suspicion(d, last);
  EXPECT_LE(dead_at - last, 300 * kMs);
  // ... and not before the longest pause a loaded machine makes.
  EXPECT_GT(dead_at - last, defaults.heartbeat_ms * kMs + 200 * kMs);
  EXPECT_NEAR(static_cast<double>(d.suspicion_after_ns()), static_cast<double>(dead_at - last), 1.0 * kMs);
}

TEST(FailureDetector, APeerThatStopsOnALoadedMachineIsStillDeclaredDead) {
  // Jitter widens the deviation, so suspicion comes later, but it comes.
  const config::FailureDecl defaults;
  LoadedMachine machine;
  const auto trace = machine.make();
  FailureDetector d{defaults};
  replay(d, trace.beats);
  const std::int64_t last = trace.beats.back();
  EXPECT_LE(first_suspicion(d, last) - last, 1000 * kMs);
}

TEST(FailureDetector, PhiGrowsMonotonicallyWithSilence) {
  for (const auto& beats : {regular_trace(25, 10), LoadedMachine{}.make().beats}) {
    FailureDetector d{config::FailureDecl{}};
    replay(d, beats);
    const std::int64_t last = beats.back();
    double previous = d.phi(last);
    for (std::int64_t silence = 100'000; silence <= 2000 * kMs; silence += 100'000) {
      const double phi = d.phi(last + silence);
      ASSERT_GE(phi, previous) << "at " << static_cast<double>(silence) / 1e6 << " ms of silence";
      previous = phi;
    }
    EXPECT_GT(previous, 100.0);
    // It never becomes infinite or NaN, however long the silence.
    const double hour = d.phi(last + 3'600'000 * kMs);
    EXPECT_TRUE(std::isfinite(hour));
    EXPECT_GE(hour, previous);
  }
}

TEST(FailureDetector, AHeartbeatEndsTheSuspicion) {
  FailureDetector d{config::FailureDecl{}};
  const auto beats = regular_trace(25, 5);
  replay(d, beats);
  const std::int64_t late = beats.back() + 1000 * kMs;
  EXPECT_TRUE(d.suspected(late));
  d.heartbeat(late);
  EXPECT_TRUE(d.available(late + 25 * kMs));
}

TEST(FailureDetector, SettingsAreValidated) {
  EXPECT_TRUE(validate(config::FailureDecl{}).ok());
  auto refused = [](auto change, const char* name) {
    config::FailureDecl s;
    change(s);
    const Status status = validate(s);
    EXPECT_FALSE(status.ok()) << name;
    EXPECT_NE(status.message().find(name), std::string::npos) << status.message();
    EXPECT_THROW(FailureDetector{s}, std::invalid_argument) << name;
  };
  refused([](config::FailureDecl& s) { s.heartbeat_ms = 0; }, "heartbeat_ms");
  refused([](config::FailureDecl& s) { s.phi_threshold = 0; }, "phi_threshold");
  refused([](config::FailureDecl& s) { s.phi_threshold = std::numeric_limits<double>::quiet_NaN(); }, "phi_threshold");
  refused([](config::FailureDecl& s) { s.phi_threshold = std::numeric_limits<double>::infinity(); }, "phi_threshold");
  refused([](config::FailureDecl& s) { s.min_std_ms = 0; }, "min_std_ms");
  refused([](config::FailureDecl& s) { s.min_std_ms = -1; }, "min_std_ms");
  refused([](config::FailureDecl& s) { s.acceptable_pause_ms = -1; }, "acceptable_pause_ms");
  refused([](config::FailureDecl& s) { s.window = 1; }, "window");
  config::FailureDecl no_pause;
  no_pause.acceptable_pause_ms = 0;
  EXPECT_TRUE(validate(no_pause).ok());
}

TEST(FailureDetector, TheWindowForgetsOldIntervals) {
  config::FailureDecl settings;
  settings.window = 10;
  FailureDetector d{settings};
  replay(d, regular_trace(100, 5));
  EXPECT_NEAR(d.mean_ms(), 100, 1e-6);
  replay(d, regular_trace(25, 5, 6000 * kMs));
  // The 100 ms intervals and the gap between the traces have left the window.
  EXPECT_NEAR(d.mean_ms(), 25, 1e-6);
  EXPECT_NEAR(d.std_ms(), 0, 1e-3);
}

// -- FailureDetectors ---------------------------------------------------------

TEST(FailureDetectors, DeclaresEachSilentUnitDeadOnce) {
  FailureDetectors units{config::FailureDecl{}, 3};
  std::int64_t t = kMs;
  for (int i = 0; i < 100; ++i, t += 25 * kMs) {
    units.heartbeat(0, t);
    units.heartbeat(1, t);  // unit 2 is never heard from: not watched yet
    EXPECT_TRUE(units.declare_dead(t).empty());
  }
  const std::int64_t last = t - 25 * kMs;
  std::vector<DeadUnit> dead;
  for (; dead.empty() && t < last + 1000 * kMs; t += kMs) {
    units.heartbeat(0, t);  // unit 0 keeps beating (every ms here)
    dead = units.declare_dead(t);
  }
  ASSERT_EQ(dead.size(), 1U);
  EXPECT_EQ(dead[0].unit, 1U);
  EXPECT_EQ(dead[0].silent_ns, t - kMs - last);
  EXPECT_GE(dead[0].phi, 8.0);
  EXPECT_TRUE(units.dead(1));
  EXPECT_FALSE(units.dead(0));
  EXPECT_FALSE(units.dead(2));
  EXPECT_TRUE(units.declare_dead(t + 5000 * kMs).size() == 1U) << "unit 0 now; unit 1 not again";
  EXPECT_TRUE(units.declare_dead(t + 6000 * kMs).empty());
}

TEST(FailureDetectors, ARetiredUnitMayGoQuiet) {
  FailureDetectors units{config::FailureDecl{}, 1};
  for (std::int64_t t = kMs; t < 2000 * kMs; t += 25 * kMs) units.heartbeat(0, t);
  units.retire(0);
  EXPECT_TRUE(units.declare_dead(60'000 * kMs).empty());
  EXPECT_FALSE(units.dead(0));
}

TEST(FailureDetectors, AUnitThatRejoinsIsWatchedAfreshAndCanBeDeclaredDeadAgain) {
  FailureDetectors units{config::FailureDecl{}, 1};
  std::int64_t t = kMs;
  // A long history at 25 ms, then silence: declared dead.
  for (int i = 0; i < 200; ++i, t += 25 * kMs) units.heartbeat(0, t);
  t += 1000 * kMs;
  ASSERT_EQ(units.declare_dead(t).size(), 1U);
  // Started again: beats every 40 ms now. The old history is gone, so a
  // 40 ms beat is not taken for a late 25 ms one, and it is not dead.
  units.rejoin(0, t);
  EXPECT_FALSE(units.dead(0));
  for (int i = 0; i < 400; ++i) {
    t += 40 * kMs;
    units.heartbeat(0, t);
    ASSERT_TRUE(units.declare_dead(t).empty()) << "beat " << i;
  }
  // And when it stops again, it is declared dead again, once.
  std::vector<DeadUnit> dead;
  const std::int64_t last = t;
  for (t += kMs; dead.empty() && t < last + 2000 * kMs; t += kMs) dead = units.declare_dead(t);
  ASSERT_EQ(dead.size(), 1U);
  EXPECT_LT(dead[0].silent_ns, 400 * kMs);
  EXPECT_TRUE(units.declare_dead(t + 5000 * kMs).empty());
}

}  // namespace
}  // namespace swarmflow::placement
