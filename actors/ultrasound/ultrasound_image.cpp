#include "ultrasound/ultrasound_image.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace swarmflow::ultrasound {

namespace {

constexpr double kPi = 3.14159265358979323846;

int odd(double v) {
  const int n = std::max(1, static_cast<int>(std::lround(v)));
  return n | 1;
}

cv::Mat disc(int diameter) {
  return cv::getStructuringElement(cv::MORPH_ELLIPSE, cv::Size(odd(diameter), odd(diameter)));
}

/// Mean of `image` over the pixels of `mask`, box-filtered: a local
/// background that leaves out what the mask leaves out.
void masked_mean(const cv::Mat& image, const cv::Mat& mask, int window, cv::Mat& out) {
  cv::Mat m, im, num, den;
  mask.convertTo(m, CV_32F, 1.0 / 255.0);
  cv::multiply(image, m, im);
  cv::boxFilter(im, num, CV_32F, cv::Size(window, window), cv::Point(-1, -1), true, cv::BORDER_REFLECT);
  cv::boxFilter(m, den, CV_32F, cv::Size(window, window), cv::Point(-1, -1), true, cv::BORDER_REFLECT);
  cv::max(den, 1e-3, den);
  cv::divide(num, den, out);
}

double mean_over(const cv::Mat& image, const cv::Mat& mask) {
  if (cv::countNonZero(mask) == 0) return std::nan("");
  return cv::mean(image, mask)[0];
}

void fill_holes(cv::Mat& mask) {
  std::vector<std::vector<cv::Point>> contours;
  cv::findContours(mask.clone(), contours, cv::RETR_EXTERNAL, cv::CHAIN_APPROX_SIMPLE);
  mask.setTo(0);
  cv::drawContours(mask, contours, -1, cv::Scalar(255), cv::FILLED);
}

}  // namespace

// -- enhance -------------------------------------------------------------------

Enhancer::Enhancer(EnhanceParams params) : params_(params) {
  if (params_.clahe_clip > 0) clahe_ = cv::createCLAHE(params_.clahe_clip, cv::Size(params_.clahe_tiles, params_.clahe_tiles));
}

void Enhancer::apply(const cv::Mat& grey, cv::Mat& out) {
  cv::resize(grey, half_, cv::Size(grey.cols / 2, grey.rows / 2), 0, 0, cv::INTER_AREA);
  cv::medianBlur(half_, median_, 5);
  median_.convertTo(f_, CV_32F);
  // Self-guided filter (He et al.): q = a I + b, a = var / (var + eps).
  const int r = std::max(1, static_cast<int>(std::lround(params_.guided_radius_mm / (2 * params_.mm_per_px))));
  const cv::Size win(2 * r + 1, 2 * r + 1);
  cv::boxFilter(f_, mean_i_, CV_32F, win, cv::Point(-1, -1), true, cv::BORDER_REFLECT);
  cv::boxFilter(f_.mul(f_), mean_ii_, CV_32F, win, cv::Point(-1, -1), true, cv::BORDER_REFLECT);
  cv::Mat var = mean_ii_ - mean_i_.mul(mean_i_);
  cv::Mat denom = var + params_.guided_eps;
  cv::divide(var, denom, a_);
  b_ = mean_i_ - a_.mul(mean_i_);
  cv::boxFilter(a_, a_, CV_32F, win, cv::Point(-1, -1), true, cv::BORDER_REFLECT);
  cv::boxFilter(b_, b_, CV_32F, win, cv::Point(-1, -1), true, cv::BORDER_REFLECT);
  q_ = a_.mul(f_) + b_;
  cv::Mat q8;
  q_.convertTo(q8, CV_8U);
  cv::Mat full;
  cv::resize(q8, full, grey.size(), 0, 0, cv::INTER_LINEAR);
  // Into `out` in place when it has the size already (a view of a payload).
  out.create(grey.size(), CV_8U);
  if (clahe_) {
    clahe_->apply(full, out);
  } else {
    full.copyTo(out);
  }
}

// -- geometry ------------------------------------------------------------------

void feret_diameters(const std::vector<cv::Point2f>& polygon, double* longest, double* across) {
  std::vector<cv::Point2f> hull;
  if (polygon.size() >= 3) {
    cv::convexHull(polygon, hull);
  } else {
    hull = polygon;
  }
  double best = 0;
  cv::Point2f pa, pb;
  for (std::size_t i = 0; i < hull.size(); ++i) {
    for (std::size_t j = i + 1; j < hull.size(); ++j) {
      const double d = std::hypot(hull[i].x - hull[j].x, hull[i].y - hull[j].y);
      if (d > best) {
        best = d;
        pa = hull[i];
        pb = hull[j];
      }
    }
  }
  double lo = 0, hi = 0;
  if (best > 0) {
    const double nx = -(pb.y - pa.y) / best, ny = (pb.x - pa.x) / best;
    lo = 1e300;
    hi = -1e300;
    for (const auto& p : hull) {
      const double t = (p.x - pa.x) * nx + (p.y - pa.y) * ny;
      lo = std::min(lo, t);
      hi = std::max(hi, t);
    }
  }
  *longest = best;
  *across = hi - lo;
}

