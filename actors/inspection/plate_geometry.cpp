#include "inspection/plate_geometry.hpp"

#include <algorithm>
#include <array>
#include <cmath>
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

}  // namespace

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

  cv::Mat binary;
  cv::threshold(grey, binary, view.threshold, 255, cv::THRESH_BINARY);
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

  const double min_area = kPi * std::pow(min_hole_diameter_px / 2, 2);
  for (int child = hierarchy[static_cast<std::size_t>(plate)][2]; child >= 0;
       child = hierarchy[static_cast<std::size_t>(child)][0]) {
    const auto& c = contours[static_cast<std::size_t>(child)];
    const double area = cv::contourArea(c);
    if (area < min_area) continue;
    const double perimeter = cv::arcLength(c, true);
    if (perimeter <= 0 || 4 * kPi * area / (perimeter * perimeter) < 0.75) continue;
    const cv::Moments m = cv::moments(c);
    view.holes.push_back(HoleBlob{{m.m10 / m.m00, m.m01 / m.m00}, std::sqrt(area / kPi)});
  }
  return view;
}

PlateGauge gauge_plate(const cv::Mat& grey, const PlateView& view) {
  PlateGauge gauge;
  if (!view.found || grey.type() != CV_8U) return gauge;
  constexpr double kReach = 6.0;  ///< px each side of the expected edge
  constexpr double kMinContrast = 20.0;
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
