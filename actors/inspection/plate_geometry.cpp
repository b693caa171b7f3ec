#include "inspection/plate_geometry.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>

#include <opencv2/imgproc.hpp>

namespace swarmflow::inspection {

namespace {

constexpr double kPi = 3.14159265358979323846;

/// Bilinear sample of a CV_8U image; NaN outside.
float sample(const cv::Mat& grey, double x, double y) {
  const int x0 = static_cast<int>(std::floor(x)), y0 = static_cast<int>(std::floor(y));
  if (x0 < 0 || y0 < 0 || x0 + 1 >= grey.cols || y0 + 1 >= grey.rows) return std::numeric_limits<float>::quiet_NaN();
  const auto fx = static_cast<float>(x - x0), fy = static_cast<float>(y - y0);
  const auto* r0 = grey.ptr<std::uint8_t>(y0) + x0;
  const auto* r1 = grey.ptr<std::uint8_t>(y0 + 1) + x0;
  const float top = static_cast<float>(r0[0]) + (static_cast<float>(r0[1]) - static_cast<float>(r0[0])) * fx;
  const float bottom = static_cast<float>(r1[0]) + (static_cast<float>(r1[1]) - static_cast<float>(r1[0])) * fx;
  return top + (bottom - top) * fy;
}

constexpr double kStep = 0.5;  ///< profile sampling step, px
constexpr int kEnds = 3;       ///< samples at each end that give the two levels

/// The offset along a profile (from `from`, in direction `dir`, `n` samples)
/// where the grey level crosses halfway between its two ends, nearest to
/// `expected`; nothing when the profile leaves the image or has no contrast.
std::optional<double> crossing(const cv::Mat& grey, cv::Point2d from, cv::Point2d dir, int n, double expected,
                               double min_contrast) {
  float s[96];
  n = std::min(n, 96);
  for (int i = 0; i < n; ++i) {
    s[i] = sample(grey, from.x + dir.x * i * kStep, from.y + dir.y * i * kStep);
    if (std::isnan(s[i])) return std::nullopt;
  }
  float a = 0, b = 0;
  for (int i = 0; i < kEnds; ++i) {
    a += s[i];
    b += s[n - 1 - i];
  }
  a /= kEnds;
  b /= kEnds;
  if (std::abs(a - b) < min_contrast) return std::nullopt;
  const float level = (a + b) / 2;
  std::optional<double> best;
  for (int i = 0; i + 1 < n; ++i) {
    const float d0 = s[i] - level, d1 = s[i + 1] - level;
    if ((d0 < 0) == (d1 < 0) || d0 == d1) continue;
    const double t = (i + static_cast<double>(d0 / (d0 - d1))) * kStep;
    if (!best || std::abs(t - expected) < std::abs(*best - expected)) best = t;
  }
  return best;
}

struct Line {
  cv::Point2d point, dir;
  double rms = 0;
  int count = 0;
};

double distance(const Line& l, cv::Point2d p) {
  const cv::Point2d d = p - l.point;
  return std::abs(d.x * l.dir.y - d.y * l.dir.x);
}

/// Least-squares line with one round of outlier removal.
std::optional<Line> fit_line(std::vector<cv::Point2f> pts) {
  for (int round = 0; round < 2; ++round) {
    if (pts.size() < 8) return std::nullopt;
    cv::Vec4f f;
    cv::fitLine(pts, f, cv::DIST_L2, 0, 0.01, 0.01);
    Line l{{f[2], f[3]}, {f[0], f[1]}, 0, static_cast<int>(pts.size())};
    double sum = 0;
    for (const auto& p : pts) sum += std::pow(distance(l, p), 2);
    l.rms = std::sqrt(sum / static_cast<double>(pts.size()));
    if (round == 1) return l;
    const double keep = std::max(3 * l.rms, 0.3);
    pts.erase(std::remove_if(pts.begin(), pts.end(), [&](const cv::Point2f& p) { return distance(l, p) > keep; }),
              pts.end());
  }
  return std::nullopt;
}

struct Circle {
  cv::Point2d centre;
  double radius = 0, rms = 0;
};

/// Algebraic (Kasa) least-squares circle with one round of outlier removal.
std::optional<Circle> fit_circle(std::vector<cv::Point2d> pts) {
  for (int round = 0; round < 2; ++round) {
    if (pts.size() < 12) return std::nullopt;
    // Centred for conditioning.
    cv::Point2d m(0, 0);
    for (const auto& p : pts) m += p;
    m *= 1.0 / static_cast<double>(pts.size());
    cv::Mat a(static_cast<int>(pts.size()), 3, CV_64F), b(static_cast<int>(pts.size()), 1, CV_64F);
    for (int i = 0; i < a.rows; ++i) {
      const cv::Point2d p = pts[static_cast<std::size_t>(i)] - m;
      a.at<double>(i, 0) = p.x;
      a.at<double>(i, 1) = p.y;
      a.at<double>(i, 2) = 1;
      b.at<double>(i, 0) = -(p.x * p.x + p.y * p.y);
    }
    cv::Mat x;
    if (!cv::solve(a, b, x, cv::DECOMP_SVD)) return std::nullopt;
    const double cx = -x.at<double>(0) / 2, cy = -x.at<double>(1) / 2;
    const double r2 = cx * cx + cy * cy - x.at<double>(2);
    if (r2 <= 0) return std::nullopt;
    Circle c{m + cv::Point2d(cx, cy), std::sqrt(r2), 0};
    double sum = 0;
    for (const auto& p : pts) sum += std::pow(std::hypot(p.x - c.centre.x, p.y - c.centre.y) - c.radius, 2);
    c.rms = std::sqrt(sum / static_cast<double>(pts.size()));
    if (round == 1) return c;
    const double keep = std::max(3 * c.rms, 0.3);
    pts.erase(std::remove_if(pts.begin(), pts.end(),
                             [&](const cv::Point2d& p) {
                               return std::abs(std::hypot(p.x - c.centre.x, p.y - c.centre.y) - c.radius) > keep;
                             }),
              pts.end());
  }
  return std::nullopt;
}

/// The lighting of a frame, fitted: log(grey) = c_metal or c_belt + a cubic
/// polynomial of the position shared by both.
struct LightFit {
  cv::Mat threshold;  ///< CV_32F: halfway between the fitted metal and belt levels
  double ratio = 0;   ///< exp(c_metal - c_belt)
  bool ok = false;
};

constexpr int kShared = 9;  ///< u, v, u^2, uv, v^2, u^3, u^2 v, u v^2, v^3

void light_terms(double u, double v, double* t) {
  t[0] = u;
  t[1] = v;
  t[2] = u * u;
  t[3] = u * v;
  t[4] = v * v;
  t[5] = u * u * u;
  t[6] = u * u * v;
  t[7] = u * v * v;
  t[8] = v * v * v;
}

/// One grey level, as a sample of the lighting of the metal or the belt.
struct LightSample {
  double t[kShared];
  double value;  ///< log of the grey level
  bool metal;
};

struct LightFrame {
  double cx, cy, scale;
  explicit LightFrame(const cv::Mat& small)
      : cx(small.cols / 2.0), cy(small.rows / 2.0), scale(2.0 / small.cols) {}
  bool add(std::vector<LightSample>* out, double x, double y, double grey, bool metal) const {
    if (grey >= 250 || grey <= 2) return false;  // saturated or clipped: no measure of the light
    LightSample s{};
    light_terms((x - cx) * scale, (y - cy) * scale, s.t);
    s.value = std::log(grey);
    s.metal = metal;
    out->push_back(s);
    return true;
  }
};

/// Samples of `small` where `metal` or `belt` (CV_8U masks) is set, on a grid.
std::vector<LightSample> samples_in(const cv::Mat& small, const cv::Mat& metal, const cv::Mat& belt) {
  const LightFrame frame(small);
  std::vector<LightSample> samples;
  const int step = small.total() > 40'000 ? 3 : 1;
  for (int y = 0; y < small.rows; y += step) {
    const auto* g = small.ptr<std::uint8_t>(y);
    const auto* m = metal.ptr<std::uint8_t>(y);
    const auto* b = belt.ptr<std::uint8_t>(y);
    for (int x = 0; x < small.cols; x += step) {
      if (m[x] != 0 || b[x] != 0) frame.add(&samples, x, y, g[x], m[x] != 0);
    }
  }
  return samples;
}

/// Samples on both sides of the strongest edges of `small` (the top 3 % of
/// the gradient), 2 px out along the gradient: the bright side is metal, the
/// dark side belt. Edges are where the plate meets the belt, whatever the
/// lighting does elsewhere, so this split is not fooled by a belt that a
/// bright corner lifts above the metal of a dim one.
std::vector<LightSample> samples_across_edges(const cv::Mat& small, const cv::Mat& glare, cv::Mat* edges) {
  const LightFrame frame(small);
  *edges = cv::Mat::zeros(small.size(), CV_8U);
  std::vector<LightSample> samples;
  cv::Mat blurred, gx, gy, magnitude;
  cv::GaussianBlur(small, blurred, cv::Size(3, 3), 0.8);
  cv::Sobel(blurred, gx, CV_32F, 1, 0, 3);
  cv::Sobel(blurred, gy, CV_32F, 0, 1, 3);
  cv::magnitude(gx, gy, magnitude);
  std::vector<float> all(magnitude.begin<float>(), magnitude.end<float>());
  if (all.size() < 100) return samples;
  const auto nth = all.begin() + static_cast<std::ptrdiff_t>(0.97 * static_cast<double>(all.size()));
  std::nth_element(all.begin(), nth, all.end());
  const float strong = std::max(*nth, 16.0F);
  constexpr double kOut = 2.0;
  for (int y = 2; y + 2 < small.rows; ++y) {
    const auto* m = magnitude.ptr<float>(y);
    for (int x = 2; x + 2 < small.cols; ++x) {
      if (m[x] < strong || glare.at<std::uint8_t>(y, x) != 0) continue;
      const double nx = gx.at<float>(y, x) / m[x], ny = gy.at<float>(y, x) / m[x];
      const int bx = static_cast<int>(std::lround(x + kOut * nx)), by = static_cast<int>(std::lround(y + kOut * ny));
      const int dx = static_cast<int>(std::lround(x - kOut * nx)), dy = static_cast<int>(std::lround(y - kOut * ny));
      if (bx < 0 || by < 0 || dx < 0 || dy < 0 || bx >= small.cols || dx >= small.cols || by >= small.rows ||
          dy >= small.rows) {
        continue;
      }
      const double bright = blurred.at<std::uint8_t>(by, bx), dark = blurred.at<std::uint8_t>(dy, dx);
      if (bright < 1.08 * dark || bright >= 250 || dark <= 2) continue;
      frame.add(&samples, bx, by, bright, true);
      frame.add(&samples, dx, dy, dark, false);
      edges->at<std::uint8_t>(y, x) = 255;
    }
  }
  return samples;
}

/// Fits the lighting to `samples` of `small`: least squares, then again
/// without the samples beyond 3 robust sigmas of the first fit (defects,
/// glints, the texture's extremes, a sample on the wrong side).
LightFit fit_light(const cv::Mat& small, const std::vector<LightSample>& samples) {
  LightFit fit;
  const LightFrame frame(small);
  const double cx = frame.cx, cy = frame.cy, scale = frame.scale;
  constexpr int kN = kShared + 2;
  cv::Matx<double, kN, 1> coef;
  std::vector<double> residual(samples.size(), 0.0);
  double limit[2] = {1e9, 1e9};  // |residual| kept, belt and metal
  for (int round = 0; round < 2; ++round) {
    cv::Matx<double, kN, kN> ata = cv::Matx<double, kN, kN>::zeros();
    cv::Matx<double, kN, 1> atb = cv::Matx<double, kN, 1>::zeros();
    int counts[2] = {0, 0};
    for (std::size_t i = 0; i < samples.size(); ++i) {
      const LightSample& s = samples[i];
      if (std::abs(residual[i]) > limit[s.metal ? 1 : 0]) continue;
      double row[kN];
      row[0] = s.metal ? 1 : 0;
      row[1] = s.metal ? 0 : 1;
      std::copy(s.t, s.t + kShared, row + 2);
      for (int a = 0; a < kN; ++a) {
        atb(a) += row[a] * s.value;
        for (int b = a; b < kN; ++b) ata(a, b) += row[a] * row[b];
      }
      ++counts[s.metal ? 1 : 0];
    }
    if (counts[0] < 50 || counts[1] < 50) return fit;
    for (int a = 0; a < kN; ++a) {
      for (int b = 0; b < a; ++b) ata(a, b) = ata(b, a);
    }
    if (!cv::solve(ata, atb, coef, cv::DECOMP_SVD)) return fit;
    // Residuals and their robust spread per class, for the second round.
    std::vector<float> spread[2];
    for (std::size_t i = 0; i < samples.size(); ++i) {
      const LightSample& s = samples[i];
      double model = s.metal ? coef(0) : coef(1);
      for (int k = 0; k < kShared; ++k) model += coef(k + 2) * s.t[k];
      residual[i] = s.value - model;
      spread[s.metal ? 1 : 0].push_back(static_cast<float>(std::abs(residual[i])));
    }
    for (int c = 0; c < 2; ++c) {
      auto& v = spread[c];
      std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
      limit[c] = std::max(3 * 1.4826 * static_cast<double>(v[v.size() / 2]), 0.02);
    }
  }
  fit.ratio = std::exp(coef(0) - coef(1));
  const double mid = (std::exp(coef(0)) + std::exp(coef(1))) / 2;
  // The lighting is smooth: evaluated on a grid 4 times coarser, then
  // interpolated.
  constexpr int kCoarse = 4;
  cv::Mat coarse((small.rows + kCoarse - 1) / kCoarse + 1, (small.cols + kCoarse - 1) / kCoarse + 1, CV_32F);
  for (int y = 0; y < coarse.rows; ++y) {
    auto* t = coarse.ptr<float>(y);
    double terms[kShared];
    for (int x = 0; x < coarse.cols; ++x) {
      light_terms((x * kCoarse - cx) * scale, (y * kCoarse - cy) * scale, terms);
      double p = 0;
      for (int k = 0; k < kShared; ++k) p += coef(k + 2) * terms[k];
      t[x] = static_cast<float>(mid * std::exp(p));
    }
  }
  cv::Mat grown;
  cv::resize(coarse, grown, cv::Size(coarse.cols * kCoarse, coarse.rows * kCoarse), 0, 0, cv::INTER_LINEAR);
  // resize maps pixel centres: coarse x sits at kCoarse x + (kCoarse - 1) / 2 in `grown`.
  const int shift = (kCoarse - 1) / 2;
  fit.threshold = grown(cv::Rect(shift, shift, small.cols, small.rows)).clone();
  fit.ok = true;
  return fit;
}

}  // namespace

double PlateView::threshold_at(double x, double y) const {
  if (threshold_map.empty()) return threshold;
  const int sx = std::clamp(static_cast<int>(x / threshold_scale), 0, threshold_map.cols - 1);
  const int sy = std::clamp(static_cast<int>(y / threshold_scale), 0, threshold_map.rows - 1);
  return threshold_map.at<float>(sy, sx);
}

cv::Point2d PlateView::to_image(double u_px, double v_px) const {
  const double c = std::cos(angle_rad), s = std::sin(angle_rad);
  return {centre.x + u_px * c - v_px * s, centre.y + u_px * s + v_px * c};
}

cv::Point2d PlateView::to_plate(cv::Point2d p) const {
  const double c = std::cos(angle_rad), s = std::sin(angle_rad);
  const cv::Point2d d = p - centre;
  return {d.x * c + d.y * s, -d.x * s + d.y * c};
}

/// Grey levels by which the plate must outshine the background.
constexpr double kMinPlateContrast = 30.0;

PlateView find_plate(const cv::Mat& grey, double min_hole_diameter_px) {
  PlateView view;
  if (grey.empty() || grey.type() != CV_8U) return view;

  // Otsu's threshold on a reduced copy: the histogram is all it needs.
  cv::Mat small;
  const int factor = std::min(grey.cols, grey.rows) >= 256 ? 4 : 1;
  if (factor > 1) {
    cv::resize(grey, small, cv::Size(grey.cols / factor, grey.rows / factor), 0, 0, cv::INTER_AREA);
  } else {
    small = grey;
  }
  cv::Mat above;
  view.threshold = cv::threshold(small, above, 0, 255, cv::THRESH_BINARY | cv::THRESH_OTSU);
  // A plate is much brighter than what surrounds it; a frame without that
  // contrast (an empty belt, a covered lens) has no plate.
  const double bright = cv::mean(small, above)[0], dark = cv::mean(small, above == 0)[0];
  if (cv::countNonZero(above) == 0 || cv::countNonZero(above) == static_cast<int>(small.total()) ||
      bright - dark < kMinPlateContrast) {
    return view;
  }

  // The lighting, fitted to the metal and the belt as split so far, gives
  // each pixel its own threshold; twice, each split from the last fit.
  // First from both sides of the strongest edges; then again from every
  // pixel near those edges (within 12 px of the reduced copy), split by the
  // first fit, which the edges place right even where a bright corner of
  // belt outshines a dim corner of metal. Away from the edges the fit only
  // interpolates (the plate's inside lies between its edges and its holes').
  cv::Mat small_f;
  small.convertTo(small_f, CV_32F);
  // Glints (saturated spots) and their halos are no measure of the lighting:
  // left out to 2.5 x min_hole_diameter_px (10 mm for the default 4 mm).
  cv::Mat glare;
  {
    cv::Mat saturated;
    cv::compare(grey, 250, saturated, cv::CMP_GE);
    if (factor > 1) cv::resize(saturated, saturated, small.size(), 0, 0, cv::INTER_AREA);
    glare = saturated > 0;
    const int reach = std::max(2, static_cast<int>(std::lround(2.5 * min_hole_diameter_px / factor)));
    if (cv::countNonZero(glare) > 0) {
      cv::dilate(glare, glare, cv::getStructuringElement(cv::MORPH_ELLIPSE, cv::Size(2 * reach + 1, 2 * reach + 1)));
    }
  }
  cv::Mat edges;
  LightFit fit = fit_light(small, samples_across_edges(small, glare, &edges));
  if (fit.ok) {
    cv::compare(small_f, fit.threshold, above, cv::CMP_GT);
    cv::Mat near, metal, belt;
    cv::dilate(edges, near, cv::Mat(), cv::Point(-1, -1), 12);
    cv::erode(above, metal, cv::Mat(), cv::Point(-1, -1), 2);
    cv::erode(above == 0, belt, cv::Mat(), cv::Point(-1, -1), 2);
    near.setTo(0, glare);
    const LightFit local = fit_light(small, samples_in(small, metal & near, belt & near));
    if (local.ok) {
      fit = local;
      cv::compare(small_f, fit.threshold, above, cv::CMP_GT);
    }
  } else {
    // No clear edges: the split by Otsu's threshold, refined once.
    cv::Mat metal, belt;
    cv::erode(above, metal, cv::Mat(), cv::Point(-1, -1), 2);
    cv::erode(above == 0, belt, cv::Mat(), cv::Point(-1, -1), 2);
    fit = fit_light(small, samples_in(small, metal, belt));
    if (fit.ok) cv::compare(small_f, fit.threshold, above, cv::CMP_GT);
  }
  cv::Mat binary;
  if (fit.ok) {
    view.threshold_map = fit.threshold;
    view.threshold_scale = factor;
    view.contrast_ratio = fit.ratio;
    view.threshold = cv::mean(fit.threshold, above)[0];
    cv::Mat level;
    fit.threshold.convertTo(level, CV_8U);
    if (factor > 1) cv::resize(level, level, grey.size(), 0, 0, cv::INTER_LINEAR);
    cv::compare(grey, level, binary, cv::CMP_GT);
  } else {
    cv::threshold(grey, binary, view.threshold, 255, cv::THRESH_BINARY);
    view.contrast_ratio = dark > 0 ? bright / dark : 0;
  }
  std::vector<std::vector<cv::Point>> contours;
  std::vector<cv::Vec4i> hierarchy;
  cv::findContours(binary, contours, hierarchy, cv::RETR_CCOMP, cv::CHAIN_APPROX_SIMPLE);
  int plate = -1;
  double plate_area = 0.05 * grey.total();
  for (std::size_t i = 0; i < contours.size(); ++i) {
    if (hierarchy[i][3] >= 0) continue;
    const double area = cv::contourArea(contours[i]);
    if (area > plate_area) {
      plate_area = area;
      plate = static_cast<int>(i);
    }
  }
  if (plate < 0 || plate_area > 0.9 * static_cast<double>(grey.total())) return view;
  const auto& outline = contours[static_cast<std::size_t>(plate)];
  const cv::RotatedRect rect = cv::minAreaRect(outline);
  double angle = rect.angle;
  view.width_px = rect.size.width;
  view.height_px = rect.size.height;
  if (view.width_px < view.height_px) {
    std::swap(view.width_px, view.height_px);
    angle += 90;
  }
  while (angle > 90) angle -= 180;
  while (angle <= -90) angle += 180;
  view.angle_rad = angle * kPi / 180.0;
  view.centre = rect.center;
  view.bounds = cv::boundingRect(outline);
  view.found = true;
  if (!view.threshold_map.empty()) {
    const cv::Rect box = cv::Rect(view.bounds.x / factor, view.bounds.y / factor, view.bounds.width / factor + 1,
                                  view.bounds.height / factor + 1) &
                         cv::Rect(0, 0, view.threshold_map.cols, view.threshold_map.rows);
    double lo = 0, hi = 0;
    if (box.area() > 0) cv::minMaxLoc(view.threshold_map(box), &lo, &hi);
    view.light_evenness = hi > 0 ? lo / hi : 1;
  }
  if (view.contrast_ratio < kMinContrastRatio) {
    char reason[160];
    std::snprintf(reason, sizeof reason,
                  "belt too close to the metal: reflectance ratio %.2f, below %.2f", view.contrast_ratio,
                  kMinContrastRatio);
    view.cannot_inspect = reason;
  }

  const double min_area = kPi * std::pow(min_hole_diameter_px / 2, 2);
  for (int child = hierarchy[static_cast<std::size_t>(plate)][2]; child >= 0;
       child = hierarchy[static_cast<std::size_t>(child)][0]) {
    const auto& c = contours[static_cast<std::size_t>(child)];
    const double area = cv::contourArea(c);
    if (area < min_area) continue;
    // Round: judged on the convex hull, whose outline noise does not make
    // ragged where a dim corner leaves the hole little contrast; and solid,
    // so that a crescent or a notch does not pass for a hole.
    std::vector<cv::Point> hull;
    cv::convexHull(c, hull);
    const double hull_area = cv::contourArea(hull);
    const double perimeter = cv::arcLength(hull, true);
    if (perimeter <= 0 || hull_area <= 0 || 4 * kPi * hull_area / (perimeter * perimeter) < 0.75 ||
        area < 0.85 * hull_area) {
      continue;
    }
    const cv::Moments m = cv::moments(c);
    view.holes.push_back(HoleBlob{{m.m10 / m.m00, m.m01 / m.m00}, std::sqrt(area / kPi)});
  }
  return view;
}

PlateGauge gauge_plate(const cv::Mat& grey, const PlateView& view) {
  PlateGauge gauge;
  if (!view.found || grey.type() != CV_8U) return gauge;
  constexpr double kReach = 6.0;  ///< px each side of the expected edge
  constexpr double kMinContrast = 10.0;  // grey levels between metal and belt across an edge
  const int n = static_cast<int>(2 * kReach / kStep) + 1;
  const double c = std::cos(view.angle_rad), s = std::sin(view.angle_rad);
  const cv::Point2d ex(c, s), ey(-s, c);

  // -- outer edges --------------------------------------------------------------
  // Sides as (offset of the side along its normal, normal, direction along it, half length).
  struct Side {
    cv::Point2d normal, along;
    double offset, half;
  };
  const std::array<Side, 4> sides = {
      Side{ex, ey, view.width_px / 2, view.height_px / 2}, Side{-ex, ey, view.width_px / 2, view.height_px / 2},
      Side{ey, ex, view.height_px / 2, view.width_px / 2}, Side{-ey, ex, view.height_px / 2, view.width_px / 2}};
  std::array<Line, 4> lines;
  double rms_sum = 0;
  for (std::size_t k = 0; k < sides.size(); ++k) {
    const Side& side = sides[k];
    std::vector<cv::Point2f> pts;
    const double span = 0.76 * side.half;
    for (double t = -span; t <= span; t += 1.0) {
      const cv::Point2d on = view.centre + side.normal * side.offset + side.along * t;
      const cv::Point2d from = on - side.normal * kReach;
      const auto x = crossing(grey, from, side.normal, n, kReach, kMinContrast);
      if (!x) continue;
      const cv::Point2d p = from + side.normal * *x;
      pts.emplace_back(static_cast<float>(p.x), static_cast<float>(p.y));
    }
    const auto line = fit_line(std::move(pts));
    if (!line) return gauge;
    lines[k] = *line;
    rms_sum += line->rms;
  }
  gauge.width_px = (distance(lines[0], lines[1].point) + distance(lines[1], lines[0].point)) / 2;
  gauge.height_px = (distance(lines[2], lines[3].point) + distance(lines[3], lines[2].point)) / 2;
  gauge.edge_rms_px = rms_sum / 4;
  gauge.ok = true;

  // -- holes -------------------------------------------------------------------------
  for (const auto& blob : view.holes) {
    PlateGauge::Hole hole;
    Circle circle{blob.centre, blob.radius_px, 0};
    for (int pass = 0; pass < 2; ++pass) {
      const int rays = std::clamp(static_cast<int>(2 * kPi * circle.radius), 48, 720);
      std::vector<cv::Point2d> pts;
      for (int i = 0; i < rays; ++i) {
        const double a = 2 * kPi * i / rays;
        const cv::Point2d dir(std::cos(a), std::sin(a));
        const double start = std::max(1.0, circle.radius - kReach);
        const cv::Point2d from = circle.centre + dir * start;
        const auto x = crossing(grey, from, dir, n, circle.radius - start, kMinContrast);
        if (!x) continue;
        pts.push_back(from + dir * *x);
      }
      const auto fitted = fit_circle(std::move(pts));
      if (!fitted) break;
      circle = *fitted;
      hole.ok = pass == 1;
    }
    if (hole.ok) {
      hole.centre = circle.centre;
      hole.diameter_px = 2 * circle.radius;
      hole.rms_px = circle.rms;
    }
    gauge.holes.push_back(hole);
  }
  return gauge;
}

}  // namespace swarmflow::inspection