double dice(const std::vector<cv::Point2f>& a, const std::vector<cv::Point2f>& b, int width, int height) {
  if (a.size() < 3 || b.size() < 3) return 0;
  const cv::Rect ra = cv::boundingRect(a), rb = cv::boundingRect(b);
  cv::Rect box = (ra | rb) & cv::Rect(0, 0, width, height);
  box.x = std::max(0, box.x - 1);
  box.y = std::max(0, box.y - 1);
  box.width = std::min(width - box.x, box.width + 2);
  box.height = std::min(height - box.y, box.height + 2);
  if (box.width <= 0 || box.height <= 0) return 0;
  auto raster = [&](const std::vector<cv::Point2f>& poly) {
    cv::Mat m(box.size(), CV_8U, cv::Scalar(0));
    std::vector<cv::Point> p;
    for (const auto& q : poly) {
      p.emplace_back(static_cast<int>(std::lround((q.x - box.x) * 16)), static_cast<int>(std::lround((q.y - box.y) * 16)));
    }
    std::vector<std::vector<cv::Point>> ps{p};
    cv::fillPoly(m, ps, cv::Scalar(255), cv::LINE_8, 4);
    return m;
  };
  const cv::Mat ma = raster(a), mb = raster(b);
  cv::Mat both;
  cv::bitwise_and(ma, mb, both);
  const double na = cv::countNonZero(ma), nb = cv::countNonZero(mb), nab = cv::countNonZero(both);
  return na + nb > 0 ? 2 * nab / (na + nb) : 0;
}

// -- segment -------------------------------------------------------------------

namespace {

struct Candidate {
  std::vector<cv::Point> contour;  ///< half resolution
  bool dark = true;
  cv::Rect box;
};

/// Elongated regions across the field: vessels, not lesions.
bool is_tube(const std::vector<cv::Point>& contour, int width) {
  const cv::RotatedRect rr = cv::minAreaRect(contour);
  const double lo = std::min(rr.size.width, rr.size.height), hi = std::max(rr.size.width, rr.size.height);
  const cv::Rect box = cv::boundingRect(contour);
  const bool crosses = box.width >= 0.6 * width;
  return crosses || (lo > 0 && hi / lo > 4.0);
}

}  // namespace

