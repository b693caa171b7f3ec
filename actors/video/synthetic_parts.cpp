#include "video/synthetic_parts.hpp"
#include "video/splitmix.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <stdexcept>

#include <nlohmann/json.hpp>
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

namespace swarmflow::video {

namespace {

constexpr double kPi = 3.14159265358979323846;

// -- deterministic randomness (splitmix.hpp) -----------------------------------

using splitmix::mix64;
using splitmix::Rng;

std::uint64_t hash_of(std::initializer_list<std::uint64_t> values) { return splitmix::hash_of(0x5eed5eed12345678ULL, values); }

// Tags that keep the random streams of different purposes apart.
enum class Stream : std::uint64_t {
  part = 1, pose = 2, belt = 3, metal = 4, noise = 5, light = 6, target = 7, shape = 8, glint = 9
};

// -- the part as machined, in its own frame (mm) -----------------------------

struct DefectShape {
  std::string class_name;
  std::vector<cv::Point2d> points;  ///< scratch: 2 ends or a curved polyline; crack: polyline; pit: centre
  std::vector<std::vector<cv::Point2d>> branches;  ///< crack: polylines that branch off it
  std::vector<cv::Point2d> outline;                ///< irregular pit: outline about the centre, mm
  bool two_tone = false;                           ///< scratch: a dark and a bright wall side by side
  double bright_wall = 0;                          ///< two-toned scratch: the bright wall's contrast
  std::vector<double> depth;        ///< scratch, crack: contrast factor of each stretch, 0.7..1
  struct Blob {
    double dx, dy, size;  ///< offset and size relative to the pit's main diameters
  };
  std::vector<Blob> satellites;  ///< pit: smaller blobs merged into it
  double width_mm = 0;           ///< stroke width, or the pit's diameter
  double aspect = 1;             ///< pit: length over width
  double angle = 0;              ///< pit: orientation, radians
  double contrast = 0;           ///< grey levels against the metal (negative = darker)
  int hole = -1;                 ///< missing_hole: which hole of the drawing
};

struct PartPlan {
  const PartVariant* variant = nullptr;
  double width_mm = 0, height_mm = 0;
  std::vector<HoleTruth> holes;
  std::vector<DefectShape> defects;
  double metal_level = 165;  ///< mean reflectance of the metal, grey levels
  int texture_u = 0, texture_v = 0;
};

struct Pose {
  double angle = 0;  ///< radians
  double cx = 0, cy = 0;
  double gain = 1;
  double blur_px = 0;  ///< length of the motion blur beyond one pixel
  int belt_offset = 0;
  int noise_x = 0, noise_y = 0;
};

// Rendering floors and placement margins (documented in docs/inspection.md).
constexpr double kMinStrokePx = 1.0;
constexpr double kMinPitPx = 4.0;
constexpr double kEdgeMarginMm = 3.0;
constexpr double kHoleMarginMm = 2.5;
constexpr double kDefectGapMm = 3.0;

double point_segment_distance(cv::Point2d p, cv::Point2d a, cv::Point2d b) {
  const cv::Point2d ab = b - a;
  const double len2 = ab.dot(ab);
  double t = len2 > 0 ? (p - a).dot(ab) / len2 : 0.0;
  t = std::clamp(t, 0.0, 1.0);
  const cv::Point2d q = a + t * ab;
  return std::hypot(p.x - q.x, p.y - q.y);
}

cv::Rect2d extent_mm(const DefectShape& d) {
  double x0 = std::numeric_limits<double>::max(), y0 = x0, x1 = -x0, y1 = -x0;
  auto grow = [&](cv::Point2d p) {
    x0 = std::min(x0, p.x);
    y0 = std::min(y0, p.y);
    x1 = std::max(x1, p.x);
    y1 = std::max(y1, p.y);
  };
  for (const auto& p : d.points) grow(p);
  for (const auto& b : d.branches) {
    for (const auto& p : b) grow(p);
  }
  // A two-toned scratch's walls lie side by side: twice as wide.
  const double r = d.class_name == "pit" ? d.width_mm * d.aspect / 2 : d.width_mm * (d.two_tone ? 1.0 : 0.5);
  return {x0 - r, y0 - r, x1 - x0 + 2 * r, y1 - y0 + 2 * r};
}

bool fits(const DefectShape& d, const PartPlan& plan) {
  const cv::Rect2d e = extent_mm(d);
  const double hw = plan.width_mm / 2 - kEdgeMarginMm, hh = plan.height_mm / 2 - kEdgeMarginMm;
  if (e.x < -hw || e.y < -hh || e.x + e.width > hw || e.y + e.height > hh) return false;
  for (const auto& h : plan.holes) {
    const cv::Point2d c(h.x_mm, h.y_mm);
    const double keep = h.diameter_mm / 2 + kHoleMarginMm + d.width_mm * d.aspect / 2;
    if (d.points.size() == 1) {
      if (std::hypot(c.x - d.points[0].x, c.y - d.points[0].y) < keep) return false;
    } else {
      for (std::size_t i = 0; i + 1 < d.points.size(); ++i) {
        if (point_segment_distance(c, d.points[i], d.points[i + 1]) < keep) return false;
      }
      for (const auto& b : d.branches) {
        for (std::size_t i = 0; i + 1 < b.size(); ++i) {
          if (point_segment_distance(c, b[i], b[i + 1]) < keep) return false;
        }
      }
    }
  }
  for (const auto& other : plan.defects) {
    if (other.class_name == "missing_hole") continue;
    const cv::Rect2d o = extent_mm(other);
    const cv::Rect2d grown(o.x - kDefectGapMm, o.y - kDefectGapMm, o.width + 2 * kDefectGapMm,
                           o.height + 2 * kDefectGapMm);
    if ((grown & e).area() > 0) return false;
  }
  return true;
}

/// A zig-zag of `segments` strokes from `from` about a main direction that
/// wanders +-10 degrees a segment, turning 30-65 degrees alternately to each
/// side of it.
std::vector<cv::Point2d> zig_zag(cv::Point2d from, double heading, int segments, Rng& rng, std::vector<double>* depth) {
  std::vector<cv::Point2d> points = {from};
  double side = rng.sign();
  for (int i = 0; i < segments; ++i) {
    heading += rng.uniform(-10.0, 10.0) * kPi / 180.0;
    const double turn = side * rng.uniform(30.0, 65.0) * kPi / 180.0;
    const double len = rng.uniform(0.7, 1.6);
    points.push_back(points.back() + len * cv::Point2d(std::cos(heading + turn), std::sin(heading + turn)));
    if (depth != nullptr) depth->push_back(rng.uniform(0.7, 1.0));
    side = -side;
  }
  return points;
}

/// The variations of a real part (SyntheticPartsConfig: curved, two_tone,
/// branching, irregular_pits), drawn from their own random stream so that
/// with all of them off the parts are exactly those of the plain camera.
void vary_defect(DefectShape& d, const SyntheticPartsConfig& cfg, Rng& rng) {
  if (d.class_name == "scratch") {
    if (cfg.curved > 0) {
      // An arc (a parabola, for sagittas this small) or an S (one period of
      // a sine), `sag` at most from the chord.
      const cv::Point2d a = d.points[0], b = d.points[1];
      const double length = cv::norm(b - a);
      const double sag = rng.uniform(0.0, cfg.curved) * length * rng.sign();
      const bool s_shape = rng.chance(0.5);
      const cv::Point2d n(-(b - a).y / length, (b - a).x / length);
      constexpr int kSteps = 24;
      d.points.clear();
      for (int i = 0; i <= kSteps; ++i) {
        const double t = static_cast<double>(i) / kSteps;
        const double off = s_shape ? sag * std::sin(2 * kPi * t) : 4 * sag * t * (1 - t);
        d.points.push_back(a + t * (b - a) + off * n);
      }
    }
    if (rng.chance(cfg.two_tone)) {
      d.two_tone = true;
      // Each wall at least 0.1 mm wide: a narrower groove's walls would
      // share a pixel at 0.1 mm/px and cancel out.
      d.width_mm = std::max(d.width_mm, 0.2);
      // The wall that faces the light is bright, the other dark.
      d.bright_wall = std::abs(d.contrast) * rng.uniform(0.6, 1.0);
      d.contrast = -std::abs(d.contrast);
    }
  } else if (d.class_name == "crack") {
    if (rng.chance(cfg.branching)) {
      const int count = rng.range(1, 2);
      for (int k = 0; k < count; ++k) {
        const auto at = static_cast<std::size_t>(rng.range(1, static_cast<int>(d.points.size()) - 2));
        const cv::Point2d main = d.points.back() - d.points.front();
        const double heading = std::atan2(main.y, main.x) + rng.sign() * rng.uniform(35.0, 70.0) * kPi / 180.0;
        d.branches.push_back(zig_zag(d.points[at], heading, rng.range(2, 5), rng, nullptr));
      }
    }
  } else if (d.class_name == "pit" && cfg.irregular_pits) {
    // A lobed outline: the ellipse's radius times a few random harmonics.
    const int vertices = 24;
    std::array<double, 4> amp{}, phase{};
    for (std::size_t i = 0; i < amp.size(); ++i) {
      amp[i] = rng.uniform(0.0, 0.22 / static_cast<double>(i + 1));
      phase[i] = rng.uniform(0, 2 * kPi);
    }
    const double a = d.width_mm * d.aspect / 2, b = d.width_mm / 2;
    const double ca = std::cos(d.angle), sa = std::sin(d.angle);
    double reach = 0;
    for (int i = 0; i < vertices; ++i) {
      const double t = 2 * kPi * i / vertices;
      double f = 1;
      for (std::size_t k = 0; k < amp.size(); ++k) f += amp[k] * std::sin(static_cast<double>(k + 2) * t + phase[k]);
      const cv::Point2d p(a * f * std::cos(t), b * f * std::sin(t));
      d.outline.emplace_back(p.x * ca - p.y * sa, p.x * sa + p.y * ca);
      reach = std::max(reach, cv::norm(d.outline.back()));
    }
    d.satellites.clear();
    d.width_mm = 2 * reach;
    d.aspect = 1;
  }
}

DefectShape random_surface_defect(const std::string& cls, const PartPlan& plan, Rng& rng) {
  DefectShape d;
  d.class_name = cls;
  const cv::Point2d start(rng.uniform(-plan.width_mm / 2, plan.width_mm / 2),
                          rng.uniform(-plan.height_mm / 2, plan.height_mm / 2));
  if (cls == "scratch") {
    const double length = rng.uniform(8.0, 30.0);
    const double theta = rng.uniform(0, kPi);
    d.points = {start, start + length * cv::Point2d(std::cos(theta), std::sin(theta))};
    d.width_mm = rng.uniform(0.1, 0.3);
    d.contrast = rng.sign() * rng.uniform(20.0, 60.0);
    // Deepest in the middle, fading towards both ends, unevenly.
    constexpr int kStretches = 10;
    for (int i = 0; i < kStretches; ++i) {
      const double t = (i + 0.5) / kStretches;
      d.depth.push_back(std::clamp(0.7 + 0.3 * std::sin(kPi * t) + rng.uniform(-0.1, 0.1), 0.7, 1.0));
    }
  } else if (cls == "crack") {
    const int segments = rng.range(6, 14);
    const double theta0 = rng.uniform(0, 2 * kPi);
    double side = rng.sign();
    d.points = {start};
    // A zig-zag about a wandering main direction.
    double heading = theta0;
    for (int i = 0; i < segments; ++i) {
      heading += rng.uniform(-10.0, 10.0) * kPi / 180.0;
      const double turn = side * rng.uniform(30.0, 65.0) * kPi / 180.0;
      const double len = rng.uniform(0.7, 1.6);
      d.points.push_back(d.points.back() + len * cv::Point2d(std::cos(heading + turn), std::sin(heading + turn)));
      d.depth.push_back(rng.uniform(0.7, 1.0));
      side = -side;
    }
    d.width_mm = rng.uniform(0.1, 0.2);
    d.contrast = -rng.uniform(30.0, 75.0);
  } else {
    d.points = {start};
    d.width_mm = rng.uniform(0.4, 1.2);
    d.aspect = rng.uniform(1.0, 1.4);
    d.angle = rng.uniform(0, kPi);
    d.contrast = -rng.uniform(20.0, 90.0);
    // Up to two smaller blobs merged into the pit make its outline irregular.
    const int satellites = rng.range(0, 2);
    for (int i = 0; i < satellites; ++i) {
      const double a = rng.uniform(0, 2 * kPi), r = rng.uniform(0.15, 0.3);
      d.satellites.push_back(DefectShape::Blob{r * std::cos(a), r * std::sin(a), rng.uniform(0.45, 0.6)});
    }
  }
  return d;
}

PartPlan plan_part(const SyntheticPartsConfig& cfg, std::uint64_t index) {
  Rng rng(hash_of({cfg.seed, static_cast<std::uint64_t>(cfg.station), index, std::uint64_t(Stream::part)}));
  const auto& variants = synthetic_part_variants();
  PartPlan plan;
  plan.variant = &variants[static_cast<std::size_t>(rng.range(0, static_cast<int>(variants.size()) - 1))];
  plan.width_mm = plan.variant->width_mm + rng.uniform(-0.3, 0.3);
  plan.height_mm = plan.variant->height_mm + rng.uniform(-0.3, 0.3);
  for (const auto& h : plan.variant->holes) {
    plan.holes.push_back(HoleTruth{h.x_mm + rng.uniform(-0.05, 0.05), h.y_mm + rng.uniform(-0.05, 0.05),
                                   h.diameter_mm + rng.uniform(-0.15, 0.15), false});
  }
  plan.metal_level = rng.uniform(150.0, 178.0);
  plan.texture_u = rng.range(0, 199);
  plan.texture_v = rng.range(0, 199);

  if (!rng.chance(cfg.defect_rate)) return plan;
  Rng shape_rng(hash_of({cfg.seed, static_cast<std::uint64_t>(cfg.station), index, std::uint64_t(Stream::shape)}));
  int count = 1;
  if (rng.chance(0.45)) ++count;
  if (rng.chance(0.2)) ++count;
  static const std::array<const char*, 4> kClasses = {"scratch", "pit", "crack", "missing_hole"};
  for (int i = 0; i < count; ++i) {
    std::string cls = kClasses[static_cast<std::size_t>(rng.range(0, 3))];
    const bool has_missing =
        std::any_of(plan.holes.begin(), plan.holes.end(), [](const HoleTruth& h) { return h.missing; });
    if (cls == "missing_hole") {
      if (has_missing) continue;
      DefectShape d;
      d.class_name = cls;
      d.hole = rng.range(0, static_cast<int>(plan.holes.size()) - 1);
      plan.holes[static_cast<std::size_t>(d.hole)].missing = true;
      plan.defects.push_back(d);
      continue;
    }
    for (int attempt = 0; attempt < 60; ++attempt) {
      DefectShape d = random_surface_defect(cls, plan, rng);
      vary_defect(d, cfg, shape_rng);
      if (fits(d, plan)) {
        plan.defects.push_back(std::move(d));
        break;
      }
    }
  }
  return plan;
}

Pose plan_pose(const SyntheticPartsConfig& cfg, std::uint64_t index) {
  Rng rng(hash_of({cfg.seed, static_cast<std::uint64_t>(cfg.station), static_cast<std::uint64_t>(cfg.camera), index,
                   std::uint64_t(Stream::pose)}));
  Pose p;
  const double s = cfg.mm_per_px;
  p.angle = rng.uniform(-4.0, 4.0) * kPi / 180.0;
  // The conveyor carries the part a little further at each trigger; the
  // trigger jitter adds a few millimetres more.
  const double drift_mm = 3.0 * std::sin(static_cast<double>(index) * 0.7);
  p.cx = cfg.width / 2.0 + (drift_mm + rng.uniform(-2.0, 2.0)) / s;
  p.cy = cfg.height / 2.0 + rng.uniform(-2.5, 2.5) / s;
  p.gain = rng.uniform(0.95, 1.05);
  p.blur_px = rng.uniform(0.0, 0.15) / s;
  p.belt_offset = rng.range(0, 511);
  p.noise_x = rng.range(0, 511);
  p.noise_y = rng.range(0, 511);
  return p;
}

// -- from the part's frame to pixels -------------------------------------------

struct Placement {
  double cx, cy, c, s, scale;  ///< scale: px per mm
  cv::Point2d px(cv::Point2d mm) const {
    return {cx + (mm.x * c - mm.y * s) * scale, cy + (mm.x * s + mm.y * c) * scale};
  }
};

struct PixelDefect {
  std::size_t shape;  ///< index into PartPlan::defects
  std::vector<cv::Point2d> points;
  std::vector<std::vector<cv::Point2d>> branches;  ///< crack
  std::vector<cv::Point2d> outline;                ///< irregular pit, in the image
  double width_px;   ///< stroke, or the pit's minor diameter
  double length_px;  ///< the pit's major diameter
  double angle;      ///< the pit's orientation in the image
  cv::Rect2d box;
};

PixelDefect to_pixels(std::size_t index, const Placement& pl, double rotation, const PartPlan& plan) {
  const DefectShape& d = plan.defects[index];
  PixelDefect out{index, {}, {}, {}, 0, 0, 0, {}};
  if (d.class_name == "missing_hole") {
    const auto& h = plan.holes[static_cast<std::size_t>(d.hole)];
    const cv::Point2d c = pl.px({h.x_mm, h.y_mm});
    const double r = h.diameter_mm / 2 * pl.scale;
    out.points = {c};
    out.box = {c.x - r, c.y - r, 2 * r, 2 * r};
    return out;
  }
  for (const auto& p : d.points) out.points.push_back(pl.px(p));
  if (d.class_name == "pit" && !d.outline.empty()) {
    // An irregular outline, no smaller than kMinPitPx across.
    const double grow = std::max(1.0, kMinPitPx / (d.width_mm * pl.scale));
    for (const auto& o : d.outline) out.outline.push_back(pl.px(d.points[0] + o * grow));
    double x0 = std::numeric_limits<double>::max(), y0 = x0, x1 = -x0, y1 = -x0;
    for (const auto& p : out.outline) {
      x0 = std::min(x0, p.x);
      y0 = std::min(y0, p.y);
      x1 = std::max(x1, p.x);
      y1 = std::max(y1, p.y);
    }
    out.width_px = out.length_px = d.width_mm * pl.scale * grow;
    out.box = {x0, y0, x1 - x0, y1 - y0};
    return out;
  }
  if (d.class_name == "pit") {
    out.width_px = std::max(d.width_mm * pl.scale, kMinPitPx);
    out.length_px = out.width_px * d.aspect;
    out.angle = d.angle + rotation;
    const double hx = std::hypot(out.length_px * std::cos(out.angle), out.width_px * std::sin(out.angle)) / 2;
    const double hy = std::hypot(out.length_px * std::sin(out.angle), out.width_px * std::cos(out.angle)) / 2;
    const double ca = std::cos(out.angle), sa = std::sin(out.angle);
    cv::Rect2d box(out.points[0].x - hx, out.points[0].y - hy, 2 * hx, 2 * hy);
    for (const auto& b : d.satellites) {
      const cv::Point2d c =
          out.points[0] + cv::Point2d((b.dx * ca - b.dy * sa) * out.length_px, (b.dx * sa + b.dy * ca) * out.length_px);
      box |= cv::Rect2d(c.x - b.size * hx, c.y - b.size * hy, 2 * b.size * hx, 2 * b.size * hy);
    }
    out.box = box;
    return out;
  }
  out.width_px = std::max(d.width_mm * pl.scale, kMinStrokePx);
  for (const auto& b : d.branches) {
    out.branches.emplace_back();
    for (const auto& p : b) out.branches.back().push_back(pl.px(p));
  }
  double x0 = std::numeric_limits<double>::max(), y0 = x0, x1 = -x0, y1 = -x0;
  auto grow = [&](cv::Point2d p) {
    x0 = std::min(x0, p.x);
    y0 = std::min(y0, p.y);
    x1 = std::max(x1, p.x);
    y1 = std::max(y1, p.y);
  };
  for (const auto& p : out.points) grow(p);
  for (const auto& b : out.branches) {
    for (const auto& p : b) grow(p);
  }
  const double r = d.two_tone ? out.width_px : out.width_px / 2;
  out.box = {x0 - r, y0 - r, x1 - x0 + 2 * r, y1 - y0 + 2 * r};
  return out;
}

/// A specular glint on the plate: a saturated core and a halo that fades
/// as a Gaussian, in pixels of the ideal image.
struct GlintSpot {
  cv::Point2d centre;
  double core_px = 0, halo_px = 0, peak = 0;
  /// A hot spot that does not saturate: its core reaches `target` grey
  /// levels (below clipping) whatever the light there, `peak` unused.
  bool soft = false;
  double target = 0;
};

struct FramePlan {
  PartPlan part;
  Pose pose;
  Placement placement;
  std::vector<PixelDefect> defects;
  std::vector<GlintSpot> glints;
  PartTruth truth;
};

/// Up to `cfg.glints` glints on the plate, per camera (a glint depends on
/// where the camera looks from), kept 3 mm from the plate's edges, 2.5 mm
/// from holes and 2 mm from defects, halo (3 sigma) included.
std::vector<GlintSpot> plan_glints(const SyntheticPartsConfig& cfg, std::uint64_t index, const PartPlan& plan,
                                   const Placement& pl) {
  std::vector<GlintSpot> out;
  if (cfg.glints <= 0) return out;
  Rng rng(hash_of({cfg.seed, static_cast<std::uint64_t>(cfg.station), static_cast<std::uint64_t>(cfg.camera), index,
                   std::uint64_t(Stream::glint)}));
  const int count = rng.range(1, cfg.glints);
  std::vector<cv::Rect2d> taken;
  for (const auto& d : plan.defects) {
    if (d.class_name != "missing_hole") taken.push_back(extent_mm(d));
  }
  for (int i = 0; i < count; ++i) {
    for (int attempt = 0; attempt < 40; ++attempt) {
      // Specular light outshines the diffuse: the core saturates however dim
      // the lighting is there.
      const double core = rng.uniform(0.3, 1.0), halo = rng.uniform(1.0, 2.5), peak = rng.uniform(260.0, 400.0);
      const double reach = core + 3 * halo;  // where the halo has faded to 1 % of its peak
      const cv::Point2d c(rng.uniform(-plan.width_mm / 2, plan.width_mm / 2),
                          rng.uniform(-plan.height_mm / 2, plan.height_mm / 2));
      if (std::abs(c.x) > plan.width_mm / 2 - kEdgeMarginMm - reach ||
          std::abs(c.y) > plan.height_mm / 2 - kEdgeMarginMm - reach) {
        continue;
      }
      const bool near_hole = std::any_of(plan.holes.begin(), plan.holes.end(), [&](const HoleTruth& h) {
        return std::hypot(h.x_mm - c.x, h.y_mm - c.y) < h.diameter_mm / 2 + kHoleMarginMm + reach;
      });
      const cv::Rect2d box(c.x - reach - 2, c.y - reach - 2, 2 * reach + 4, 2 * reach + 4);
      const bool near_other =
          std::any_of(taken.begin(), taken.end(), [&](const cv::Rect2d& t) { return (t & box).area() > 0; });
      if (near_hole || near_other) continue;
      taken.push_back(box);
      GlintSpot spot{pl.px(c), core * pl.scale, halo * pl.scale, peak};
      if (cfg.soft_glints > 0) {  // drawn only then: without soft glints the frames stay as they were
        spot.soft = rng.uniform(0.0, 1.0) < cfg.soft_glints;
        spot.target = rng.uniform(200.0, 232.0);
      }
      out.push_back(spot);
      break;
    }
  }
  return out;
}

/// The box that holds `box` as the lens shows it.
cv::Rect2d distort_box(const SyntheticPartsConfig& cfg, const cv::Rect2d& box) {
  if (cfg.k1 == 0) return box;
  double x0 = std::numeric_limits<double>::max(), y0 = x0, x1 = -x0, y1 = -x0;
  for (const cv::Point2d& p : {box.tl(), box.br(), cv::Point2d(box.x + box.width, box.y),
                               cv::Point2d(box.x, box.y + box.height)}) {
    double x = 0, y = 0;
    distort_point(cfg, p.x, p.y, &x, &y);
    x0 = std::min(x0, x);
    y0 = std::min(y0, y);
    x1 = std::max(x1, x);
    y1 = std::max(y1, y);
  }
  return {x0, y0, x1 - x0, y1 - y0};
}

FramePlan plan_frame(const SyntheticPartsConfig& cfg, std::uint64_t index) {
  FramePlan f;
  f.part = plan_part(cfg, index);
  f.pose = plan_pose(cfg, index);
  f.placement = {f.pose.cx, f.pose.cy, std::cos(f.pose.angle), std::sin(f.pose.angle), 1.0 / cfg.mm_per_px};
  PartTruth& t = f.truth;
  t.part_id = synthetic_part_id(cfg.station, index);
  t.station = cfg.station;
  t.camera = cfg.camera;
  t.frame_index = index;
  t.variant = f.part.variant->name;
  t.mm_per_px = cfg.mm_per_px;
  t.width_mm = f.part.width_mm;
  t.height_mm = f.part.height_mm;
  t.angle_deg = f.pose.angle * 180.0 / kPi;
  distort_point(cfg, f.pose.cx, f.pose.cy, &t.centre_x_px, &t.centre_y_px);
  t.holes = f.part.holes;
  t.k1 = cfg.k1;
  t.focal_px = kWorkingDistanceMm / cfg.mm_per_px;
  const cv::Rect2d frame(0, 0, cfg.width, cfg.height);
  for (std::size_t i = 0; i < f.part.defects.size(); ++i) {
    const DefectShape& d = f.part.defects[i];
    PixelDefect p = to_pixels(i, f.placement, f.pose.angle, f.part);
    const cv::Rect2d box = distort_box(cfg, p.box) & frame;
    if (box.area() <= 0) continue;
    t.defects.push_back(DefectTruth{d.class_name, static_cast<float>(box.x), static_cast<float>(box.y),
                                    static_cast<float>(box.width), static_cast<float>(box.height),
                                    static_cast<float>(d.contrast)});
    f.defects.push_back(std::move(p));
  }
  f.glints = plan_glints(cfg, index, f.part, f.placement);
  for (const auto& g : f.glints) {
    const double reach = g.core_px + 2 * g.halo_px;
    const cv::Rect2d box =
        distort_box(cfg, cv::Rect2d(g.centre.x - reach, g.centre.y - reach, 2 * reach, 2 * reach)) & frame;
    t.glints.push_back(PartTruth::Glint{static_cast<float>(box.x), static_cast<float>(box.y),
                                        static_cast<float>(box.width), static_cast<float>(box.height)});
  }
  return f;
}

/// A box filter of length 1 + `extra` pixels as 5 symmetric taps.
std::array<float, 5> motion_kernel(double extra) {
  const double half = std::min(0.5 + extra / 2, 2.5);
  std::array<float, 5> k{};
  double sum = 0;
  for (int i = -2; i <= 2; ++i) {
    const double lo = std::max(i - 0.5, -half), hi = std::min(i + 0.5, half);
    const double w = std::max(0.0, hi - lo);
    k[static_cast<std::size_t>(i + 2)] = static_cast<float>(w);
    sum += w;
  }
  for (auto& w : k) w = static_cast<float>(w / sum);
  return k;
}

// -- the calibration target ----------------------------------------------------

/// A checkerboard printed on white card with a quiet zone of one square,
/// held at some pose under the camera.
struct TargetPlan {
  cv::Matx33d to_board;  ///< ideal image (px) -> board plane (mm, origin at the board's centre)
  double half_w = 0, half_h = 0;  ///< of the printed squares, mm
  double gain = 1;
  int noise_x = 0, noise_y = 0, belt_offset = 0;
  cv::Rect2d extent;  ///< of the card in the ideal image
  PartTruth truth;
};

TargetPlan plan_target(const SyntheticPartsConfig& cfg, std::uint64_t index) {
  Rng rng(hash_of({cfg.seed, static_cast<std::uint64_t>(cfg.station), static_cast<std::uint64_t>(cfg.camera), index,
                   std::uint64_t(Stream::target)}));
  TargetPlan t;
  const double f = kWorkingDistanceMm / cfg.mm_per_px;
  const double cx = (cfg.width - 1) / 2.0, cy = (cfg.height - 1) / 2.0;
  t.half_w = (cfg.board_cols + 1) * cfg.square_mm / 2;
  t.half_h = (cfg.board_rows + 1) * cfg.square_mm / 2;
  // Frame 0 lies flat and centred on the working plane; the others are
  // turned, tilted about a random axis in the plane, lifted or lowered a
  // little, and moved about so that the board's corners reach every part of
  // the frame.
  double spin = 0, tilt = 0, axis = 0, ox = 0, oy = 0, z = kWorkingDistanceMm;
  if (index > 0) {
    spin = rng.uniform(-15.0, 15.0) * kPi / 180.0;
    tilt = rng.uniform(0.35, 1.0) * cfg.max_tilt_deg * kPi / 180.0;
    axis = rng.uniform(0, 2 * kPi);
    z = kWorkingDistanceMm * rng.uniform(0.92, 1.08);
    const double room_x = std::max(0.0, cfg.width * cfg.mm_per_px / 2 - t.half_w * 0.8);
    const double room_y = std::max(0.0, cfg.height * cfg.mm_per_px / 2 - t.half_h * 0.8);
    ox = rng.uniform(-room_x, room_x);
    oy = rng.uniform(-room_y, room_y);
  }
  t.gain = rng.uniform(0.95, 1.05);
  t.belt_offset = rng.range(0, 511);
  t.noise_x = rng.range(0, 511);
  t.noise_y = rng.range(0, 511);
  // Rotation: spin about the optical axis, then tilt about `axis` (Rodrigues).
  const cv::Vec3d k(std::cos(axis), std::sin(axis), 0);
  const cv::Matx33d kx(0, -k[2], k[1], k[2], 0, -k[0], -k[1], k[0], 0);
  const cv::Matx33d tilt_r = cv::Matx33d::eye() + std::sin(tilt) * kx + (1 - std::cos(tilt)) * kx * kx;
  const cv::Matx33d spin_r(std::cos(spin), -std::sin(spin), 0, std::sin(spin), std::cos(spin), 0, 0, 0, 1);
  const cv::Matx33d r = tilt_r * spin_r;
  const cv::Matx33d cam(f, 0, cx, 0, f, cy, 0, 0, 1);
  const cv::Matx33d to_image = cam * cv::Matx33d(r(0, 0), r(0, 1), ox, r(1, 0), r(1, 1), oy, r(2, 0), r(2, 1), z);
  t.to_board = to_image.inv();
  // The card (squares plus a quiet zone of one square) in the ideal image.
  const double cw = t.half_w + cfg.square_mm, ch = t.half_h + cfg.square_mm;
  double x0 = std::numeric_limits<double>::max(), y0 = x0, x1 = -x0, y1 = -x0;
  for (const cv::Vec3d& c : {cv::Vec3d(-cw, -ch, 1), cv::Vec3d(cw, -ch, 1), cv::Vec3d(cw, ch, 1), cv::Vec3d(-cw, ch, 1)}) {
    const cv::Vec3d p = to_image * c;
    x0 = std::min(x0, p[0] / p[2]);
    y0 = std::min(y0, p[1] / p[2]);
    x1 = std::max(x1, p[0] / p[2]);
    y1 = std::max(y1, p[1] / p[2]);
  }
  t.extent = {x0, y0, x1 - x0, y1 - y0};
  const cv::Vec3d centre = to_image * cv::Vec3d(0, 0, 1);
  PartTruth& truth = t.truth;
  truth.part_id = synthetic_part_id(cfg.station, index);
  truth.station = cfg.station;
  truth.camera = cfg.camera;
  truth.frame_index = index;
  truth.variant = "checkerboard";
  truth.mm_per_px = cfg.mm_per_px;
  truth.width_mm = 2 * t.half_w;
  truth.height_mm = 2 * t.half_h;
  truth.angle_deg = spin * 180.0 / kPi;
  distort_point(cfg, centre[0] / centre[2], centre[1] / centre[2], &truth.centre_x_px, &truth.centre_y_px);
  truth.k1 = cfg.k1;
  truth.focal_px = f;
  truth.square_mm = cfg.square_mm;
  truth.tilt_deg = tilt * 180.0 / kPi;
  return t;
}

}  // namespace

void distort_point(const SyntheticPartsConfig& config, double x, double y, double* xd, double* yd) {
  const double cx = (config.width - 1) / 2.0, cy = (config.height - 1) / 2.0;
  const double half_diag = std::hypot(config.width, config.height) / 2;
  const double r2 = ((x - cx) * (x - cx) + (y - cy) * (y - cy)) / (half_diag * half_diag);
  const double scale = 1 + config.k1 * r2;
  *xd = cx + (x - cx) * scale;
  *yd = cy + (y - cy) * scale;
}

// -- the catalogue ---------------------------------------------------------------

const std::vector<PartVariant>& synthetic_part_variants() {
  static const std::vector<PartVariant> variants = {
      {"plate_120x80_4h", 120.0, 80.0, {{-45, -25, 12}, {45, -25, 12}, {-45, 25, 12}, {45, 25, 12}}},
      {"plate_100x70_6h",
       100.0,
       70.0,
       {{-35, -22, 10}, {0, -22, 10}, {35, -22, 10}, {-35, 22, 10}, {0, 22, 10}, {35, 22, 10}}},
      {"plate_130x85_5h", 130.0, 85.0, {{-52, -30, 8}, {52, -30, 8}, {-52, 30, 8}, {52, 30, 8}, {0, 0, 16}}},
      {"plate_110x60_4h", 110.0, 60.0, {{-40, 0, 14}, {40, 0, 14}, {0, -17, 9}, {0, 17, 9}}},
  };
  return variants;
}

std::uint64_t synthetic_part_id(int station, std::uint64_t index) {
  return static_cast<std::uint64_t>(station + 1) * 1'000'000ULL + index;
}

// -- the precomputed state of one camera --------------------------------------

struct SyntheticParts::Precomputed {
  cv::Mat belt;                  ///< CV_8U, height x (width + kBeltPeriod), periodic along x
  cv::Mat metal;                 ///< CV_8S, deviations of the metal's reflectance, in the part's frame
  cv::Mat noise_up, noise_down;  ///< CV_8U, kNoiseRows x (width + kNoiseCols): max(n, 0) and max(-n, 0)
  cv::Mat light;                 ///< CV_8U, the lighting over the frame, 255 at its brightest
  double light_max = 1;          ///< the lighting that 255 stands for
  cv::Mat lens_x, lens_y;        ///< CV_32F: for each pixel, where in the ideal image it looks; empty without distortion
  static constexpr int kBeltPeriod = 512;
  static constexpr int kNoiseRows = 512;
  static constexpr int kNoiseCols = 512;
};

namespace {

cv::Mat wrap_blur(const cv::Mat& src, double sigma_x, double sigma_y) {
  const int bx = static_cast<int>(std::ceil(3 * sigma_x)) + 1, by = static_cast<int>(std::ceil(3 * sigma_y)) + 1;
  cv::Mat padded, blurred;
  cv::copyMakeBorder(src, padded, by, by, bx, bx, cv::BORDER_WRAP);
  cv::GaussianBlur(padded, blurred, cv::Size(0, 0), sigma_x, sigma_y, cv::BORDER_REFLECT);
  return blurred(cv::Rect(bx, by, src.cols, src.rows)).clone();
}

/// Rescales `m` (CV_32F) to zero mean and standard deviation `sigma`.
void normalise(cv::Mat& m, double sigma) {
  cv::Scalar mean, sd;
  cv::meanStdDev(m, mean, sd);
  m = (m - mean[0]) * (sigma / std::max(sd[0], 1e-9));
}

}  // namespace

SyntheticParts::SyntheticParts(SyntheticPartsConfig config) : config_(config), pre_(std::make_unique<Precomputed>()) {
  if (config_.width < 16 || config_.height < 16) throw std::invalid_argument("synthetic parts: frame too small");
  if (!(config_.mm_per_px > 0)) throw std::invalid_argument("synthetic parts: mm_per_px must be positive");
  if (!(std::abs(config_.k1) <= 0.1)) throw std::invalid_argument("synthetic parts: k1 must be within [-0.1, 0.1]");
  const int w = config_.width, h = config_.height;
  const auto station = static_cast<std::uint64_t>(config_.station);
  const auto camera = static_cast<std::uint64_t>(config_.camera);
  const double px_per_mm = 1.0 / config_.mm_per_px;

  // The belt: a dark woven rubber, periodic along the direction of travel.
  {
    cv::RNG rng(hash_of({config_.seed, station, camera, std::uint64_t(Stream::belt)}));
    const int period = Precomputed::kBeltPeriod;
    cv::Mat fine(h, period, CV_32F), coarse(h, period, CV_32F);
    rng.fill(fine, cv::RNG::NORMAL, 0.0, 1.0);
    rng.fill(coarse, cv::RNG::NORMAL, 0.0, 1.0);
    fine = wrap_blur(fine, 0.7, 0.7);
    coarse = wrap_blur(coarse, 6.0, 3.0);
    normalise(fine, 2.5);
    normalise(coarse, 3.0);
    const double drawn = rng.uniform(38.0, 50.0);
    const double level = config_.belt_level > 0 ? config_.belt_level : drawn;
    // A weave of about 0.8 x 0.6 mm, a whole number of times in the tile so it repeats seamlessly.
    const double weaves = std::max(1.0, std::round(period * config_.mm_per_px / 0.8));
    const double weave_x = 2 * kPi * weaves / period, weave_y = 2 * kPi / 0.6 * config_.mm_per_px;
    cv::Mat tile(h, period, CV_8U);
    for (int y = 0; y < h; ++y) {
      const float* f = fine.ptr<float>(y);
      const float* c = coarse.ptr<float>(y);
      auto* t = tile.ptr<std::uint8_t>(y);
      for (int x = 0; x < period; ++x) {
        const double weave = 2.0 * std::sin(weave_x * x) * std::sin(weave_y * y);
        t[x] = cv::saturate_cast<std::uint8_t>(level + f[x] + c[x] + weave);
      }
    }
    cv::Mat belt(h, w + period, CV_8U);
    for (int x0 = 0; x0 < belt.cols; x0 += period) {
      const int n = std::min(period, belt.cols - x0);
      tile(cv::Rect(0, 0, n, h)).copyTo(belt(cv::Rect(x0, 0, n, h)));
    }
    pre_->belt = belt;
  }

  // The metal: brushed streaks along the plate's long side, fine grain and
  // soft blotches, shared by both cameras of a station (same plates).
  {
    cv::RNG rng(hash_of({config_.seed, station, std::uint64_t(Stream::metal)}));
    const int tw = static_cast<int>(std::ceil(140.0 * px_per_mm)) + 256;
    const int th = static_cast<int>(std::ceil(95.0 * px_per_mm)) + 256;
    cv::Mat brushed(th, tw, CV_32F), grain(th, tw, CV_32F), blotch(th / 8 + 1, tw / 8 + 1, CV_32F);
    rng.fill(brushed, cv::RNG::NORMAL, 0.0, 1.0);
    rng.fill(grain, cv::RNG::NORMAL, 0.0, 1.0);
    rng.fill(blotch, cv::RNG::NORMAL, 0.0, 1.0);
    cv::GaussianBlur(brushed, brushed, cv::Size(0, 0), 4.0 * px_per_mm, 0.05 * px_per_mm + 0.3);
    cv::GaussianBlur(grain, grain, cv::Size(0, 0), 0.6);
    cv::GaussianBlur(blotch, blotch, cv::Size(0, 0), 2.0);
    cv::resize(blotch, blotch, brushed.size(), 0, 0, cv::INTER_CUBIC);
    normalise(brushed, 1.8);
    normalise(grain, 1.2);
    normalise(blotch, 4.0);
    cv::Mat sum = brushed + grain + blotch;
    sum.convertTo(pre_->metal, CV_8S);
  }

  // Sensor noise, reused at a random offset in every frame.
  {
    cv::RNG rng(hash_of({config_.seed, station, camera, std::uint64_t(Stream::noise)}));
    cv::Mat noise(Precomputed::kNoiseRows, w + Precomputed::kNoiseCols, CV_32F);
    rng.fill(noise, cv::RNG::NORMAL, 0.0, config_.noise_sigma);
    noise.convertTo(pre_->noise_up, CV_8U);
    cv::Mat negated = -noise;
    negated.convertTo(pre_->noise_down, CV_8U);
  }

  // Lighting: a gradient times a vignette.
  {
    Rng rng(hash_of({config_.seed, station, camera, std::uint64_t(Stream::light)}));
    const double half_diag = std::hypot(w, h) / 2;
    const double k = rng.uniform(0.25, 0.45) + config_.vignette;
    const double gdir = rng.uniform(0, 2 * kPi), gmag = rng.uniform(0.08, 0.22);
    const double vx = w / 2.0 + rng.uniform(-0.15, 0.15) * w, vy = h / 2.0 + rng.uniform(-0.15, 0.15) * h;
    const double level = rng.uniform(0.98, 1.08);
    // Side light: a steeper gradient of its own direction (drawn last, so the
    // plain camera's lighting is unchanged).
    const double sdir = rng.uniform(0, 2 * kPi);
    const double sx = config_.side_light * std::cos(sdir), sy = config_.side_light * std::sin(sdir);
    // Side light dims the far side rather than brightening the near one: the
    // exposure is set for the brightest metal, as on a line.
    const double side_dim = std::exp(-config_.side_light);
    std::vector<double> lx(static_cast<std::size_t>(w)), ly(static_cast<std::size_t>(h));
    for (int x = 0; x < w; ++x) {
      const double dx = (x - vx) / half_diag;
      lx[static_cast<std::size_t>(x)] =
          level * side_dim * std::exp((gmag * std::cos(gdir) + sx) * (x - w / 2.0) / half_diag - k * dx * dx);
    }
    for (int y = 0; y < h; ++y) {
      const double dy = (y - vy) / half_diag;
      ly[static_cast<std::size_t>(y)] =
          std::exp((gmag * std::sin(gdir) + sy) * (y - h / 2.0) / half_diag - k * dy * dy);
    }
    pre_->light_max = *std::max_element(lx.begin(), lx.end()) * *std::max_element(ly.begin(), ly.end());
    pre_->light.create(h, w, CV_8U);
    for (int y = 0; y < h; ++y) {
      auto* l = pre_->light.ptr<std::uint8_t>(y);
      for (int x = 0; x < w; ++x) {
        l[x] = cv::saturate_cast<std::uint8_t>(lx[static_cast<std::size_t>(x)] * ly[static_cast<std::size_t>(y)] /
                                               pre_->light_max * 255.0);
      }
    }
  }

  // The lens: for each pixel, the point of the ideal image it shows.
  if (config_.k1 != 0) {
    const double cx = (w - 1) / 2.0, cy = (h - 1) / 2.0, half_diag = std::hypot(w, h) / 2;
    pre_->lens_x.create(h, w, CV_32F);
    pre_->lens_y.create(h, w, CV_32F);
    for (int y = 0; y < h; ++y) {
      auto* mx = pre_->lens_x.ptr<float>(y);
      auto* my = pre_->lens_y.ptr<float>(y);
      for (int x = 0; x < w; ++x) {
        // Solve u (1 + k1 u^2) = s for the ideal radius u (Newton; the map is
        // monotonic over the frame for |k1| <= 0.1).
        const double s = std::hypot(x - cx, y - cy) / half_diag;
        double u = s;
        for (int i = 0; i < 8; ++i) u -= (u * (1 + config_.k1 * u * u) - s) / (1 + 3 * config_.k1 * u * u);
        const double ratio = s > 0 ? u / s : 1.0;
        mx[x] = static_cast<float>(cx + (x - cx) * ratio);
        my[x] = static_cast<float>(cy + (y - cy) * ratio);
      }
    }
  }
}

SyntheticParts::~SyntheticParts() = default;
SyntheticParts::SyntheticParts(SyntheticParts&&) noexcept = default;
SyntheticParts& SyntheticParts::operator=(SyntheticParts&&) noexcept = default;

PartTruth SyntheticParts::truth(std::uint64_t index) const {
  if (config_.scene == SyntheticScene::checkerboard) return plan_target(config_, index).truth;
  return plan_frame(config_, index).truth;
}

PartTruth SyntheticParts::render(std::uint64_t index, std::uint8_t* bgr, std::size_t stride) const {
  if (config_.scene == SyntheticScene::checkerboard) return render_target(index, bgr, stride);
  const FramePlan f = plan_frame(config_, index);
  const int w = config_.width, h = config_.height;
  const Precomputed& pre = *pre_;

  // Reflectance: the belt, at this frame's position of the conveyor.
  const cv::Mat belt = pre.belt(cv::Rect(f.pose.belt_offset, 0, w, h));
  cv::Mat reflect = belt.clone();

  // The plate, with its edges covered in proportion (anti-aliased), textured
  // in its own frame.
  const Placement& pl = f.placement;
  const double hw = f.part.width_mm / 2 * pl.scale, hh = f.part.height_mm / 2 * pl.scale;
  {
    const double ex = std::abs(hw * pl.c) + std::abs(hh * pl.s) + 2, ey = std::abs(hw * pl.s) + std::abs(hh * pl.c) + 2;
    const int x0 = std::max(0, static_cast<int>(std::floor(pl.cx - ex)));
    const int x1 = std::min(w - 1, static_cast<int>(std::ceil(pl.cx + ex)));
    const int y0 = std::max(0, static_cast<int>(std::floor(pl.cy - ey)));
    const int y1 = std::min(h - 1, static_cast<int>(std::ceil(pl.cy + ey)));
    const double tu = hw + 8 + f.part.texture_u, tv = hh + 8 + f.part.texture_v;
    const int metal = static_cast<int>(std::lround(f.part.metal_level));
    const auto fc = static_cast<float>(pl.c), fs = static_cast<float>(pl.s);
    const auto fhw = static_cast<float>(hw + 0.5), fhh = static_cast<float>(hh + 0.5);
    const int tex_w = pre.metal.cols, tex_h = pre.metal.rows;
    // The metal's grey level for each texture value (indexed by its byte).
    std::array<std::uint8_t, 256> level{};
    for (int i = 0; i < 256; ++i) {
      level[static_cast<std::size_t>(i)] =
          static_cast<std::uint8_t>(std::clamp(metal + static_cast<std::int8_t>(i), 0, 255));
    }
    for (int y = y0; y <= y1; ++y) {
      auto* r = reflect.ptr<std::uint8_t>(y);
      const double dy = y - pl.cy;
      // The span of this row that lies fully inside the plate needs no coverage.
      double in_lo = x0, in_hi = x1;
      for (int pass = 0; pass < 2; ++pass) {
        const double a = pass == 0 ? pl.c : -pl.s;  // u or v = a * dx + b * dy
        const double b = pass == 0 ? pl.s : pl.c;
        const double lim = (pass == 0 ? hw : hh) - 0.5;
        if (std::abs(a) < 1e-12) {
          if (std::abs(b * dy) > lim) in_hi = in_lo - 1;
          continue;
        }
        double lo = (-lim - b * dy) / a, hi = (lim - b * dy) / a;
        if (lo > hi) std::swap(lo, hi);
        in_lo = std::max(in_lo, std::ceil(pl.cx + lo));
        in_hi = std::min(in_hi, std::floor(pl.cx + hi));
      }
      const int span_lo = static_cast<int>(in_lo), span_hi = static_cast<int>(in_hi);
      for (int x = x0; x <= x1; ++x) {
        if (x == span_lo && span_hi >= span_lo) {
          // Inside, copy runs of texture rows: along a row v moves by -s a
          // pixel, so a run lasts until v crosses the next texture row (u
          // moves by c, which differs from 1 by less than 0.3 %).
          while (x <= span_hi) {
            const double dx = x - pl.cx;
            const double tu_x = dx * pl.c + dy * pl.s + tu, tv_x = -dx * pl.s + dy * pl.c + tv;
            const double fv = std::floor(tv_x);
            int n = span_hi - x + 1;
            if (pl.s > 1e-9) {
              n = std::min(n, static_cast<int>((tv_x - fv) / pl.s) + 1);
            } else if (pl.s < -1e-9) {
              n = std::min(n, static_cast<int>((1.0 - (tv_x - fv)) / -pl.s) + 1);
            }
            const int iv = std::clamp(static_cast<int>(fv), 0, tex_h - 1);
            const int iu = std::clamp(static_cast<int>(std::floor(tu_x)), 0, tex_w - n);
            const auto* t = pre.metal.ptr<std::int8_t>(iv) + iu;
            for (int i = 0; i < n; ++i) r[x + i] = level[static_cast<std::uint8_t>(t[i])];
            x += n;
          }
          if (x > x1) break;
        }
        const auto dx = static_cast<float>(x - pl.cx);
        const float u = dx * fc + static_cast<float>(dy) * fs;
        const float v = -dx * fs + static_cast<float>(dy) * fc;
        const float ax = std::min(1.0F, fhw - std::abs(u));
        const float ay = std::min(1.0F, fhh - std::abs(v));
        if (ax <= 0 || ay <= 0) continue;
        const int iu = std::clamp(static_cast<int>(u + static_cast<float>(tu)), 0, tex_w - 1);
        const int iv = std::clamp(static_cast<int>(v + static_cast<float>(tv)), 0, tex_h - 1);
        const auto m = static_cast<float>(metal + pre.metal.ptr<std::int8_t>(iv)[iu]);
        const float a = ax * ay;
        r[x] = static_cast<std::uint8_t>(
            std::clamp(static_cast<float>(r[x]) + (m - static_cast<float>(r[x])) * a + 0.5F, 0.0F, 255.0F));
      }
    }
  }

  // Drilled holes show the belt through them.
  for (const auto& hole : f.part.holes) {
    if (hole.missing) continue;
    const cv::Point2d c = pl.px({hole.x_mm, hole.y_mm});
    const double rad = hole.diameter_mm / 2 * pl.scale;
    const int x0 = std::max(0, static_cast<int>(std::floor(c.x - rad - 2)));
    const int x1 = std::min(w - 1, static_cast<int>(std::ceil(c.x + rad + 2)));
    const int y0 = std::max(0, static_cast<int>(std::floor(c.y - rad - 2)));
    const int y1 = std::min(h - 1, static_cast<int>(std::ceil(c.y + rad + 2)));
    for (int y = y0; y <= y1; ++y) {
      auto* r = reflect.ptr<std::uint8_t>(y);
      const auto* b = belt.ptr<std::uint8_t>(y);
      const double dy = y - c.y;
      // Fully open span: the belt as it is; coverage only at the rim.
      const double inner = rad - 0.75;
      int open_lo = x1 + 1, open_hi = x1;
      if (inner > std::abs(dy)) {
        const double half = std::sqrt(inner * inner - dy * dy);
        open_lo = std::max(x0, static_cast<int>(std::ceil(c.x - half)));
        open_hi = std::min(x1, static_cast<int>(std::floor(c.x + half)));
      }
      for (int x = x0; x <= x1; ++x) {
        if (x == open_lo && open_hi >= open_lo) {
          std::memcpy(r + x, b + x, static_cast<std::size_t>(open_hi - open_lo + 1));
          x = open_hi;
          continue;
        }
        const double a = std::clamp(rad + 0.5 - std::hypot(x - c.x, dy), 0.0, 1.0);
        if (a <= 0) continue;
        r[x] = static_cast<std::uint8_t>(std::lround(r[x] + (b[x] - r[x]) * a));
      }
    }
  }

  // Surface defects, drawn as coverage masks and added with their contrast.
  constexpr int kShift = 4;
  constexpr double kSub = 1 << kShift;
  for (const auto& d : f.defects) {
    const DefectShape& shape = f.part.defects[d.shape];
    if (shape.class_name == "missing_hole") continue;
    const cv::Rect roi =
        cv::Rect(static_cast<int>(std::floor(d.box.x)) - 3, static_cast<int>(std::floor(d.box.y)) - 3,
                 static_cast<int>(std::ceil(d.box.width)) + 7, static_cast<int>(std::ceil(d.box.height)) + 7) &
        cv::Rect(0, 0, w, h);
    if (roi.area() <= 0) continue;
    cv::Mat mask = cv::Mat::zeros(roi.size(), CV_8U);
    auto local = [&](cv::Point2d p) {
      return cv::Point(static_cast<int>(std::lround((p.x - roi.x) * kSub)),
                       static_cast<int>(std::lround((p.y - roi.y) * kSub)));
    };
    cv::Mat bright;  // the bright wall of a two-toned scratch
    if (shape.class_name == "pit" && !d.outline.empty()) {
      std::vector<cv::Point> poly;
      for (const auto& o : d.outline) poly.push_back(local(o));
      cv::fillPoly(mask, std::vector<std::vector<cv::Point>>{poly}, cv::Scalar(255), cv::LINE_AA, kShift);
      cv::GaussianBlur(mask, mask, cv::Size(3, 3), 0.5);
    } else if (shape.class_name == "pit") {
      // A main ellipse and its satellites (offsets and sizes relative to the
      // main diameters), softened by a slight blur.
      const double ca = std::cos(d.angle), sa = std::sin(d.angle);
      auto blob = [&](double ox, double oy, double size) {
        const cv::Point2d c =
            d.points[0] + cv::Point2d((ox * ca - oy * sa) * d.length_px, (ox * sa + oy * ca) * d.length_px);
        cv::ellipse(mask, local(c),
                    cv::Size(static_cast<int>(std::lround(size * d.length_px / 2 * kSub)),
                             static_cast<int>(std::lround(size * d.width_px / 2 * kSub))),
                    d.angle * 180.0 / kPi, 0, 360, cv::Scalar(255), cv::FILLED, cv::LINE_AA, kShift);
      };
      blob(0, 0, 1);
      for (const auto& b : shape.satellites) blob(b.dx, b.dy, b.size);
      cv::GaussianBlur(mask, mask, cv::Size(3, 3), 0.5);
    } else {
      // Stretch by stretch, each with its own depth.
      const int thickness = std::max(1, static_cast<int>(std::lround(d.width_px)));
      const auto& st = shape.depth;
      std::vector<cv::Point2d> path = d.points;
      if (shape.class_name == "scratch" && path.size() == 2) {
        path.clear();
        for (std::size_t i = 0; i <= st.size(); ++i) {
          const double t = static_cast<double>(i) / static_cast<double>(st.size());
          path.push_back(d.points[0] + t * (d.points[1] - d.points[0]));
        }
      }
      auto depth_at = [&](std::size_t i) {
        if (st.empty()) return 1.0;
        return st[std::min(st.size() - 1, i * st.size() / (path.size() - 1))];
      };
      auto stroke = [&](cv::Mat& m, const std::vector<cv::Point2d>& line, double shift_px, bool fixed_depth) {
        for (std::size_t i = 0; i + 1 < line.size(); ++i) {
          cv::Point2d a = line[i], b = line[i + 1];
          if (shift_px != 0) {
            const cv::Point2d dir = (b - a) * (1.0 / std::max(1e-9, cv::norm(b - a)));
            const cv::Point2d n(-dir.y * shift_px, dir.x * shift_px);
            a += n;
            b += n;
          }
          const double depth = fixed_depth ? 0.85 : depth_at(i);
          cv::line(m, local(a), local(b), cv::Scalar(255 * depth), thickness, cv::LINE_AA, kShift);
        }
      };
      if (shape.two_tone) {
        // A groove under side light: the shaded wall dark, the lit one bright.
        bright = cv::Mat::zeros(roi.size(), CV_8U);
        const double half = std::max(0.5, d.width_px / 2);
        stroke(mask, path, -half, false);
        stroke(bright, path, half, false);
      } else {
        stroke(mask, path, 0, false);
      }
      for (const auto& b : d.branches) stroke(mask, b, 0, true);
    }
    auto add = [&](const cv::Mat& m_, double grey) {
      const auto contrast = static_cast<float>(grey / 255.0);
      for (int y = 0; y < roi.height; ++y) {
        const auto* m = m_.ptr<std::uint8_t>(y);
        auto* r = reflect.ptr<std::uint8_t>(roi.y + y) + roi.x;
        for (int x = 0; x < roi.width; ++x) {
          if (m[x] == 0) continue;
          r[x] = cv::saturate_cast<std::uint8_t>(static_cast<float>(r[x]) + contrast * static_cast<float>(m[x]));
        }
      }
    };
    add(mask, shape.contrast);
    if (!bright.empty()) add(bright, shape.bright_wall);
  }

  // Specular glints: light added after the lighting, which saturates.
  cv::Mat glare;
  if (!f.glints.empty()) {
    glare = cv::Mat::zeros(h, w, CV_8U);
    for (const auto& g : f.glints) {
      double peak = g.peak;
      if (g.soft) {
        // Up to `target` over the level of the lit metal at its centre, so
        // the core stays below clipping.
        const int cx = std::clamp(static_cast<int>(std::lround(g.centre.x)), 0, w - 1);
        const int cy = std::clamp(static_cast<int>(std::lround(g.centre.y)), 0, h - 1);
        const double level = reflect.at<std::uint8_t>(cy, cx) * pre_->light.at<std::uint8_t>(cy, cx) *
                             f.pose.gain * pre_->light_max / 255.0;
        peak = std::max(0.0, g.target - level);
      }
      const double reach = g.core_px + 3 * g.halo_px;
      const int x0 = std::max(0, static_cast<int>(g.centre.x - reach)), x1 = std::min(w - 1, static_cast<int>(g.centre.x + reach) + 1);
      const int y0 = std::max(0, static_cast<int>(g.centre.y - reach)), y1 = std::min(h - 1, static_cast<int>(g.centre.y + reach) + 1);
      for (int y = y0; y <= y1; ++y) {
        auto* r = glare.ptr<std::uint8_t>(y);
        for (int x = x0; x <= x1; ++x) {
          const double dist = std::hypot(x - g.centre.x, y - g.centre.y);
          const double t = dist <= g.core_px ? 1.0 : std::exp(-0.5 * std::pow((dist - g.core_px) / g.halo_px, 2));
          r[x] = cv::saturate_cast<std::uint8_t>(r[x] + peak * t);
        }
      }
    }
  }

  expose(reflect, f.pose.blur_px, f.pose.gain, f.pose.noise_x, f.pose.noise_y, bgr, stride,
         glare.empty() ? nullptr : &glare);
  return f.truth;
}

PartTruth SyntheticParts::render_target(std::uint64_t index, std::uint8_t* bgr, std::size_t stride) const {
  const TargetPlan t = plan_target(config_, index);
  const int w = config_.width, h = config_.height;
  cv::Mat reflect = pre_->belt(cv::Rect(t.belt_offset, 0, w, h)).clone();
  constexpr double kWhite = 215, kBlack = 35, kCard = 215;
  const double sq = config_.square_mm;
  const double card_w = t.half_w + sq, card_h = t.half_h + sq;
  const cv::Rect box = cv::Rect(static_cast<int>(std::floor(t.extent.x)) - 1, static_cast<int>(std::floor(t.extent.y)) - 1,
                                static_cast<int>(std::ceil(t.extent.width)) + 3,
                                static_cast<int>(std::ceil(t.extent.height)) + 3) &
                       cv::Rect(0, 0, w, h);
  // 4 x 4 samples a pixel: the card's edges and the squares' are antialiased.
  constexpr int kSamples = 4;
  const cv::Matx33d& m = t.to_board;
  for (int y = box.y; y < box.y + box.height; ++y) {
    auto* r = reflect.ptr<std::uint8_t>(y);
    for (int x = box.x; x < box.x + box.width; ++x) {
      double sum = 0;
      for (int j = 0; j < kSamples; ++j) {
        const double py = y + (j + 0.5) / kSamples - 0.5;
        for (int i = 0; i < kSamples; ++i) {
          const double px = x + (i + 0.5) / kSamples - 0.5;
          const double wz = m(2, 0) * px + m(2, 1) * py + m(2, 2);
          const double bx = (m(0, 0) * px + m(0, 1) * py + m(0, 2)) / wz;
          const double by = (m(1, 0) * px + m(1, 1) * py + m(1, 2)) / wz;
          if (std::abs(bx) > card_w || std::abs(by) > card_h) {
            sum += r[x];
          } else if (std::abs(bx) > t.half_w || std::abs(by) > t.half_h) {
            sum += kCard;
          } else {
            const auto u = static_cast<long>(std::floor((bx + t.half_w) / sq));
            const auto v = static_cast<long>(std::floor((by + t.half_h) / sq));
            sum += ((u + v) % 2 == 0) ? kBlack : kWhite;
          }
        }
      }
      r[x] = cv::saturate_cast<std::uint8_t>(sum / (kSamples * kSamples));
    }
  }
  expose(reflect, 0.0, t.gain, t.noise_x, t.noise_y, bgr, stride);
  return t.truth;
}

void SyntheticParts::expose(cv::Mat& reflect, double blur_px, double gain, int noise_x, int noise_y,
                            std::uint8_t* bgr, std::size_t stride, const cv::Mat* glare) const {
  // Exposure: motion blur along the belt, lighting, the lens, sensor noise (a
  // tile at a random offset, added as its positive and negative parts), then
  // written once into the caller's buffer as BGR.
  const Precomputed& pre = *pre_;
  const int w = config_.width, h = config_.height;
  cv::Mat exposed;
  const std::array<float, 5> k = motion_kernel(blur_px);
  if (k[2] < 1.0F) {
    cv::filter2D(reflect, exposed, -1, cv::Mat(1, 5, CV_32F, const_cast<float*>(k.data())), cv::Point(-1, -1), 0,
                 cv::BORDER_REPLICATE);
  } else {
    exposed = reflect;
  }
  cv::multiply(exposed, pre.light, exposed, gain * pre.light_max / 255.0);
  if (glare != nullptr) cv::add(exposed, *glare, exposed);
  if (!pre.lens_x.empty()) {
    cv::Mat seen;
    cv::remap(exposed, seen, pre.lens_x, pre.lens_y, cv::INTER_LINEAR, cv::BORDER_REPLICATE);
    exposed = seen;
  }
  for (int y = 0; y < h;) {
    const int ty = (y + noise_y) % Precomputed::kNoiseRows;
    const int rows = std::min(Precomputed::kNoiseRows - ty, h - y);
    const cv::Rect tile(noise_x, ty, w, rows);
    cv::Mat band = exposed(cv::Rect(0, y, w, rows));
    cv::add(band, pre.noise_up(tile), band);
    cv::subtract(band, pre.noise_down(tile), band);
    y += rows;
  }
  cv::Mat out(h, w, CV_8UC3, bgr, stride);
  cv::cvtColor(exposed, out, cv::COLOR_GRAY2BGR);
}

// -- synthetic://parts?... ------------------------------------------------------

bool parse_synthetic_uri(const std::string& uri, SyntheticPartsConfig* config, std::string* error) {
  auto fail = [&](const std::string& message) {
    if (error != nullptr) *error = message;
    return false;
  };
  SyntheticPartsConfig c = *config;
  std::string prefix = "synthetic://parts";
  c.scene = SyntheticScene::parts;
  if (uri.compare(0, std::string("synthetic://checkerboard").size(), "synthetic://checkerboard") == 0) {
    prefix = "synthetic://checkerboard";
    c.scene = SyntheticScene::checkerboard;
  } else if (uri.compare(0, prefix.size(), prefix) != 0) {
    return fail("not a synthetic://parts or synthetic://checkerboard URI: " + uri);
  }
  std::string rest = uri.substr(prefix.size());
  if (!rest.empty() && rest[0] != '?') return fail("expected '?' after " + prefix + " in " + uri);
  if (!rest.empty()) rest.erase(0, 1);
  std::size_t pos = 0;
  while (pos <= rest.size()) {
    const std::size_t amp = std::min(rest.find('&', pos), rest.size());
    const std::string item = rest.substr(pos, amp - pos);
    pos = amp + 1;
    if (item.empty()) continue;
    const std::size_t eq = item.find('=');
    if (eq == std::string::npos) return fail("expected key=value, got '" + item + "'");
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    try {
      std::size_t used = 0;
      auto as_int = [&](long long lo, long long hi) {
        const long long v = std::stoll(value, &used);
        if (used != value.size() || v < lo || v > hi) throw std::out_of_range(key);
        return v;
      };
      auto as_double = [&](double lo, double hi) {
        const double v = std::stod(value, &used);
        if (used != value.size() || !(v >= lo && v <= hi)) throw std::out_of_range(key);
        return v;
      };
      if (key == "seed") {
        const unsigned long long v = std::stoull(value, &used);
        if (used != value.size()) throw std::out_of_range(key);
        c.seed = v;
      } else if (key == "width") {
        c.width = static_cast<int>(as_int(16, 16384));
      } else if (key == "height") {
        c.height = static_cast<int>(as_int(16, 16384));
      } else if (key == "station") {
        c.station = static_cast<int>(as_int(0, 1'000'000));
      } else if (key == "camera") {
        c.camera = static_cast<int>(as_int(0, 1'000'000));
      } else if (key == "mm_per_px") {
        c.mm_per_px = as_double(0.01, 10.0);
      } else if (key == "defect_rate") {
        c.defect_rate = as_double(0.0, 1.0);
      } else if (key == "noise_sigma") {
        c.noise_sigma = as_double(0.0, 50.0);
      } else if (key == "k1") {
        c.k1 = as_double(-0.1, 0.1);
      } else if (key == "board") {
        const std::size_t x = value.find('x');
        if (x == std::string::npos) throw std::out_of_range(key);
        const std::string cols = value.substr(0, x), rows = value.substr(x + 1);
        const int wc = std::stoi(cols, &used);
        if (used != cols.size()) throw std::out_of_range(key);
        const int hr = std::stoi(rows, &used);
        if (used != rows.size() || wc < 3 || hr < 3 || wc > 40 || hr > 40) throw std::out_of_range(key);
        c.board_cols = wc;
        c.board_rows = hr;
      } else if (key == "square_mm") {
        c.square_mm = as_double(0.5, 500.0);
      } else if (key == "max_tilt_deg") {
        c.max_tilt_deg = as_double(0.0, 60.0);
      } else if (key == "curved") {
        c.curved = as_double(0.0, 0.2);
      } else if (key == "two_tone") {
        c.two_tone = as_double(0.0, 1.0);
      } else if (key == "branching") {
        c.branching = as_double(0.0, 1.0);
      } else if (key == "irregular_pits") {
        c.irregular_pits = as_int(0, 1) != 0;
      } else if (key == "glints") {
        c.glints = static_cast<int>(as_int(0, 8));
      } else if (key == "soft_glints") {
        c.soft_glints = as_double(0.0, 1.0);
      } else if (key == "side_light") {
        c.side_light = as_double(0.0, 1.5);
      } else if (key == "vignette") {
        c.vignette = as_double(0.0, 3.0);
      } else if (key == "belt_level") {
        c.belt_level = as_double(0.0, 200.0);
      } else {
        return fail("unknown key '" + key +
                    "' in " + prefix + " (known: seed, width, height, station, camera, mm_per_px, "
                    "defect_rate, noise_sigma, k1, board, square_mm, max_tilt_deg, curved, two_tone, "
                    "branching, irregular_pits, glints, soft_glints, side_light, vignette, belt_level)");
      }
    } catch (const std::exception&) {
      return fail("bad value '" + value + "' for '" + key + "' in " + uri);
    }
  }
  *config = c;
  return true;
}

// -- ground truth as JSON -------------------------------------------------------

std::string to_json(const PartTruth& t) {
  nlohmann::json j;
  j["part_id"] = t.part_id;
  j["station"] = t.station;
  j["camera"] = t.camera;
  j["frame_index"] = t.frame_index;
  j["variant"] = t.variant;
  j["mm_per_px"] = t.mm_per_px;
  j["width_mm"] = t.width_mm;
  j["height_mm"] = t.height_mm;
  j["angle_deg"] = t.angle_deg;
  j["centre_x_px"] = t.centre_x_px;
  j["centre_y_px"] = t.centre_y_px;
  j["k1"] = t.k1;
  j["focal_px"] = t.focal_px;
  if (t.square_mm > 0) {
    j["square_mm"] = t.square_mm;
    j["tilt_deg"] = t.tilt_deg;
  }
  j["holes"] = nlohmann::json::array();
  for (const auto& h : t.holes) {
    j["holes"].push_back({{"x_mm", h.x_mm}, {"y_mm", h.y_mm}, {"diameter_mm", h.diameter_mm}, {"missing", h.missing}});
  }
  j["defects"] = nlohmann::json::array();
  for (const auto& d : t.defects) {
    j["defects"].push_back({{"class", d.class_name}, {"box", {d.x, d.y, d.width, d.height}}, {"contrast", d.contrast}});
  }
  if (!t.glints.empty()) {
    j["glints"] = nlohmann::json::array();
    for (const auto& g : t.glints) j["glints"].push_back({g.x, g.y, g.width, g.height});
  }
  return j.dump();
}

std::optional<PartTruth> parse_truth(std::string_view json) {
  const nlohmann::json j = nlohmann::json::parse(json.begin(), json.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  try {
    PartTruth t;
    t.part_id = j.at("part_id").get<std::uint64_t>();
    t.station = j.value("station", 0);
    t.camera = j.value("camera", 0);
    t.frame_index = j.value("frame_index", std::uint64_t{0});
    t.variant = j.value("variant", std::string{});
    t.mm_per_px = j.value("mm_per_px", 0.1);
    t.width_mm = j.value("width_mm", 0.0);
    t.height_mm = j.value("height_mm", 0.0);
    t.angle_deg = j.value("angle_deg", 0.0);
    t.centre_x_px = j.value("centre_x_px", 0.0);
    t.centre_y_px = j.value("centre_y_px", 0.0);
    t.k1 = j.value("k1", 0.0);
    t.focal_px = j.value("focal_px", 0.0);
    t.square_mm = j.value("square_mm", 0.0);
    t.tilt_deg = j.value("tilt_deg", 0.0);
    for (const auto& h : j.value("holes", nlohmann::json::array())) {
      t.holes.push_back(HoleTruth{h.at("x_mm").get<double>(), h.at("y_mm").get<double>(),
                                  h.at("diameter_mm").get<double>(), h.value("missing", false)});
    }
    for (const auto& d : j.value("defects", nlohmann::json::array())) {
      const auto& box = d.at("box");
      if (!box.is_array() || box.size() != 4) return std::nullopt;
      t.defects.push_back(DefectTruth{d.at("class").get<std::string>(), box[0].get<float>(), box[1].get<float>(),
                                      box[2].get<float>(), box[3].get<float>(), d.value("contrast", 0.0F)});
    }
    for (const auto& g : j.value("glints", nlohmann::json::array())) {
      if (!g.is_array() || g.size() != 4) return std::nullopt;
      t.glints.push_back(PartTruth::Glint{g[0].get<float>(), g[1].get<float>(), g[2].get<float>(), g[3].get<float>()});
    }
    return t;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

}  // namespace swarmflow::video
