#include "ultrasound/ultrasound_score.hpp"

#include <algorithm>
#include <cmath>

namespace swarmflow::ultrasound {

FrameScore score_frame(const video::UltrasoundTruth& truth, const std::vector<LesionFinding>& lesions,
                       const std::vector<VesselFinding>& vessels, int width, int height) {
  FrameScore s;
  s.found_lesions = static_cast<int>(lesions.size());
  s.count_right = lesions.size() == truth.lesions.size();
  // Every (truth, finding) pair's Dice; matched greedily, best first, one to one.
  struct Pair {
    double dice;
    std::size_t t, f;
  };
  std::vector<Pair> pairs;
  for (std::size_t t = 0; t < truth.lesions.size(); ++t) {
    for (std::size_t f = 0; f < lesions.size(); ++f) {
      const double d = dice(truth.lesions[t].contour, lesions[f].contour, width, height);
      if (d > 0) pairs.push_back({d, t, f});
    }
  }
  std::sort(pairs.begin(), pairs.end(), [](const Pair& a, const Pair& b) { return a.dice > b.dice; });
  std::vector<int> match(truth.lesions.size(), -1);
  std::vector<bool> used(lesions.size(), false);
  for (const Pair& p : pairs) {
    if (p.dice < 0.2 || match[p.t] >= 0 || used[p.f]) continue;
    match[p.t] = static_cast<int>(p.f);
    used[p.f] = true;
  }
  for (std::size_t t = 0; t < truth.lesions.size(); ++t) {
    FrameScore::Lesion l;
    l.truth_class = truth.lesions[t].echogenicity;
    if (match[t] >= 0) {
      const LesionFinding& f = lesions[static_cast<std::size_t>(match[t])];
      l.found = true;
      l.dice = dice(truth.lesions[t].contour, f.contour, width, height);
      l.size_error_mm = f.size_mm - truth.lesions[t].size_mm;
      l.size_right = std::abs(l.size_error_mm) <= kSizeToleranceMm;
      l.class_right = f.echogenicity == l.truth_class;
    }
    s.lesions.push_back(l);
  }
  s.false_lesions = static_cast<int>(std::count(used.begin(), used.end(), false));
  for (const video::VesselTruth& vt : truth.vessels) {
    FrameScore::Vessel v;
    v.truth_mm_s = vt.velocity_mm_s;
    // The finding whose axis passes closest to the true axis point.
    const VesselFinding* best = nullptr;
    double best_d = 1e300;
    for (const VesselFinding& f : vessels) {
      if (!f.tracked) continue;
      const double nx = -std::sin(f.angle_rad), ny = std::cos(f.angle_rad);
      const double d = std::abs((vt.axis_x_px - f.axis_point.x) * nx + (vt.axis_y_px - f.axis_point.y) * ny);
      if (d < best_d) {
        best_d = d;
        best = &f;
      }
    }
    if (best != nullptr && best_d < vt.radius_mm / truth.mm_per_px + 1) {
      v.found = true;
      v.measured_mm_s = best->velocity_mm_s;
      const double signed_measured = best->direction * best->velocity_mm_s;
      const double signed_truth = vt.direction * vt.velocity_mm_s;
      v.relative_error = std::abs(signed_measured - signed_truth) / std::max(1e-9, vt.velocity_mm_s);
    } else {
      v.relative_error = 1.0;  // a vessel not measured is all wrong
    }
    s.vessels.push_back(v);
  }
  return s;
}

void ScoreTally::add(const FrameScore& s) {
  ++frames;
  if (s.count_right) ++count_right;
  false_lesions += static_cast<std::uint64_t>(s.false_lesions);
  for (const FrameScore::Lesion& l : s.lesions) {
    PerClass& c = by_class[l.truth_class];
    ++c.lesions;
    c.dice_sum += l.dice;
    if (l.found) ++c.found;
    if (l.size_right) ++c.size_right;
    if (l.class_right) ++c.class_right;
  }
  for (const FrameScore::Vessel& v : s.vessels) {
    ++vessels;
    if (v.found) ++vessels_found;
    flow_error_sum += v.relative_error;
    flow_error_max = std::max(flow_error_max, v.relative_error);
  }
}

std::uint64_t ScoreTally::lesions() const {
  std::uint64_t n = 0;
  for (const auto& [name, c] : by_class) n += c.lesions;
  return n;
}

double ScoreTally::dice_mean() const {
  double sum = 0;
  for (const auto& [name, c] : by_class) sum += c.dice_sum;
  const std::uint64_t n = lesions();
  return n > 0 ? sum / static_cast<double>(n) : 0;
}

double ScoreTally::flow_error_mean() const {
  return vessels > 0 ? flow_error_sum / static_cast<double>(vessels) : 0;
}

std::uint64_t ScoreTally::facts() const { return frames + 2 * lesions(); }

std::uint64_t ScoreTally::facts_right() const {
  std::uint64_t n = count_right;
  for (const auto& [name, c] : by_class) n += c.size_right + c.class_right;
  return n;
}

double ScoreTally::facts_fraction() const {
  const std::uint64_t n = facts();
  return n > 0 ? static_cast<double>(facts_right()) / static_cast<double>(n) : 0;
}

}  // namespace swarmflow::ultrasound