std::vector<LesionFinding> find_lesions(const cv::Mat& raw, const cv::Mat& enhanced, const SegmentParams& p) {
  const double mm2 = 2 * p.mm_per_px;  // mm per half-resolution pixel
  cv::Mat e8, e;
  cv::resize(enhanced, e8, cv::Size(enhanced.cols / 2, enhanced.rows / 2), 0, 0, cv::INTER_AREA);
  e8.convertTo(e, CV_32F);
  cv::GaussianBlur(e, e, cv::Size(0, 0), 0.4 / mm2);
  // Candidates are looked for in the raw frame's echo level in dB, smoothed
  // until speckle leaves no blotch of a lesion's size.
  cv::Mat r8, ed;
  cv::resize(raw, r8, e.size(), 0, 0, cv::INTER_AREA);
  r8.convertTo(ed, CV_32F, p.dynamic_range_db / 255.0);
  cv::GaussianBlur(ed, ed, cv::Size(0, 0), p.detect_mm / mm2);
  const int hw = e.cols, hh = e.rows;
  const cv::Rect whole(0, 0, hw, hh);
  cv::Mat valid(hh, hw, CV_8U, cv::Scalar(255));
  const int top = std::min(hh, static_cast<int>(std::ceil(p.top_mm / mm2)));
  valid.rowRange(0, top).setTo(0);

  // Local background, twice: the second time without what stood out and
  // without the vessels.
  const int window = odd(p.background_mm / mm2);
  const cv::Mat k = disc(static_cast<int>(std::lround(0.8 / mm2)));
  const double min_area = kPi * 0.25 * p.min_size_mm * p.min_size_mm / (mm2 * mm2);
  cv::Mat bg, resid;
  masked_mean(ed, valid, window, bg);
  resid = ed - bg;
  cv::Mat tubes(hh, hw, CV_8U, cv::Scalar(0));
  {
    cv::Mat m = (resid < -p.threshold_db) & valid;
    cv::morphologyEx(m, m, cv::MORPH_OPEN, k);
    std::vector<std::vector<cv::Point>> contours;
    cv::findContours(m, contours, cv::RETR_EXTERNAL, cv::CHAIN_APPROX_NONE);
    for (const auto& c : contours) {
      if (cv::contourArea(c) >= min_area && is_tube(c, hw)) {
        cv::drawContours(tubes, std::vector<std::vector<cv::Point>>{c}, -1, cv::Scalar(255), cv::FILLED);
      }
    }
    cv::dilate(tubes, tubes, disc(static_cast<int>(std::lround(1.5 / mm2))));
  }
  // Vessels as the flow stage finds them, whole: a cyst's posterior
  // enhancement can cut a vessel into pieces too short to look like one.
  {
    FlowParams fp;
    fp.mm_per_px = p.mm_per_px;
    for (const VesselFinding& v : find_vessels(raw, fp)) {
      const double c = std::cos(v.angle_rad), sn = std::sin(v.angle_rad), reach = 2.0 * hw;
      const cv::Point a(static_cast<int>(std::lround((v.axis_point.x - reach * c) / 2)),
                        static_cast<int>(std::lround((v.axis_point.y - reach * sn) / 2)));
      const cv::Point b(static_cast<int>(std::lround((v.axis_point.x + reach * c) / 2)),
                        static_cast<int>(std::lround((v.axis_point.y + reach * sn) / 2)));
      const int thickness = static_cast<int>(std::lround(2 * (v.radius_px * p.mm_per_px + 1.0) / mm2));
      cv::line(tubes, a, b, cv::Scalar(255), std::max(1, thickness));
    }
  }
  cv::Mat quiet = (cv::abs(resid) < p.threshold_db * 0.5) & valid & ~tubes;
  masked_mean(ed, quiet, window, bg);
  resid = ed - bg;

  std::vector<Candidate> cands;
  cv::Mat labels(hh, hw, CV_16U, cv::Scalar(0));  // candidate i + 1 where it lies
  for (int polarity = 0; polarity < 2; ++polarity) {
    const bool dark = polarity == 0;
    cv::Mat m = (dark ? resid < -p.threshold_db : resid > p.threshold_db);
    m &= valid;
    cv::morphologyEx(m, m, cv::MORPH_OPEN, k);
    std::vector<std::vector<cv::Point>> contours;
    cv::findContours(m, contours, cv::RETR_EXTERNAL, cv::CHAIN_APPROX_NONE);
    for (const auto& c : contours) {
      if (cv::contourArea(c) < 0.5 * min_area) continue;
      if (is_tube(c, hw)) {
        if (dark) cv::drawContours(tubes, std::vector<std::vector<cv::Point>>{c}, -1, cv::Scalar(255), cv::FILLED);
        continue;
      }
      // Cut by the field's left, right or bottom edge: not measurable (and,
      // when dark and long, the end of a vessel).
      const cv::Rect b = cv::boundingRect(c);
      if (b.x <= 0 || b.x + b.width >= hw || b.y + b.height >= hh) {
        if (dark) cv::drawContours(tubes, std::vector<std::vector<cv::Point>>{c}, -1, cv::Scalar(255), cv::FILLED);
        continue;
      }
      Candidate cd;
      cd.dark = dark;
      cd.contour = c;
      cd.box = cv::boundingRect(c);
      cands.push_back(std::move(cd));
    }
  }
  // A bright region right under a dark lesion is its posterior enhancement.
  std::vector<Candidate> kept;
  for (const Candidate& c : cands) {
    bool posterior = false;
    if (!c.dark) {
      for (const Candidate& d : cands) {
        if (!d.dark) continue;
        const int overlap = std::min(c.box.x + c.box.width, d.box.x + d.box.width) - std::max(c.box.x, d.box.x);
        if (overlap > 0.4 * std::min(c.box.width, d.box.width) && c.box.y > d.box.y + d.box.height / 2) {
          posterior = true;
        }
      }
    }
    if (!posterior) kept.push_back(c);
  }
  for (std::size_t i = 0; i < kept.size(); ++i) {
    cv::drawContours(labels, std::vector<std::vector<cv::Point>>{kept[i].contour}, -1,
                     cv::Scalar(static_cast<double>(i + 1)), cv::FILLED);
  }
  // Refine each, in a window about it: threshold halfway between its inside
  // and its surroundings, on the less smoothed image.
  struct Refined {
    cv::Mat mask;  ///< half resolution, over `roi`
    cv::Rect roi;
  };
  std::vector<Refined> refined;
  const int grow = static_cast<int>(std::lround(6.0 / mm2));
  for (std::size_t i = 0; i < kept.size(); ++i) {
    const Candidate& c = kept[i];
    cv::Rect roi(c.box.x - grow, c.box.y - grow, c.box.width + 2 * grow, c.box.height + 2 * grow);
    roi &= whole;
    const cv::Mat lab = labels(roi);
    const cv::Mat self = lab == static_cast<double>(i + 1);
    cv::Mat others = (lab != 0) & ~self;
    cv::dilate(others, others, disc(static_cast<int>(std::lround(2.0 / mm2))));
    cv::Mat core;
    cv::erode(self, core, disc(static_cast<int>(std::lround(1.0 / mm2))));
    if (cv::countNonZero(core) < 10) core = self;
    cv::Mat outer1, outer2;
    cv::dilate(self, outer1, disc(static_cast<int>(std::lround(2.0 / mm2))));
    cv::dilate(self, outer2, disc(static_cast<int>(std::lround(5.0 / mm2))));
    cv::Mat ring = outer2 & ~outer1 & ~others & ~tubes(roi) & valid(roi);
    // Leave out what lies under the lesion: its posterior features.
    const int below = std::clamp(c.box.y + c.box.height - roi.y, 0, roi.height);
    ring.rowRange(below, roi.height).setTo(0);
    const cv::Mat er = e(roi);
    const double in = mean_over(er, core), out = mean_over(er, ring);
    if (std::isnan(in) || std::isnan(out)) continue;
    // The PSF blurs echo amplitude, so an edge lies halfway in amplitude;
    // after log compression that is nearer the inside level of a bright
    // lesion. A bright lesion's outline is taken there. A dark lesion's is
    // taken halfway in dB: halfway in amplitude lies so near the tissue's
    // level that the outline would leak into the tissue's dark speckle.
    double t = 0.5 * (in + out);
    if (!c.dark) {
      const double to_db = p.dynamic_range_db / 255.0;
      const double amp_in = std::pow(10.0, (in - out) * to_db / 20.0);
      t = out + 20.0 * std::log10(0.5 * (1.0 + amp_in)) / to_db;
    }
    cv::Mat region = c.dark ? (er < t) : (er > t);
    region &= valid(roi) & ~others & ~tubes(roi);
    cv::morphologyEx(region, region, cv::MORPH_OPEN, disc(3));
    // The piece of it that holds the candidate's core.
    cv::Mat pieces;
    const int n = cv::connectedComponents(region, pieces, 8, CV_32S);
    std::vector<int> votes(static_cast<std::size_t>(n), 0);
    for (int y = 0; y < roi.height; ++y) {
      const auto* l = pieces.ptr<int>(y);
      const auto* m = core.ptr<std::uint8_t>(y);
      for (int x = 0; x < roi.width; ++x) {
        if (m[x] != 0 && l[x] > 0) ++votes[static_cast<std::size_t>(l[x])];
      }
    }
    const int best = static_cast<int>(std::max_element(votes.begin(), votes.end()) - votes.begin());
    if (best == 0 || votes[static_cast<std::size_t>(best)] == 0) continue;
    cv::Mat mask = pieces == best;
    // Speckle blotches that touch the outline are not part of it.
    cv::morphologyEx(mask, mask, cv::MORPH_OPEN, disc(static_cast<int>(std::lround(p.smooth_mm / mm2))));
    cv::morphologyEx(mask, mask, cv::MORPH_CLOSE, disc(5));
    fill_holes(mask);
    if (cv::countNonZero(mask) < min_area) continue;
    // Isoechoic: not told from the tissue's own texture, so not reported.
    const double inside = mean_over(ed(roi), mask), around = mean_over(ed(roi), ring);
    if (!std::isnan(inside) && !std::isnan(around) && std::abs(inside - around) < p.iso_db) continue;
    // A piece that runs into the window's edge is not a lesion of its own.
    std::vector<cv::Point> nz;
    cv::findNonZero(mask, nz);
    const cv::Rect mb = cv::boundingRect(nz);
    const bool clipped = (mb.x == 0 && roi.x > 0) || (mb.y == 0 && roi.y > 0) ||
                         (mb.x + mb.width == roi.width && roi.x + roi.width < hw) ||
                         (mb.y + mb.height == roi.height && roi.y + roi.height < hh);
    if (clipped) continue;
    refined.push_back({mask, roi});
  }

  // Outlines at full resolution, then the description, in dB, from the raw frame.
  const double db_per_grey = p.dynamic_range_db / 255.0;
  const int fw = raw.cols, fh = raw.rows;
  const cv::Rect frame(0, 0, fw, fh);
  cv::Mat tubes_full;
  cv::resize(tubes, tubes_full, raw.size(), 0, 0, cv::INTER_NEAREST);
  cv::Mat lesion_labels(fh, fw, CV_16U, cv::Scalar(0));
  std::vector<LesionFinding> found;
  for (const Refined& r : refined) {
    cv::Mat mf, up;
    r.mask.convertTo(mf, CV_32F, 1.0 / 255.0);
    cv::resize(mf, up, cv::Size(2 * r.roi.width, 2 * r.roi.height), 0, 0, cv::INTER_LINEAR);
    cv::Mat full = up >= 0.5F;
    std::vector<std::vector<cv::Point>> contours;
    cv::findContours(full, contours, cv::RETR_EXTERNAL, cv::CHAIN_APPROX_NONE, cv::Point(2 * r.roi.x, 2 * r.roi.y));
    if (contours.empty()) continue;
    const auto largest = std::max_element(contours.begin(), contours.end(), [](const auto& a, const auto& b) {
      return cv::contourArea(a) < cv::contourArea(b);
    });
    std::vector<cv::Point> simple;
    cv::approxPolyDP(*largest, simple, 0.5, true);
    LesionFinding f;
    for (const auto& q : simple) f.contour.emplace_back(static_cast<float>(q.x), static_cast<float>(q.y));
    cv::drawContours(lesion_labels, std::vector<std::vector<cv::Point>>{*largest}, -1,
                     cv::Scalar(static_cast<double>(found.size() + 1)), cv::FILLED);
    found.push_back(std::move(f));
  }
  const double mm = p.mm_per_px;
  const int margin = static_cast<int>(std::lround(8.0 / mm));
  for (std::size_t i = 0; i < found.size(); ++i) {
    LesionFinding& f = found[i];
    const cv::Rect box = cv::boundingRect(f.contour) & frame;
    const cv::Rect roi = cv::Rect(box.x - margin, box.y - margin, box.width + 2 * margin, box.height + 2 * margin) & frame;
    const cv::Mat lab = lesion_labels(roi);
    const cv::Mat mask = lab == static_cast<double>(i + 1);
    const cv::Mat others = ((lab != 0) & ~mask) | tubes_full(roi);
    cv::Mat raw_f;
    raw(roi).convertTo(raw_f, CV_32F);
    const cv::Moments mo = cv::moments(mask, true);
    if (mo.m00 <= 0) continue;
    f.centre = cv::Point2f(static_cast<float>(mo.m10 / mo.m00 + roi.x), static_cast<float>(mo.m01 / mo.m00 + roi.y));
    f.depth_mm = f.centre.y * mm;
    double longest = 0, across = 0;
    feret_diameters(f.contour, &longest, &across);
    // The outline runs through the centres of the boundary pixels: add one.
    f.size_mm = (longest + 1) * mm;
    f.width_mm = (across + 1) * mm;
    f.area_mm2 = mo.m00 * mm * mm;

    cv::Mat inside;
    cv::erode(mask, inside, disc(static_cast<int>(std::lround(std::min(1.0, 0.15 * f.width_mm) / mm))));
    if (cv::countNonZero(inside) < 20) inside = mask;
    cv::Mat o1, o2;
    cv::dilate(mask, o1, disc(static_cast<int>(std::lround(1.5 / mm))));
    cv::dilate(mask, o2, disc(static_cast<int>(std::lround(4.0 / mm))));
    cv::Mat ring = o2 & ~o1 & ~others;
    const int top_full = static_cast<int>(std::ceil(p.top_mm / mm));
    ring.rowRange(0, std::clamp(top_full - roi.y, 0, roi.height)).setTo(0);
    ring.rowRange(std::clamp(box.y + box.height - roi.y, 0, roi.height), roi.height).setTo(0);
    const double in = mean_over(raw_f, inside), out = mean_over(raw_f, ring);
    f.contrast_db = (std::isnan(in) || std::isnan(out)) ? 0 : (in - out) * db_per_grey;
    if (f.contrast_db < p.anechoic_db) {
      f.echogenicity = "anechoic";
    } else if (f.contrast_db < -p.iso_db) {
      f.echogenicity = "hypoechoic";
    } else if (f.contrast_db > p.iso_db) {
      f.echogenicity = "hyperechoic";
    } else {
      f.echogenicity = "isoechoic";
    }
    // Posterior features: the echo under the lesion's middle against the
    // same depths beside it.
    const int y0 = box.y + box.height + static_cast<int>(std::lround(1.0 / mm));
    const int y1 = std::min(fh, box.y + box.height + static_cast<int>(std::lround(6.0 / mm)));
    f.posterior = "none";
    if (y1 - y0 > 5) {
      const int cx = box.x + box.width / 2, half = std::max(2, static_cast<int>(0.3 * box.width));
      const int gap = static_cast<int>(std::lround(2.0 / mm)), side = static_cast<int>(std::lround(4.0 / mm));
      const cv::Rect area(box.x - gap - side, y0, box.width + 2 * (gap + side), y1 - y0);
      const cv::Rect a = area & frame;
      cv::Mat grey_a;
      raw(a).convertTo(grey_a, CV_32F);
      cv::Mat below(a.size(), CV_8U, cv::Scalar(0)), beside(a.size(), CV_8U, cv::Scalar(0));
      const cv::Rect local(0, 0, a.width, a.height);
      below(cv::Rect(cx - half - a.x, 0, 2 * half, a.height) & local).setTo(255);
      beside(cv::Rect(box.x - gap - side - a.x, 0, side, a.height) & local).setTo(255);
      beside(cv::Rect(box.x + box.width + gap - a.x, 0, side, a.height) & local).setTo(255);
      const cv::Mat excluded = (lesion_labels(a) != 0) | tubes_full(a);
      below &= ~excluded;
      beside &= ~excluded;
      const double b = mean_over(grey_a, below), s = mean_over(grey_a, beside);
      if (!std::isnan(b) && !std::isnan(s)) {
        f.posterior_db = (b - s) * db_per_grey;
        if (f.posterior_db > p.posterior_db) f.posterior = "enhancement";
        if (f.posterior_db < -p.posterior_db) f.posterior = "shadowing";
      }
    }
    // Shape and margin from the outline.
    std::vector<cv::Point2f> hull;
    cv::convexHull(f.contour, hull);
    const double hull_area = cv::contourArea(hull);
    const double solidity = hull_area > 0 ? cv::contourArea(f.contour) / hull_area : 1;
    f.margin = solidity < p.irregular_solidity ? "irregular" : "circumscribed";
    const double aspect = f.size_mm > 0 ? f.width_mm / f.size_mm : 1;
    f.shape = f.margin == "irregular" ? "irregular" : (aspect >= 0.85 ? "round" : "oval");
  }
  // Nearer the tissue's echo than min_contrast_db: not told from the
  // tissue's own texture, so not reported. And a bright outline under a
  // dark lesion, in its columns, is that lesion's posterior enhancement
  // (however its candidate got there).
  auto posterior_of_dark = [&](const LesionFinding& f) {
    if (f.contrast_db <= 0) return false;
    const cv::Rect b = cv::boundingRect(f.contour);
    for (const LesionFinding& d : found) {
      if (d.contrast_db >= -p.min_contrast_db) continue;
      const cv::Rect db = cv::boundingRect(d.contour);
      const int overlap = std::min(b.x + b.width, db.x + db.width) - std::max(b.x, db.x);
      if (overlap > 0.4 * std::min(b.width, db.width) && b.y > db.y + db.height / 2) return true;
    }
    return false;
  };
  std::vector<LesionFinding> reported;
  for (const LesionFinding& f : found) {
    if (std::abs(f.contrast_db) >= p.min_contrast_db && !posterior_of_dark(f)) reported.push_back(f);
  }
  found = std::move(reported);
  std::sort(found.begin(), found.end(), [](const LesionFinding& a, const LesionFinding& b) { return a.centre.x < b.centre.x; });
  return found;
}

