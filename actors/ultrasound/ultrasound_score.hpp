#pragma once
/// \file ultrasound_score.hpp
/// Scores the ultrasound stages' findings against a synthetic probe's ground
/// truth: Dice of each true lesion with its best-matching outline, the facts
/// a report states (lesion count, size within 1 mm, echogenicity class) and
/// the relative error of the vessel velocity. Pure code, used by
/// ultrasound.report, the tests and the benchmark.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ultrasound/ultrasound_image.hpp"
#include "video/synthetic_ultrasound.hpp"

namespace swarmflow::ultrasound {

/// A size is right within this many mm.
constexpr double kSizeToleranceMm = 1.0;

/// How one frame's findings compare with its truth.
struct FrameScore {
  struct Lesion {
    std::string truth_class;
    double dice = 0;           ///< 0 when not found
    bool found = false;        ///< matched by an outline with Dice >= 0.2
    bool size_right = false;   ///< found, and its size within kSizeToleranceMm
    bool class_right = false;  ///< found, and its echogenicity right
    double size_error_mm = 0;
  };
  struct Vessel {
    bool found = false;
    double truth_mm_s = 0;
    double measured_mm_s = 0;
    double relative_error = 0;  ///< |measured - truth| / truth (signed velocities)
  };
  std::vector<Lesion> lesions;
  std::vector<Vessel> vessels;
  int found_lesions = 0;      ///< lesions reported
  bool count_right = false;   ///< as many lesions reported as there are
  int false_lesions = 0;      ///< reported, matched to none
};

/// Scores `lesions` and `vessels` (what the stages found in one frame of
/// width x height pixels) against `truth`.
FrameScore score_frame(const video::UltrasoundTruth& truth, const std::vector<LesionFinding>& lesions,
                       const std::vector<VesselFinding>& vessels, int width, int height);

/// Totals over frames.
struct ScoreTally {
  struct PerClass {
    std::uint64_t lesions = 0, found = 0, size_right = 0, class_right = 0;
    double dice_sum = 0;
  };
  std::uint64_t frames = 0;
  std::uint64_t count_right = 0;
  std::uint64_t false_lesions = 0;
  std::map<std::string, PerClass> by_class;
  std::uint64_t vessels = 0, vessels_found = 0;
  double flow_error_sum = 0, flow_error_max = 0;

  void add(const FrameScore& score);
  std::uint64_t lesions() const;
  double dice_mean() const;
  double flow_error_mean() const;
  /// Report facts: per frame its lesion count, per true lesion its size and
  /// its echogenicity.
  std::uint64_t facts() const;
  std::uint64_t facts_right() const;
  double facts_fraction() const;
};

}  // namespace swarmflow::ultrasound