// -- flow ----------------------------------------------------------------------

namespace {

/// The frame resampled along a vessel: column u, row w (w = 0 on the axis).
struct Strip {
  cv::Mat image;  ///< CV_32F, rows 2 half + 1
  int half = 0;
};

/// The range of u (along the axis from `axis_point`) where every row of a
/// strip of `half` rows either side stays inside the frame.
bool strip_range(const VesselFinding& v, int half, int width, int height, double* u0, double* u1) {
  const double c = std::cos(v.angle_rad), s = std::sin(v.angle_rad);
  double lo = -1e9, hi = 1e9;
  const double hx = std::abs(half * s), hy = std::abs(half * c);
  // x = ax + u c - w s within [1, width - 2]
  if (c > 1e-6) {
    lo = std::max(lo, (1 + hx - v.axis_point.x) / c);
    hi = std::min(hi, (width - 2 - hx - v.axis_point.x) / c);
  }
  if (std::abs(s) > 1e-6) {
    const double a = (1 + hy - v.axis_point.y) / s, b = (height - 2 - hy - v.axis_point.y) / s;
    lo = std::max(lo, std::min(a, b));
    hi = std::min(hi, std::max(a, b));
  } else if (v.axis_point.y - hy < 1 || v.axis_point.y + hy > height - 2) {
    return false;
  }
  *u0 = lo;
  *u1 = hi;
  return hi - lo > 64;
}

Strip resample(const cv::Mat& grey, const VesselFinding& v, int half, double u0, int length) {
  const double c = std::cos(v.angle_rad), s = std::sin(v.angle_rad);
  // strip (ui, wi) -> frame: p = a + (u0 + ui) d + (wi - half) n, d = (c, s), n = (-s, c)
  const cv::Matx23d m(c, -s, v.axis_point.x + u0 * c + half * s, s, c, v.axis_point.y + u0 * s - half * c);
  Strip out;
  out.half = half;
  cv::Mat f;
  grey.convertTo(f, CV_32F);
  cv::warpAffine(f, out.image, m, cv::Size(length, 2 * half + 1), cv::INTER_LINEAR | cv::WARP_INVERSE_MAP,
                 cv::BORDER_REPLICATE);
  return out;
}

/// Displacement along u of band `w` (3 rows) from `prev` to `cur`, px, with
/// the peak correlation; false when it has no clear peak.
bool band_shift(const Strip& prev, const Strip& cur, int w, int lag, double* shift, double* peak) {
  const int r = w + prev.half;
  if (r - 1 < 0 || r + 2 > prev.image.rows) return false;
  const cv::Mat pb = prev.image.rowRange(r - 1, r + 2);
  const cv::Mat cb = cur.image.rowRange(r - 1, r + 2).colRange(lag, cur.image.cols - lag);
  cv::Mat score;
  cv::matchTemplate(pb, cb, score, cv::TM_CCOEFF_NORMED);
  double mx = 0;
  cv::Point at;
  cv::minMaxLoc(score, nullptr, &mx, nullptr, &at);
  const int q = at.x;
  double delta = 0;
  if (q > 0 && q + 1 < score.cols) {
    const double a = score.at<float>(0, q - 1), b = score.at<float>(0, q), d = score.at<float>(0, q + 1);
    const double den = a - 2 * b + d;
    if (den < 0) delta = 0.5 * (a - d) / den;
  } else {
    return false;
  }
  *shift = lag - (q + delta);
  *peak = mx;
  return true;
}

}  // namespace

std::vector<VesselFinding> find_vessels(const cv::Mat& raw, const FlowParams& p) {
  const double mm4 = 4 * p.mm_per_px;
  cv::Mat q8, q;
  cv::resize(raw, q8, cv::Size(raw.cols / 4, raw.rows / 4), 0, 0, cv::INTER_AREA);
  q8.convertTo(q, CV_32F);
  // Smoothed more along the field than down it: vessels in a long-axis view
  // run across the field, within about 15 degrees.
  cv::GaussianBlur(q, q, cv::Size(0, 0), 1.6 / mm4, 0.5 / mm4);
  cv::Mat bg;
  cv::blur(q, bg, cv::Size(odd(16 / mm4), odd(16 / mm4)), cv::Point(-1, -1), cv::BORDER_REFLECT);
  cv::Mat m = (q - bg) < -p.threshold;
  cv::morphologyEx(m, m, cv::MORPH_OPEN, disc(3));
  std::vector<std::vector<cv::Point>> contours;
  cv::findContours(m, contours, cv::RETR_EXTERNAL, cv::CHAIN_APPROX_NONE);
  // Long dark pieces; pieces on one line are one vessel (a lesion's
  // posterior enhancement can cut a vessel in two).
  struct Piece {
    std::vector<cv::Point2f> points;  ///< full resolution
    cv::Vec4f line;
    double thickness = 0;  ///< px, full resolution
    bool used = false;
  };
  std::vector<Piece> pieces;
  for (const auto& c : contours) {
    const cv::RotatedRect rr = cv::minAreaRect(c);
    const double lo = std::min(rr.size.width, rr.size.height), hi = std::max(rr.size.width, rr.size.height);
    if (lo <= 0 || hi / lo < 3 || hi < 0.15 * q.cols) continue;
    Piece pc;
    for (const auto& pt : c) pc.points.emplace_back(static_cast<float>(pt.x * 4 + 1.5), static_cast<float>(pt.y * 4 + 1.5));
    cv::fitLine(pc.points, pc.line, cv::DIST_L2, 0, 0.01, 0.01);
    pc.thickness = cv::contourArea(c) / hi * 4;
    pieces.push_back(std::move(pc));
  }
  std::sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) { return a.points.size() > b.points.size(); });
  std::vector<VesselFinding> out;
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    if (pieces[i].used) continue;
    std::vector<cv::Point2f> pts = pieces[i].points;
    const cv::Vec4f& li = pieces[i].line;
    for (std::size_t j = i + 1; j < pieces.size(); ++j) {
      if (pieces[j].used) continue;
      const cv::Vec4f& lj = pieces[j].line;
      const double dist = std::abs((lj[2] - li[2]) * -li[1] + (lj[3] - li[3]) * li[0]);
      const double cross = std::abs(li[0] * lj[1] - li[1] * lj[0]);
      if (dist < 0.5 * pieces[i].thickness + 2.0 / p.mm_per_px && cross < std::sin(8 * kPi / 180)) {
        pieces[j].used = true;
        pts.insert(pts.end(), pieces[j].points.begin(), pieces[j].points.end());
      }
    }
    float xmin = 1e9F, xmax = -1e9F;
    for (const auto& pt : pts) {
      xmin = std::min(xmin, pt.x);
      xmax = std::max(xmax, pt.x);
    }
    if (xmax - xmin < p.min_length * raw.cols) continue;
    cv::Vec4f line;
    cv::fitLine(pts, line, cv::DIST_L2, 0, 0.01, 0.01);
    double dx = line[0], dy = line[1];
    if (dx < 0) {
      dx = -dx;
      dy = -dy;
    }
    VesselFinding v;
    v.angle_rad = std::atan2(dy, dx);
    // The axis point at the middle column.
    const double xm = raw.cols / 2.0;
    v.axis_point = cv::Point2f(static_cast<float>(xm), static_cast<float>(line[3] + (xm - line[2]) * dy / dx));
    v.radius_px = 0.5 * pieces[i].thickness;
    // Refine the axis and radius from the mean profile across the tube.
    const int half = static_cast<int>(std::lround(v.radius_px + 5.0 / p.mm_per_px));
    double u0 = 0, u1 = 0;
    if (strip_range(v, half, raw.cols, raw.rows, &u0, &u1)) {
      const Strip s = resample(raw, v, half, u0, static_cast<int>(u1 - u0));
      cv::Mat prof;
      cv::reduce(s.image, prof, 1, cv::REDUCE_AVG);
      const auto at = [&](int w) { return static_cast<double>(prof.at<float>(w + half, 0)); };
      double lumen = 0;
      int nl = 0;
      for (int w = -static_cast<int>(0.4 * v.radius_px); w <= static_cast<int>(0.4 * v.radius_px); ++w, ++nl) lumen += at(w);
      lumen /= std::max(1, nl);
      double tissue = 0;
      int nt = 0;
      for (int w = static_cast<int>(v.radius_px + 2 / p.mm_per_px); w <= half; ++w, nt += 2) tissue += at(w) + at(-w);
      tissue /= std::max(1, nt);
      const double mid = 0.5 * (lumen + tissue);
      double edge[2] = {0, 0};
      bool ok = true;
      for (int side = 0; side < 2; ++side) {
        const int sgn = side == 0 ? 1 : -1;
        int w = 0;
        while (std::abs(w) < half && at(w) < mid) w += sgn;
        if (std::abs(w) >= half) {
          ok = false;
          break;
        }
        const double a = at(w - sgn), b = at(w);
        edge[side] = (w - sgn) + sgn * (mid - a) / std::max(1e-6, b - a);
      }
      if (ok) {
        const double centre = 0.5 * (edge[0] + edge[1]);
        v.radius_px = 0.5 * (edge[0] - edge[1]);
        v.axis_point.x += static_cast<float>(-centre * std::sin(v.angle_rad));
        v.axis_point.y += static_cast<float>(centre * std::cos(v.angle_rad));
      }
    }
    out.push_back(v);
  }
  return out;
}

bool track_flow(const cv::Mat& previous, const cv::Mat& current, VesselFinding& v, const FlowParams& p) {
  v.tracked = false;
  const int lag = static_cast<int>(std::ceil(p.max_velocity_mm_s / p.fps / p.mm_per_px)) + 2;
  const int half = static_cast<int>(std::lround(v.radius_px + 4.5 / p.mm_per_px));
  double u0 = 0, u1 = 0;
  if (!strip_range(v, half, current.cols, current.rows, &u0, &u1)) return false;
  const int length = static_cast<int>(u1 - u0);
  if (length < 4 * lag + 32) return false;
  const Strip a = resample(previous, v, half, u0, length);
  const Strip b = resample(current, v, half, u0, length);
  // The tissue beside the vessel: how far the probe moved it along the axis.
  std::vector<double> tissue;
  const int t0 = static_cast<int>(std::lround(v.radius_px + 1.5 / p.mm_per_px));
  for (int w = t0; w <= half - 2; w += 3) {
    for (int sgn : {-1, 1}) {
      double d = 0, pk = 0;
      if (band_shift(a, b, sgn * w, lag, &d, &pk) && pk > 0.5) tissue.push_back(d);
    }
  }
  if (tissue.size() < 2) return false;
  std::nth_element(tissue.begin(), tissue.begin() + static_cast<std::ptrdiff_t>(tissue.size() / 2), tissue.end());
  const double tissue_shift = tissue[tissue.size() / 2];
  // The blood, band by band across the lumen; a parabola through them.
  const int wmax = static_cast<int>(0.7 * v.radius_px);
  double s[5] = {0, 0, 0, 0, 0}, t[3] = {0, 0, 0};  // weighted sums of w^k and v w^k
  int bands = 0;
  double quality = 0;
  for (int w = -wmax; w <= wmax; w += 2) {
    double d = 0, pk = 0;
    if (!band_shift(a, b, w, lag, &d, &pk) || pk < 0.3) continue;
    const double vel = (d - tissue_shift) * p.mm_per_px * p.fps;
    const double x = w / v.radius_px, wt = pk;
    double xk = 1;
    for (int k = 0; k < 5; ++k, xk *= x) s[k] += wt * xk;
    t[0] += wt * vel;
    t[1] += wt * vel * x;
    t[2] += wt * vel * x * x;
    quality += pk;
    ++bands;
  }
  if (bands < 4) return false;
  // Normal equations of vel = c0 + c1 x + c2 x^2.
  const cv::Matx33d m(s[0], s[1], s[2], s[1], s[2], s[3], s[2], s[3], s[4]);
  const cv::Vec3d rhs(t[0], t[1], t[2]);
  cv::Vec3d c;
  if (!cv::solve(m, rhs, c, cv::DECOMP_SVD)) return false;
  double peak = c[0];
  if (std::abs(c[2]) > 1e-9) {
    const double x = std::clamp(-c[1] / (2 * c[2]), -0.5, 0.5);
    peak = c[0] + c[1] * x + c[2] * x * x;
  }
  v.direction = peak >= 0 ? 1 : -1;
  v.velocity_mm_s = std::abs(peak);
  v.mean_velocity_mm_s = 0.5 * v.velocity_mm_s;  // a parabolic (Poiseuille) profile
  v.quality = quality / bands;
  v.tracked = true;
  return true;
}

}  // namespace swarmflow::ultrasound
