#include "inspection/defect_finder.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>

#include <opencv2/imgproc.hpp>

#include "inspection/part_drawings.hpp"

namespace swarmflow::inspection {

namespace {

/// The shape of one connected region of the defect masks.
struct Region {
  std::vector<cv::Point> pixels;  ///< in the frame
  std::vector<float> values;      ///< |residual| of each pixel, noise sigmas
  float peak = 0;                 ///< largest |residual| in the region, noise sigmas
  double mean = 0;                ///< mean |residual| in the region, noise sigmas
  bool dark = true;
  bool strong = true;  ///< reaches the high threshold (weak pieces only extend strong strokes)
  // measured by measure()
  double length = 0, extent = 0, thickness = 0, elongation = 0, jaggedness = 0, coherence = 0, forks = 0;
  bool two_tone = false;  ///< dark and bright parts of one mark, merged
  cv::Point2d centre, axis;
  cv::Rect box;
  /// The two ends of the centre line and the direction in which the stroke
  /// leaves through each (outwards, fitted over its last 1.5 mm): where a
  /// curved stroke would go on.
  cv::Point2d end[2], tangent[2];
};

/// The part of `r` at least half as strong as its peak: for a pit, its
/// body without the faint fringe that noise adds at the low threshold.
Region core_of(const Region& r) {
  Region core;
  for (std::size_t i = 0; i < r.pixels.size(); ++i) {
    if (r.values[i] >= 0.5F * r.peak) {
      core.pixels.push_back(r.pixels[i]);
      core.values.push_back(r.values[i]);
    }
  }
  core.peak = r.peak;
  core.dark = r.dark;
  return core;
}

/// Measures `r`: principal axis, then the centre line, bin by bin along that
/// axis (bins of 0.3 mm), which curves as the stroke does. From it:
///  - length: the arc length of the centre line smoothed over 2 mm (a curved
///    scratch is as long as its curve, not its chord);
///  - thickness = area / length, elongation = length / thickness;
///  - jaggedness: RMS of the centre line about its own 2 mm moving average,
///    so a smooth arc or S-bend scores as low as a straight line while a
///    zig-zag of ~1 mm strokes does not;
///  - forks: how far (px along the axis) the region runs as two or more
///    strands side by side (a branch).
void measure(Region& r, double px_per_mm) {
  const auto n = static_cast<double>(r.pixels.size());
  cv::Point2d m(0, 0);
  for (const auto& p : r.pixels) m += cv::Point2d(p);
  m *= 1.0 / n;
  double sxx = 0, syy = 0, sxy = 0;
  for (const auto& p : r.pixels) {
    const double dx = p.x - m.x, dy = p.y - m.y;
    sxx += dx * dx;
    syy += dy * dy;
    sxy += dx * dy;
  }
  const double theta = 0.5 * std::atan2(2 * sxy, sxx - syy);
  const cv::Point2d e1(std::cos(theta), std::sin(theta)), e2(-e1.y, e1.x);
  double lo = 1e18, hi = -1e18;
  for (const auto& p : r.pixels) {
    const double a = (cv::Point2d(p) - m).dot(e1);
    lo = std::min(lo, a);
    hi = std::max(hi, a);
  }
  r.centre = m;
  r.axis = e1;
  r.extent = hi - lo + 1;
  r.box = cv::boundingRect(r.pixels);

  const double bin = std::max(2.0, 0.3 * px_per_mm);
  const int bins = std::clamp(static_cast<int>(std::ceil(r.extent / bin)), 1, 512);
  std::vector<std::vector<float>> across(static_cast<std::size_t>(bins));
  for (const auto& p : r.pixels) {
    const cv::Point2d d = cv::Point2d(p) - m;
    const auto b = static_cast<std::size_t>(std::clamp(static_cast<int>((d.dot(e1) - lo) / bin), 0, bins - 1));
    across[b].push_back(static_cast<float>(d.dot(e2)));
  }
  std::vector<cv::Point2d> line;  // (along, across) of each bin that has pixels
  const double fork_gap = std::max(3.0, 0.4 * px_per_mm);
  int forked = 0;
  for (int b = 0; b < bins; ++b) {
    auto& v = across[static_cast<std::size_t>(b)];
    if (v.empty()) continue;
    double sum = 0;
    for (float x : v) sum += x;
    line.emplace_back(lo + (b + 0.5) * bin, sum / static_cast<double>(v.size()));
    std::sort(v.begin(), v.end());
    for (std::size_t i = 1; i < v.size(); ++i) {
      if (v[i] - v[i - 1] > fork_gap) {
        ++forked;
        break;
      }
    }
  }
  r.forks = forked * bin;
  if (line.size() < 3) {
    r.jaggedness = 0;
    r.length = r.extent;
  } else {
    const double half = std::max(1.0, px_per_mm);  // +-1 mm
    std::vector<double> smooth(line.size(), 0.0);
    double ss = 0;
    for (std::size_t i = 0; i < line.size(); ++i) {
      // Symmetric about i, so the ends are not pulled to one side.
      const double reach = std::min({half, line[i].x - line.front().x, line.back().x - line[i].x});
      double sum = 0;
      int count = 0;
      for (std::size_t j = 0; j < line.size(); ++j) {
        if (std::abs(line[j].x - line[i].x) <= reach + 1e-9) {
          sum += line[j].y;
          ++count;
        }
      }
      smooth[i] = sum / count;
      ss += (line[i].y - smooth[i]) * (line[i].y - smooth[i]);
    }
    r.jaggedness = std::sqrt(ss / static_cast<double>(line.size()));
    double length = bin;
    for (std::size_t i = 1; i < line.size(); ++i) {
      length += std::hypot(line[i].x - line[i - 1].x, smooth[i] - smooth[i - 1]);
    }
    r.length = std::max(length, r.extent);
  }
  // The ends and the way out through each: a line fitted to the last 1.5 mm
  // of the centre line (or all of it, on a short piece).
  const double reach = std::max(6.0, 1.5 * px_per_mm);
  for (int k = 0; k < 2; ++k) {
    const cv::Point2d last = k == 0 ? line.front() : line.back();
    double sa = 0, sc = 0, saa = 0, sac = 0, cnt = 0;
    for (const auto& q : line) {
      if (std::abs(q.x - last.x) > reach) continue;
      sa += q.x;
      sc += q.y;
      saa += q.x * q.x;
      sac += q.x * q.y;
      cnt += 1;
    }
    const double var = saa - sa * sa / cnt;
    const double slope = cnt >= 2 && var > 1e-9 ? (sac - sa * sc / cnt) / var : 0.0;
    const double along = k == 0 ? lo : hi;
    const double across = cnt > 0 ? sc / cnt + slope * (along - sa / cnt) : 0.0;
    r.end[k] = m + e1 * along + e2 * across;
    cv::Point2d t = e1 + e2 * slope;
    t *= (k == 0 ? -1.0 : 1.0) / cv::norm(t);
    r.tangent[k] = t;
  }
  r.thickness = n / r.length;
  r.elongation = r.length / r.thickness;
}

/// Regions of one polarity: connected pieces of `candidates` (CV_8U, where
/// |residual| passes the low threshold) that reach `high` somewhere, with
/// pieces closer than `join_px` joined into one region. Pieces that stay
/// below `high` but are stroke-like (at least `min_weak_px` long) are added
/// as weak regions, which bridge_collinear may append to a strong stroke.
std::vector<Region> hysteresis_regions(const cv::Mat& candidates, const cv::Mat& residual, float high, float sigma,
                                       bool dark, cv::Point offset, int join_px, int min_weak_px, double px_per_mm,
                                       std::vector<Region>* weak) {
  // 8-connected components, found as runs of marked pixels row by row and
  // joined where runs of neighbouring rows touch: the marks are sparse (a
  // few thousand runs on a 1080p frame), so this costs a pass over the mask
  // and little else, where labelling every pixel cost several milliseconds.
  struct Run {
    int y, x0, x1;  ///< pixels x0 .. x1 - 1 of row y
  };
  thread_local std::vector<Run> runs;
  thread_local std::vector<std::size_t> run_parent;
  runs.clear();
  std::size_t prev_begin = 0, prev_end = 0;  // the runs of the row above
  auto run_root = [](std::vector<std::size_t>& up, std::size_t i) {
    while (up[i] != i) i = up[i] = up[up[i]];
    return i;
  };
  run_parent.clear();
  for (int y = 0; y < candidates.rows; ++y) {
    const auto* row = candidates.ptr<std::uint8_t>(y);
    const std::size_t begin = runs.size();
    int x = 0;
    const int w = candidates.cols;
    while (x < w) {
      // Skip empty stretches 8 bytes at a time.
      while (x + 8 <= w) {
        std::uint64_t chunk = 0;
        std::memcpy(&chunk, row + x, 8);
        if (chunk != 0) break;
        x += 8;
      }
      while (x < w && row[x] == 0) ++x;
      if (x >= w) break;
      const int x0 = x;
      while (x < w && row[x] != 0) ++x;
      runs.push_back(Run{y, x0, x});
      run_parent.push_back(runs.size() - 1);
    }
    // Join with the runs of the row above that touch, diagonals included.
    std::size_t k = prev_begin;
    for (std::size_t i = begin; i < runs.size(); ++i) {
      while (k < prev_end && runs[k].x1 < runs[i].x0) ++k;
      for (std::size_t j = k; j < prev_end && runs[j].x0 <= runs[i].x1; ++j) {
        const std::size_t a = run_root(run_parent, i), b = run_root(run_parent, j);
        if (a != b) run_parent[std::max(a, b)] = std::min(a, b);
      }
    }
    prev_begin = begin;
    prev_end = runs.size();
  }
  // Each component's runs, in row order.
  thread_local std::vector<std::size_t> order;
  order.resize(runs.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  for (std::size_t i = 0; i < runs.size(); ++i) run_parent[i] = run_root(run_parent, i);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return run_parent[a] < run_parent[b]; });
  std::vector<Region> pieces;
  for (std::size_t first = 0; first < order.size();) {
    std::size_t last = first;
    while (last < order.size() && run_parent[order[last]] == run_parent[order[first]]) ++last;
    int x0 = candidates.cols, y0 = candidates.rows, x1 = -1, y1 = -1;
    float peak = 0;
    for (std::size_t i = first; i < last; ++i) {
      const Run& run = runs[order[i]];
      x0 = std::min(x0, run.x0);
      x1 = std::max(x1, run.x1 - 1);
      y0 = std::min(y0, run.y);
      y1 = std::max(y1, run.y);
      const auto* s = residual.ptr<float>(run.y);
      for (int x = run.x0; x < run.x1; ++x) peak = std::max(peak, std::abs(s[x]));
    }
    const cv::Rect box(x0, y0, x1 - x0 + 1, y1 - y0 + 1);
    const std::size_t component_first = first, component_last = last;
    first = last;
    const bool strong = peak >= high;
    if (!strong && std::max(box.width, box.height) < min_weak_px) continue;
    Region r;
    r.dark = dark;
    r.strong = strong;
    r.box = box + offset;
    for (std::size_t i = component_first; i < component_last; ++i) {
      const Run& run = runs[order[i]];
      const auto* s = residual.ptr<float>(run.y);
      for (int x = run.x0; x < run.x1; ++x) {
        r.pixels.emplace_back(x + offset.x, run.y + offset.y);
        r.values.push_back(std::abs(s[x]) / sigma);
      }
    }
    if (strong) {
      pieces.push_back(std::move(r));
    } else {
      for (float v : r.values) {
        r.peak = std::max(r.peak, v);
        r.mean += v;
      }
      r.mean /= static_cast<double>(r.values.size());
      measure(r, px_per_mm);
      if (r.elongation >= 3.0) weak->push_back(std::move(r));
    }
  }

  // Join pieces closer than join_px (a stroke broken where it is faint):
  // union-find over pairs whose grown boxes meet and whose pixels come close.
  std::vector<std::size_t> parent(pieces.size());
  std::iota(parent.begin(), parent.end(), std::size_t{0});
  auto root = [&](std::size_t i) {
    while (parent[i] != i) i = parent[i] = parent[parent[i]];
    return i;
  };
  const int join2 = join_px * join_px;
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    const cv::Rect grown(pieces[i].box.x - join_px, pieces[i].box.y - join_px, pieces[i].box.width + 2 * join_px,
                         pieces[i].box.height + 2 * join_px);
    for (std::size_t j = i + 1; j < pieces.size(); ++j) {
      if ((grown & pieces[j].box).area() == 0 || root(i) == root(j)) continue;
      bool near = false;
      const cv::Rect reach(pieces[j].box.x - join_px, pieces[j].box.y - join_px, pieces[j].box.width + 2 * join_px,
                           pieces[j].box.height + 2 * join_px);
      for (const auto& a : pieces[i].pixels) {
        if (!reach.contains(a)) continue;
        for (const auto& b : pieces[j].pixels) {
          const cv::Point d = a - b;
          if (d.x * d.x + d.y * d.y <= join2) {
            near = true;
            break;
          }
        }
        if (near) break;
      }
      if (near) parent[root(i)] = root(j);
    }
  }
  std::vector<Region> regions;
  std::vector<int> slot(pieces.size(), -1);
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    const std::size_t r = root(i);
    if (slot[r] < 0) {
      slot[r] = static_cast<int>(regions.size());
      regions.emplace_back();
      regions.back().dark = dark;
    }
    Region& region = regions[static_cast<std::size_t>(slot[r])];
    region.pixels.insert(region.pixels.end(), pieces[i].pixels.begin(), pieces[i].pixels.end());
    region.values.insert(region.values.end(), pieces[i].values.begin(), pieces[i].values.end());
  }
  for (auto& r : regions) {
    for (float v : r.values) {
      r.peak = std::max(r.peak, v);
      r.mean += v;
    }
    r.mean /= static_cast<double>(std::max<std::size_t>(1, r.values.size()));
  }
  return regions;
}

/// Joins strokes that continue one another across a gap of up to `gap_px`
/// (a faint scratch breaks into pieces where the noise dips): same
/// polarity, at least one of them strong, and the ends that face each other
/// agree on the way the stroke goes on: each end's outward direction within
/// 20 degrees of the other's reversed and of the gap itself, and each end
/// within 2 px + 15 % of the gap of the line the other leaves along. Judged
/// at the facing ends alone, so a curved stroke broken on its bend is joined
/// as a straight one is. Regions are measured again after a join; weak
/// regions left on their own are dropped.
void bridge_collinear(std::vector<Region>& regions, double gap_px, double px_per_mm, std::vector<Region>* faint) {
  constexpr double kMinPiece = 6.0;    ///< px; shorter pieces have no reliable direction
  constexpr double kCosAngle = 0.94;   ///< cos 20 degrees
  auto stroke = [](const Region& r) { return r.pixels.size() >= 3 && r.extent >= kMinPiece && r.elongation >= 3.0; };
  auto off_line = [](cv::Point2d p, cv::Point2d from, cv::Point2d dir) {
    const cv::Point2d d = p - from;
    return std::abs(d.x * dir.y - d.y * dir.x);
  };
  bool joined = true;
  while (joined) {
    joined = false;
    for (std::size_t i = 0; i < regions.size() && !joined; ++i) {
      Region& a = regions[i];
      if (!stroke(a)) continue;
      for (std::size_t j = i + 1; j < regions.size() && !joined; ++j) {
        Region& b = regions[j];
        if (b.dark != a.dark || !stroke(b) || (!a.strong && !b.strong)) continue;
        const cv::Rect reach(a.box.x - static_cast<int>(gap_px), a.box.y - static_cast<int>(gap_px),
                             a.box.width + 2 * static_cast<int>(gap_px), a.box.height + 2 * static_cast<int>(gap_px));
        if ((reach & b.box).area() == 0) continue;
        bool fits = false;
        for (int ka = 0; ka < 2 && !fits; ++ka) {
          for (int kb = 0; kb < 2 && !fits; ++kb) {
            const cv::Point2d pa = a.end[ka], pb = b.end[kb], ta = a.tangent[ka], tb = b.tangent[kb];
            const cv::Point2d d = pb - pa;
            const double gap = cv::norm(d);
            if (gap > gap_px || -ta.dot(tb) < kCosAngle) continue;
            // Facing: each end looks towards the other (no overlap along
            // the stroke beyond a pixel or two).
            if (ta.dot(d) < -2.0 || tb.dot(-d) < -2.0) continue;
            if (gap > 4.0 && (ta.dot(d) < kCosAngle * gap || tb.dot(-d) < kCosAngle * gap)) continue;
            const double slack = 2.0 + 0.15 * gap;
            fits = off_line(pb, pa, ta) <= slack && off_line(pa, pb, tb) <= slack;
          }
        }
        if (!fits) continue;
        a.pixels.insert(a.pixels.end(), b.pixels.begin(), b.pixels.end());
        a.values.insert(a.values.end(), b.values.begin(), b.values.end());
        a.peak = std::max(a.peak, b.peak);
        a.strong = a.strong || b.strong;
        a.mean = 0;
        for (float v : a.values) a.mean += v;
        a.mean /= static_cast<double>(a.values.size());
        measure(a, px_per_mm);
        regions.erase(regions.begin() + static_cast<std::ptrdiff_t>(j));
        joined = true;
      }
    }
  }
  const auto weak = std::stable_partition(regions.begin(), regions.end(), [](const Region& r) { return r.strong; });
  faint->insert(faint->end(), std::make_move_iterator(weak), std::make_move_iterator(regions.end()));
  regions.erase(weak, regions.end());
}

/// Whether some pixel of `a` lies within `reach` px of some pixel of `b`.
bool within(const Region& a, const Region& b, int reach) {
  const cv::Rect grown(a.box.x - reach, a.box.y - reach, a.box.width + 2 * reach, a.box.height + 2 * reach);
  if ((grown & b.box).area() == 0) return false;
  const cv::Rect near_a(b.box.x - reach, b.box.y - reach, b.box.width + 2 * reach, b.box.height + 2 * reach);
  const int reach2 = reach * reach;
  for (const auto& pa : a.pixels) {
    if (!near_a.contains(pa)) continue;
    for (const auto& pb : b.pixels) {
      const cv::Point d = pa - pb;
      if (d.x * d.x + d.y * d.y <= reach2) return true;
    }
  }
  return false;
}

/// How much the grey-level gradients over a region agree in orientation
/// (1 = all along one direction, as across a straight stroke; 0 = every
/// direction, as along a zig-zag or in noise): the anisotropy of the
/// structure tensor, summed over stretches of `chunk_px` along the region's
/// axis and averaged by their pixels, so that a stroke that bends gently
/// keeps a high score (each stretch of it is nearly straight) while a
/// zig-zag of shorter strokes does not.
double orientation_coherence(const cv::Mat& g, cv::Point g_origin, const Region& r, double chunk_px) {
  const cv::Rect area =
      cv::Rect(r.box.x - g_origin.x - 2, r.box.y - g_origin.y - 2, r.box.width + 4, r.box.height + 4) &
      cv::Rect(0, 0, g.cols, g.rows);
  if (area.width < 3 || area.height < 3) return 0;
  cv::Mat gx, gy;
  cv::Sobel(g(area), gx, CV_32F, 1, 0, 3);
  cv::Sobel(g(area), gy, CV_32F, 0, 1, 3);
  const int chunks = std::clamp(static_cast<int>(std::ceil(r.extent / chunk_px)), 1, 64);
  std::vector<cv::Vec4d> j(static_cast<std::size_t>(chunks), cv::Vec4d(0, 0, 0, 0));  // jxx, jyy, jxy, count
  const double lo = -r.extent / 2;
  for (const auto& p : r.pixels) {
    const int x = p.x - g_origin.x - area.x, y = p.y - g_origin.y - area.y;
    if (x < 0 || y < 0 || x >= area.width || y >= area.height) continue;
    const double dx = gx.at<float>(y, x), dy = gy.at<float>(y, x);
    const double along = (cv::Point2d(p) - r.centre).dot(r.axis);
    auto& c = j[static_cast<std::size_t>(std::clamp(static_cast<int>((along - lo) / chunk_px), 0, chunks - 1))];
    c[0] += dx * dx;
    c[1] += dy * dy;
    c[2] += dx * dy;
    c[3] += 1;
  }
  double sum = 0, weight = 0;
  for (const auto& c : j) {
    const double t = c[0] + c[1];
    if (t <= 0 || c[3] < 3) continue;
    sum += c[3] * std::sqrt((c[0] - c[1]) * (c[0] - c[1]) + 4 * c[2] * c[2]) / t;
    weight += c[3];
  }
  return weight > 0 ? sum / weight : 0;
}

/// Joins dark and bright stroke-like regions that lie side by side along
/// one line: the two walls of one scratch under side light, one lit and one
/// shaded. They are joined when most of the shorter one (60 % of its
/// pixels) lies within `reach_px` of the other and their axes agree within
/// 20 degrees. The joined region keeps both walls' pixels and is marked
/// two-toned.
void merge_polarities(std::vector<Region>& regions, int reach_px, double px_per_mm) {
  constexpr double kCosAngle = 0.94;  ///< cos 20 degrees
  auto stroke = [](const Region& r) { return r.pixels.size() >= 6 && r.elongation >= 3.0 && r.extent >= 6; };
  bool joined = true;
  while (joined) {
    joined = false;
    for (std::size_t i = 0; i < regions.size() && !joined; ++i) {
      Region& a = regions[i];
      if (!stroke(a)) continue;
      for (std::size_t j = 0; j < regions.size() && !joined; ++j) {
        Region& b = regions[j];
        if (j == i || !stroke(b) || a.dark == b.dark || (a.two_tone && b.two_tone)) continue;
        if (std::abs(a.axis.dot(b.axis)) < kCosAngle) continue;
        const cv::Rect grown(a.box.x - reach_px, a.box.y - reach_px, a.box.width + 2 * reach_px,
                             a.box.height + 2 * reach_px);
        if ((grown & b.box).area() == 0) continue;
        // The shorter one against the other, grown by reach_px.
        const Region& shorter = a.pixels.size() <= b.pixels.size() ? a : b;
        const Region& longer = a.pixels.size() <= b.pixels.size() ? b : a;
        const cv::Rect frame = (longer.box | shorter.box) + cv::Size(2 * reach_px + 2, 2 * reach_px + 2) -
                               cv::Point(reach_px + 1, reach_px + 1);
        cv::Mat near = cv::Mat::zeros(frame.size(), CV_8U);
        for (const auto& q : longer.pixels) near.at<std::uint8_t>(q.y - frame.y, q.x - frame.x) = 255;
        cv::dilate(near, near, cv::getStructuringElement(cv::MORPH_ELLIPSE, cv::Size(2 * reach_px + 1, 2 * reach_px + 1)));
        std::size_t close = 0;
        for (const auto& q : shorter.pixels) close += near.at<std::uint8_t>(q.y - frame.y, q.x - frame.x) != 0 ? 1 : 0;
        if (static_cast<double>(close) < 0.6 * static_cast<double>(shorter.pixels.size())) continue;
        Region& keep = a.dark ? a : b;  // the merged mark counts as dark (a groove)
        Region& gone = a.dark ? b : a;
        // Strands side by side are what a two-toned mark is: its forks are
        // those of its dark wall alone.
        const double forks = keep.forks;
        keep.pixels.insert(keep.pixels.end(), gone.pixels.begin(), gone.pixels.end());
        keep.values.insert(keep.values.end(), gone.values.begin(), gone.values.end());
        keep.peak = std::max(keep.peak, gone.peak);
        keep.strong = keep.strong || gone.strong;
        keep.two_tone = true;
        keep.mean = 0;
        for (float v : keep.values) keep.mean += v;
        keep.mean /= static_cast<double>(keep.values.size());
        measure(keep, px_per_mm);
        keep.forks = forks;
        const std::size_t drop = &gone == &regions[i] ? i : j;
        regions.erase(regions.begin() + static_cast<std::ptrdiff_t>(drop));
        joined = true;
      }
    }
  }
}

/// A faint stroke followed along its own direction: where a scratch is too
/// faint for its pixels to pass the thresholds one by one, its evidence is
/// gathered along it instead (a matched line filter that steers itself).
struct StrokeTrace {
  std::vector<cv::Point2d> centre;  ///< the samples of its centre line, in the residual's coordinates, in order
  double ridge = 0;                 ///< mean ridge contrast over the samples, noise sigmas
  double percent = 0;               ///< mean ridge contrast over the samples, percent of the local level
  double span = 0;                  ///< length of the centre line, px
};

/// Follows strokes in `z` (residual in local noise sigmas) over `surface`
/// (CV_8U, non-zero where inspected); `sigma` gives the local noise in
/// percent. A segment's ridge contrast is the mean of its samples less the
/// mean of two parallel lines `side_px` to either side, signed so that a mark
/// of the polarity asked for is positive, and no more than the segment's own
/// mean (so a blotch of the texture, dark across its whole width, scores
/// little, and neither does the light strip between two dark strokes).
class StrokeTracer {
 public:
  StrokeTracer(const cv::Mat& z, const cv::Mat& surface, const cv::Mat& sigma, double step_px, double side_px)
      : z_(z), surface_(surface), sigma_(sigma), step_(static_cast<int>(std::lround(step_px))), side_(side_px) {}

  /// The ridge contrast of `len` samples from `from` along `d` (unit), in
  /// sigmas, and in percent in `percent`; NaN where a sample leaves the surface.
  double ridge(cv::Point2d from, cv::Point2d d, int len, double sign, double* percent = nullptr) const {
    const cv::Point2d n(-d.y * side_, d.x * side_);
    double sum = 0, sum_pct = 0, own = 0;
    for (int k = 0; k < len; ++k) {
      const cv::Point2d c = from + d * static_cast<double>(k);
      const int x = static_cast<int>(std::lround(c.x)), y = static_cast<int>(std::lround(c.y));
      if (x < 0 || y < 0 || x >= z_.cols || y >= z_.rows || surface_.at<std::uint8_t>(y, x) == 0) {
        return std::numeric_limits<double>::quiet_NaN();
      }
      const double centre = z_.at<float>(y, x);
      // Both sides must lie on the surface: along the plate's edge band, a
      // hole's ring or a glint, the shading of the edge cannot be told from
      // a mark, and a stroke is not followed there.
      const double sides = 0.5 * (at(c + n) + at(c - n));
      if (std::isnan(sides)) return sides;
      const double r = sign * (centre - sides);
      sum += r;
      own += sign * centre;
      sum_pct += r * sigma_.at<float>(y, x);
    }
    if (percent != nullptr) *percent = sum_pct / len;
    return std::min(sum, own) / len;
  }

  /// The spread of the ridge contrast of segments of `step` samples along
  /// `d` over the surface in `area` (on a grid, away from the samples in
  /// `avoid`): what texture and noise alone give along that direction,
  /// there. Returns the robust sigma (1.4826 MAD about the median), 0 when
  /// too few segments fit, and the median in `median`.
  double null_spread(cv::Rect area, cv::Point2d d, double sign, const std::vector<cv::Point2d>& avoid,
                     double* median) const {
    thread_local std::vector<double> v;
    v.clear();
    area &= cv::Rect(0, 0, z_.cols, z_.rows);
    // About a thousand segments, on a grid of at least 3 px.
    const int grid = std::max(3, static_cast<int>(std::sqrt(static_cast<double>(area.area()) / 1000.0)));
    const double keep_off = 2.0 * side_;
    for (int y = area.y; y < area.y + area.height; y += grid) {
      for (int x = area.x; x < area.x + area.width; x += grid) {
        const cv::Point2d c(x, y);
        bool near = false;
        for (std::size_t k = 0; k < avoid.size() && !near; k += 2) {
          near = std::abs(avoid[k].x - c.x) + std::abs(avoid[k].y - c.y) < keep_off + step_;
        }
        if (near) continue;
        const double r = ridge(c - d * (step_ / 2.0), d, step_, sign);
        if (!std::isnan(r)) v.push_back(r);
      }
    }
    *median = 0;
    if (v.size() < 50) return 0;
    const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
    std::nth_element(v.begin(), mid, v.end());
    *median = *mid;
    for (auto& x : v) x = std::abs(x - *median);
    std::nth_element(v.begin(), mid, v.end());
    return 1.4826 * *mid;
  }

  /// The best direction through `p` (a segment of 2 `step` + 1 samples
  /// centred on it), out of 24; its ridge contrast in `score`.
  cv::Point2d best_direction(cv::Point2d p, double sign, double* score) const {
    cv::Point2d best(1, 0);
    *score = -1e9;
    for (int a = 0; a < 24; ++a) {
      const double t = a * CV_PI / 24;
      const cv::Point2d d(std::cos(t), std::sin(t));
      const double r = ridge(p - d * static_cast<double>(step_), d, 2 * step_ + 1, sign);
      if (r > *score) {
        *score = r;
        best = d;
      }
    }
    return best;
  }

  /// Follows the stroke from `p` along `d` while a segment of `step`
  /// samples, turned by up to 15 degrees and moved by up to a pixel across,
  /// keeps a ridge contrast of `min_ridge`; one segment that falls short is
  /// bridged if the next one holds. Appends the samples to `t`.
  void follow(cv::Point2d p, cv::Point2d d, double sign, double min_ridge, int max_steps, StrokeTrace* t) const {
    int misses = 0;
    for (int s = 0; s < max_steps; ++s) {
      double best = -1e9, best_pct = 0;
      cv::Point2d best_from, best_d;
      for (int a = -3; a <= 3; ++a) {
        const double turn = a * 5.0 * CV_PI / 180;
        const cv::Point2d e(d.x * std::cos(turn) - d.y * std::sin(turn), d.x * std::sin(turn) + d.y * std::cos(turn));
        for (int o = -1; o <= 1; ++o) {
          const cv::Point2d from = p + cv::Point2d(-d.y, d.x) * static_cast<double>(o) + e;
          double pct = 0;
          const double r = ridge(from, e, step_, sign, &pct);
          if (r > best) {  // NaN never wins
            best = r;
            best_pct = pct;
            best_from = from;
            best_d = e;
          }
        }
      }
      if (best < min_ridge) {
        if (++misses > 1 || best < -1e8) break;
        p += d * static_cast<double>(step_);
        continue;
      }
      misses = 0;
      for (int k = 0; k < step_; ++k) t->centre.push_back(best_from + best_d * static_cast<double>(k));
      t->ridge += best * step_;
      t->percent += best_pct * step_;
      p = best_from + best_d * static_cast<double>(step_ - 1);
      d = best_d;
    }
  }

 private:
  /// z at `c`, NaN off the surface.
  double at(cv::Point2d c) const {
    const int x = static_cast<int>(std::lround(c.x)), y = static_cast<int>(std::lround(c.y));
    if (x < 0 || y < 0 || x >= z_.cols || y >= z_.rows || surface_.at<std::uint8_t>(y, x) == 0) {
      return std::numeric_limits<double>::quiet_NaN();
    }
    return z_.at<float>(y, x);
  }
  const cv::Mat& z_;
  const cv::Mat& surface_;
  const cv::Mat& sigma_;
  int step_;
  double side_;
};

/// A specular glint: a compact patch of saturated pixels and the bright
/// halo around it, in the coordinates of the reduced copy.
struct GlintZone {
  cv::Rect box;  ///< of the zone (core, halo and margin), reduced copy
};

constexpr int kReduce = 4;     ///< the background is estimated on a copy reduced this much
// Following faint strokes (see StrokeTracer):
constexpr double kTraceStepMm = 0.8;      ///< a stroke is followed in straight segments this long
constexpr double kTraceSideMm = 0.3;      ///< its ridge contrast is taken against lines this far to either side
constexpr double kTraceStepSigmas = 2.0;  ///< each segment's ridge contrast, local noise sigmas
constexpr double kTraceMaxMm = 60.0;      ///< a stroke is followed this far at most, each way
constexpr double kTraceNullMm = 4.0;      ///< the surface this far around a stroke gives its null
constexpr double kTraceFaint = 1.25;      ///< regions left out are followed when their mean contrast is below this
                                          ///< times min_scratch_sigmas (faint); clearer ones were judged on their shape
constexpr double kTraceIsotropic = 1.2;   ///< texture whose spread along a stroke is up to this times that across is
                                          ///< taken as the same both ways
constexpr int kMinWeakPx = 6;  ///< shortest weak piece kept for bridging

/// The weighted mean of `small` over a `window`, where `weight` (CV_32F,
/// same grid) is 1 for pixels that count and 0 for the rest. Where the window
/// holds too little weight, `fallback` (if given) is used.
cv::Mat masked_mean(const cv::Mat& small, const cv::Mat& weight, int window, const cv::Mat& fallback) {
  cv::Mat sum, total;
  cv::blur(small.mul(weight), sum, cv::Size(window, window));
  cv::blur(weight, total, cv::Size(window, window));
  const cv::Mat thin = total < 0.1F;
  cv::max(total, 1e-3, total);
  cv::divide(sum, total, sum);
  if (!fallback.empty()) fallback.copyTo(sum, thin);
  return sum;
}

/// 1.4826 x the median of |values| over `mask` (every `step`-th pixel), or 0.
float robust_sigma(const cv::Mat& values, const cv::Mat& mask, int step) {
  thread_local std::vector<float> spread;  // reused: no allocation per frame
  spread.clear();
  for (int y = 0; y < values.rows; y += step) {
    const auto* m = mask.ptr<std::uint8_t>(y);
    const auto* r = values.ptr<float>(y);
    for (int x = 0; x < values.cols; x += step) {
      if (m[x] != 0) spread.push_back(std::abs(r[x]));
    }
  }
  if (spread.size() < 50) return 0;
  std::nth_element(spread.begin(), spread.begin() + static_cast<std::ptrdiff_t>(spread.size() / 2), spread.end());
  return std::max(1.4826F * spread[spread.size() / 2], 0.05F);
}

/// The median (the element of rank n / 2) of `values` (>= 0), exactly, in
/// two passes: a histogram finds the bin that holds that rank, then only
/// that bin's values are ordered. On the few hundred thousand samples of a
/// 1080p plate this is several times faster than nth_element over them all.
/// Reorders nothing in `values`.
float median_of(const std::vector<float>& values) {
  constexpr int kBins = 4096;
  const std::size_t rank = values.size() / 2;
  float top = 0;
  for (float v : values) top = std::max(top, v);
  if (top <= 0) return 0;
  const float scale = (kBins - 1) / top;
  thread_local std::vector<std::uint32_t> counts;
  counts.assign(kBins, 0);
  for (float v : values) ++counts[static_cast<std::size_t>(v * scale)];
  std::size_t below = 0;
  int bin = 0;
  while (below + counts[static_cast<std::size_t>(bin)] <= rank) below += counts[static_cast<std::size_t>(bin++)];
  thread_local std::vector<float> in_bin;
  in_bin.clear();
  for (float v : values) {
    if (static_cast<int>(v * scale) == bin) in_bin.push_back(v);
  }
  const auto nth = in_bin.begin() + static_cast<std::ptrdiff_t>(rank - below);
  std::nth_element(in_bin.begin(), nth, in_bin.end());
  return *nth;
}

float score_from(double peak_sigmas, double k_high) {
  return static_cast<float>(std::clamp(0.5 + 0.49 * (1.0 - std::exp(-(peak_sigmas - k_high) / 3.0)), 0.05, 0.99));
}

/// Drawn holes with no hole found near them, where the image shows metal.
void find_missing_holes(const cv::Mat& grey, const PlateView& plate, const DefectFinderParams& p,
                        std::vector<FoundDefect>* out) {
  const double px_per_mm = 1.0 / p.mm_per_px;
  const PartDrawing* drawing =
      nearest_drawing(plate.width_px * p.mm_per_px, plate.height_px * p.mm_per_px, p.drawing_tolerance_mm);
  if (drawing == nullptr) return;
  for (const auto& nominal : drawing->holes) {
    const cv::Point2d c = plate.to_image(nominal.x_mm * px_per_mm, nominal.y_mm * px_per_mm);
    const double r = nominal.diameter_mm / 2 * px_per_mm;
    const bool drilled = std::any_of(plate.holes.begin(), plate.holes.end(), [&](const HoleBlob& h) {
      return std::hypot(h.centre.x - c.x, h.centre.y - c.y) < 0.5 * r;
    });
    if (drilled) continue;
    // What the image shows where the hole should be: metal, or the belt?
    const cv::Rect disc = cv::Rect(static_cast<int>(c.x - 0.6 * r), static_cast<int>(c.y - 0.6 * r),
                                   static_cast<int>(1.2 * r) + 1, static_cast<int>(1.2 * r) + 1) &
                          cv::Rect(0, 0, grey.cols, grey.rows);
    if (disc.area() <= 0) continue;
    int inside = 0, metal = 0;
    const double level = plate.threshold_at(c.x, c.y);
    for (int y = disc.y; y < disc.y + disc.height; ++y) {
      const auto* row = grey.ptr<std::uint8_t>(y);
      for (int x = disc.x; x < disc.x + disc.width; ++x) {
        if (std::hypot(x - c.x, y - c.y) > 0.6 * r) continue;
        ++inside;
        metal += row[x] > level ? 1 : 0;
      }
    }
    const double fill = inside > 0 ? static_cast<double>(metal) / inside : 0.0;
    if (fill < 0.6) continue;
    out->push_back(FoundDefect{"missing_hole",
                               cv::Rect2f(static_cast<float>(c.x - r), static_cast<float>(c.y - r),
                                          static_cast<float>(2 * r), static_cast<float>(2 * r)),
                               static_cast<float>(std::clamp(fill, 0.5, 0.99)), RegionFeatures{}});
  }
}

}  // namespace

namespace {

/// The full-size images of one frame's inspection, kept from frame to frame
/// on each thread: a 1080p frame needs some 20 MB of them, and allocating
/// them afresh costs as much as the arithmetic (the pages are faulted in
/// and handed back every frame).
struct Workspace {
  cv::Mat mask, g, saturated, background, residual, sigma_map, candidates[2];
};

Workspace& workspace() {
  thread_local Workspace w;
  return w;
}

}  // namespace

DefectFinding find_defects(const cv::Mat& grey, const DefectFinderParams& p) {
  DefectFinding out;
  Workspace& ws = workspace();
  const double px_per_mm = 1.0 / p.mm_per_px;
  out.plate = find_plate(grey, 4.0 * px_per_mm);
  if (!out.plate.found) return out;
  if (!out.plate.cannot_inspect.empty()) {
    out.cannot_inspect = out.plate.cannot_inspect;
    return out;
  }
  if (out.plate.light_evenness < p.min_light_evenness) {
    // Where the plate is that dim, faint defects sink into the sensor noise.
    char reason[160];
    std::snprintf(reason, sizeof reason, "lighting too uneven: the dimmest part of the plate gets %.0f %% of the "
                  "light of the brightest (limit %.0f %%)", 100 * out.plate.light_evenness, 100 * p.min_light_evenness);
    out.cannot_inspect = reason;
    return out;
  }
  const PlateView& plate = out.plate;
  cv::Rect roi = plate.bounds & cv::Rect(0, 0, grey.cols, grey.rows);
  // Whole multiples of kReduce make the reduction an exact box average (the
  // few pixels cut lie in the edge band that is not inspected anyway).
  roi.width -= roi.width % kReduce;
  roi.height -= roi.height % kReduce;
  if (roi.width < 4 * kReduce || roi.height < 4 * kReduce) return out;

  // -- the surface to inspect ------------------------------------------------------
  cv::Mat& mask = ws.mask;
  mask.create(roi.size(), CV_8U);
  mask.setTo(0);
  {
    const double margin = p.edge_margin_mm * px_per_mm;
    const double hw = plate.width_px / 2 - margin, hh = plate.height_px / 2 - margin;
    if (hw <= 0 || hh <= 0) return out;
    std::vector<cv::Point> corners;
    for (const auto& [u, v] : {std::pair{-hw, -hh}, std::pair{hw, -hh}, std::pair{hw, hh}, std::pair{-hw, hh}}) {
      const cv::Point2d c = plate.to_image(u, v);
      corners.emplace_back(static_cast<int>(std::lround(c.x)) - roi.x, static_cast<int>(std::lround(c.y)) - roi.y);
    }
    cv::fillConvexPoly(mask, corners, cv::Scalar(255));
    for (const auto& h : plate.holes) {
      cv::circle(mask,
                 cv::Point(static_cast<int>(std::lround(h.centre.x)) - roi.x,
                           static_cast<int>(std::lround(h.centre.y)) - roi.y),
                 static_cast<int>(std::ceil(h.radius_px + p.hole_margin_mm * px_per_mm)), cv::Scalar(0), cv::FILLED);
    }
  }

  // -- illumination normalisation ----------------------------------------------------
  // The background is the masked mean over `background_mm`, estimated on a
  // copy reduced kReduce times. A first pass finds what stands out at that
  // scale (pits, cracks, glints); the second leaves it out, so that a dark
  // defect does not darken the background around it (which would make a
  // bright halo) and a glint does not brighten it (a dark ring).
  cv::Mat& g = ws.g;
  cv::GaussianBlur(grey(roi), g, cv::Size(3, 3), 0.7);
  const cv::Size small_size(roi.width / kReduce, roi.height / kReduce);
  cv::Mat small_g, small_mask, inside;
  cv::resize(g, small_g, small_size, 0, 0, cv::INTER_AREA);
  small_g.convertTo(small_g, CV_32F);
  cv::resize(mask, small_mask, small_size, 0, 0, cv::INTER_AREA);
  inside = small_mask == 255;
  const int inside_area = cv::countNonZero(inside);
  if (inside_area == 0) return out;
  cv::Mat weight;
  inside.convertTo(weight, CV_32F, 1.0 / 255);
  const int window = std::max(3, static_cast<int>(std::lround(p.background_mm * px_per_mm / kReduce)) | 1);
  const cv::Mat first = masked_mean(small_g, weight, window, cv::Mat());
  {
    cv::Mat small_residual;
    cv::divide(small_g - first, cv::max(first, 1.0), small_residual, 100.0);
    const float small_sigma = robust_sigma(small_residual, inside, 1);
    cv::Mat outliers = cv::abs(small_residual) > static_cast<float>(p.k_low) * small_sigma;

    // Specular glints: compact patches of saturated pixels, with the bright
    // halo connected to them and a margin, are left out of the background
    // and of the surface inspected.
    cv::Mat& saturated = ws.saturated;
    cv::compare(grey(roi), p.saturation_level, saturated, cv::CMP_GE);
    if (cv::countNonZero(saturated) > 0) {
      // A glint's core is a round patch at least `min_glint_mm` across; a
      // saturated thin line is a bright scratch, not a glint.
      cv::Mat sat_labels, sat_stats, sat_centres;
      const int patches = cv::connectedComponentsWithStats(saturated, sat_labels, sat_stats, sat_centres, 8, CV_32S);
      const double min_core = std::max(3.0, p.min_glint_mm * px_per_mm);
      for (int c = 1; c < patches; ++c) {
        const int w = sat_stats.at<int>(c, cv::CC_STAT_WIDTH), h = sat_stats.at<int>(c, cv::CC_STAT_HEIGHT);
        const int area = sat_stats.at<int>(c, cv::CC_STAT_AREA);
        const bool round = std::min(w, h) >= min_core && std::max(w, h) <= 2.5 * std::min(w, h) && area >= 0.5 * w * h;
        if (!round) saturated.setTo(0, sat_labels == c);
      }
    }
    cv::Mat small_saturated;  // glint cores on the reduced copy
    if (cv::countNonZero(saturated) > 0) {
      cv::resize(saturated, small_saturated, small_size, 0, 0, cv::INTER_AREA);
      small_saturated = small_saturated > 0;
    } else {
      small_saturated = cv::Mat::zeros(small_size, CV_8U);
    }
    {
      // Hot spots that do not saturate: round patches of the reduced copy
      // brighter by `min_hot_spot` percent or more than the metal around
      // them, taken over three times the background's window (a glint's
      // halo raises the background of its own window and would hide it).
      // No mark is that bright over that much: a bright scratch, however
      // strong, is thin, averages down at this scale, and is long, not round.
      const int wide_window = (3 * window) | 1;
      const cv::Mat wide = masked_mean(small_g, weight, wide_window, first);
      cv::Mat lift;
      cv::divide(small_g - wide, cv::max(wide, 1.0), lift, 100.0);
      const cv::Mat hot = (lift > static_cast<float>(std::max(p.min_hot_spot, p.k_high * small_sigma))) & inside;
      cv::Mat hot_labels, hot_stats, hot_centres;
      const int spots = cv::connectedComponentsWithStats(hot, hot_labels, hot_stats, hot_centres, 8, CV_32S);
      const double min_spot = std::max(2.0, p.min_hot_spot_mm * px_per_mm / kReduce);
      for (int c = 1; c < spots; ++c) {
        const int w = hot_stats.at<int>(c, cv::CC_STAT_WIDTH), h = hot_stats.at<int>(c, cv::CC_STAT_HEIGHT);
        const int area = hot_stats.at<int>(c, cv::CC_STAT_AREA);
        if (std::min(w, h) >= min_spot && std::max(w, h) <= 2 * std::min(w, h) && area >= 0.5 * w * h) {
          small_saturated.setTo(255, hot_labels == c);
        }
      }
    }
    if (cv::countNonZero(small_saturated) > 0) {
      cv::Mat core_labels, core_stats, core_centres;
      const int cores =
          cv::connectedComponentsWithStats(small_saturated, core_labels, core_stats, core_centres, 8, CV_32S);
      cv::Mat bright = (small_residual > static_cast<float>(p.k_low) * small_sigma) | small_saturated;
      cv::Mat halo_labels;
      cv::connectedComponents(bright, halo_labels, 8, CV_32S);
      cv::Mat zones = cv::Mat::zeros(small_size, CV_8U);
      for (int c = 1; c < cores; ++c) {
        const int w = core_stats.at<int>(c, cv::CC_STAT_WIDTH), h = core_stats.at<int>(c, cv::CC_STAT_HEIGHT);
        const int x0 = core_stats.at<int>(c, cv::CC_STAT_LEFT), y0 = core_stats.at<int>(c, cv::CC_STAT_TOP);
        std::vector<int> halos;
        for (int y = y0; y < y0 + h; ++y) {
          for (int x = x0; x < x0 + w; ++x) {
            if (core_labels.at<int>(y, x) != c) continue;
            const int l = halo_labels.at<int>(y, x);
            if (l > 0 && std::find(halos.begin(), halos.end(), l) == halos.end()) halos.push_back(l);
          }
        }
        for (int l : halos) zones.setTo(255, halo_labels == l);
        // The halo reaches further than it stands out of a background that
        // it brightens itself: it ends where the mean of a ring about the
        // core comes down to within 3 % of the level of the metal 12 mm away.
        const cv::Point2d centre(core_centres.at<double>(c, 0), core_centres.at<double>(c, 1));
        const int reach = std::max(4, static_cast<int>(std::lround(12.0 * px_per_mm / kReduce)));
        std::vector<double> ring_sum(static_cast<std::size_t>(reach + 1), 0.0), ring_count(ring_sum.size(), 0.0);
        const cv::Rect around = cv::Rect(static_cast<int>(centre.x) - reach, static_cast<int>(centre.y) - reach,
                                         2 * reach + 1, 2 * reach + 1) &
                                cv::Rect(0, 0, small_size.width, small_size.height);
        for (int y = around.y; y < around.y + around.height; ++y) {
          const auto* gv = small_g.ptr<float>(y);
          const auto* in = small_mask.ptr<std::uint8_t>(y);
          for (int x = around.x; x < around.x + around.width; ++x) {
            const auto ring = static_cast<std::size_t>(std::lround(std::hypot(x - centre.x, y - centre.y)));
            if (ring > static_cast<std::size_t>(reach) || in[x] == 0) continue;
            ring_sum[ring] += gv[x];
            ring_count[ring] += 1;
          }
        }
        double base = 0, base_n = 0;
        for (int k = reach - 2; k <= reach; ++k) {
          base += ring_sum[static_cast<std::size_t>(k)];
          base_n += ring_count[static_cast<std::size_t>(k)];
        }
        int radius = reach;
        if (base_n > 0) {
          base /= base_n;
          for (int k = 1; k <= reach; ++k) {
            const auto i = static_cast<std::size_t>(k);
            if (ring_count[i] > 0 && ring_sum[i] / ring_count[i] <= base * 1.03) {
              radius = k;
              break;
            }
          }
        }
        cv::circle(zones, cv::Point(static_cast<int>(std::lround(centre.x)), static_cast<int>(std::lround(centre.y))),
                   radius, cv::Scalar(255), cv::FILLED);
        ++out.glints;
      }
      if (out.glints > 0) {
        const int margin = std::max(1, static_cast<int>(std::lround(p.glint_margin_mm * px_per_mm / kReduce)));
        cv::dilate(zones, zones,
                   cv::getStructuringElement(cv::MORPH_ELLIPSE, cv::Size(2 * margin + 1, 2 * margin + 1)));
        out.glare_fraction = static_cast<double>(cv::countNonZero(zones & inside)) / inside_area;
        outliers.setTo(255, zones);
        inside.setTo(0, zones);
        cv::Mat zones_full;
        cv::resize(zones, zones_full, roi.size(), 0, 0, cv::INTER_NEAREST);
        mask.setTo(0, zones_full);
      }
    }
    cv::dilate(outliers, outliers, cv::Mat());
    weight.setTo(0, outliers);
  }
  if (out.glare_fraction > p.max_glare_fraction) {
    char reason[160];
    std::snprintf(reason, sizeof reason, "specular glare over %.1f %% of the surface (limit %.1f %%)",
                  100 * out.glare_fraction, 100 * p.max_glare_fraction);
    out.cannot_inspect = reason;
    return out;
  }
  cv::Mat& background = ws.background;
  cv::resize(masked_mean(small_g, weight, window, first), background, roi.size(), 0, 0, cv::INTER_LINEAR);
  // The residual, in percent of the local level, in one pass (only on the
  // surface inspected: nothing else reads it).
  cv::Mat& residual = ws.residual;
  residual.create(roi.size(), CV_32F);
  for (int y = 0; y < roi.height; ++y) {
    const auto* gv = g.ptr<std::uint8_t>(y);
    const auto* bv = background.ptr<float>(y);
    const auto* mv = mask.ptr<std::uint8_t>(y);
    auto* rv = residual.ptr<float>(y);
    for (int x = 0; x < roi.width; ++x) {
      const float b = std::max(bv[x], 1.0F);
      rv[x] = mv[x] != 0 ? (static_cast<float>(gv[x]) - b) * (100.0F / b) : 0.0F;
    }
  }

  // -- the noise level, locally ---------------------------------------------------------
  // A robust sigma per tile of `noise_tile_mm`, between tile centres
  // interpolated: where vignetting or side light dims the plate, the sensor
  // noise is a larger part of the signal, and a single sigma for the whole
  // plate would read it as defects.
  // One pass collects |residual| tile by tile (every other pixel); each
  // tile's median, then the whole plate's, come from the same samples.
  cv::Mat& sigma_map = ws.sigma_map;
  float sigma = 0;
  {
    const int tile = std::max(32, static_cast<int>(std::lround(p.noise_tile_mm * px_per_mm)));
    const int tx = std::max(1, roi.width / tile), ty = std::max(1, roi.height / tile);
    thread_local std::vector<float> samples;
    samples.clear();
    std::vector<float> local(static_cast<std::size_t>(tx * ty), 0.0F);
    for (int j = 0; j < ty; ++j) {
      for (int i = 0; i < tx; ++i) {
        const cv::Rect cell(i * roi.width / tx, j * roi.height / ty, roi.width / tx, roi.height / ty);
        const std::size_t first = samples.size();
        for (int y = cell.y; y < cell.y + cell.height; y += 2) {
          const auto* m = mask.ptr<std::uint8_t>(y);
          const auto* r = residual.ptr<float>(y);
          for (int x = cell.x; x < cell.x + cell.width; x += 2) {
            if (m[x] != 0) samples.push_back(std::abs(r[x]));
          }
        }
        const std::size_t n = samples.size() - first;
        if (n < 50) continue;
        const auto begin = samples.begin() + static_cast<std::ptrdiff_t>(first);
        std::nth_element(begin, begin + static_cast<std::ptrdiff_t>(n / 2), samples.end());
        local[static_cast<std::size_t>(j * tx + i)] = 1.4826F * *(begin + static_cast<std::ptrdiff_t>(n / 2));
      }
    }
    if (samples.size() < 50) return out;
    sigma = std::max(1.4826F * median_of(samples), 0.05F);
    out.noise_sigma = sigma;
    cv::Mat tiles(ty, tx, CV_32F);
    for (int j = 0; j < ty; ++j) {
      for (int i = 0; i < tx; ++i) {
        const float l = local[static_cast<std::size_t>(j * tx + i)];
        tiles.at<float>(j, i) = l > 0 ? std::clamp(l, 0.7F * sigma, 3.0F * sigma) : sigma;
      }
    }
    cv::resize(tiles, sigma_map, roi.size(), 0, 0, cv::INTER_LINEAR);
  }
  // -- hysteresis thresholds ----------------------------------------------------------
  // The residual becomes local noise sigmas in place (`z`), and the pixels
  // past the low threshold either way are marked, in one pass.
  const float contrast_floor = static_cast<float>(p.min_contrast);
  const auto low = static_cast<float>(p.k_low), high = static_cast<float>(std::max(p.k_high, p.k_low));
  cv::Mat& z = residual;
  cv::Mat& dark_candidates = ws.candidates[0];
  cv::Mat& bright_candidates = ws.candidates[1];
  dark_candidates.create(roi.size(), CV_8U);
  bright_candidates.create(roi.size(), CV_8U);
  for (int y = 0; y < roi.height; ++y) {
    const auto* sv = sigma_map.ptr<float>(y);
    auto* rv = residual.ptr<float>(y);
    auto* dv = dark_candidates.ptr<std::uint8_t>(y);
    auto* bv = bright_candidates.ptr<std::uint8_t>(y);
    for (int x = 0; x < roi.width; ++x) {
      const float r = rv[x], zv = r / sv[x];
      rv[x] = zv;  // outside the surface the residual is 0, so no mark there
      dv[x] = zv < -low && r < -contrast_floor ? 255 : 0;
      bv[x] = zv > low && r > contrast_floor ? 255 : 0;
    }
  }
  const int join_px = std::max(1, static_cast<int>(std::lround(p.join_mm * px_per_mm)));
  std::vector<Region> regions;
  for (const bool dark : {true, false}) {
    const cv::Mat& candidates = dark ? dark_candidates : bright_candidates;
    std::vector<Region> weak;
    auto found =
        hysteresis_regions(candidates, z, high, 1.0F, dark, roi.tl(), join_px, kMinWeakPx, px_per_mm, &weak);
    for (auto& r : found) {
      if (r.pixels.size() >= 3) measure(r, px_per_mm);
      regions.push_back(std::move(r));
    }
    for (auto& r : weak) regions.push_back(std::move(r));
  }
  std::vector<Region> faint;  // stroke-like pieces that stayed below k_high: where faint strokes are followed from
  bridge_collinear(regions, p.bridge_mm * px_per_mm, px_per_mm, &faint);
  merge_polarities(regions, std::max(2, static_cast<int>(std::lround(p.pair_mm * px_per_mm))), px_per_mm);

  // -- classification -----------------------------------------------------------------
  const double max_pit = p.max_pit_mm * px_per_mm + 2;
  const double chunk = std::max(8.0, p.coherence_mm * px_per_mm);
  auto classify = [&](Region& r) -> std::string {
    r.coherence = orientation_coherence(g, roi.tl(), r, chunk);
    // A pit first: its core (the part at least half as dark as its darkest
    // point) is small and compact, even when the low threshold lets a fringe
    // of noise or texture run off it.
    if (r.dark && !r.two_tone && r.peak >= p.min_pit_sigmas && r.extent <= 2 * max_pit) {
      Region core = core_of(r);
      if (core.pixels.size() >= 3) {
        measure(core, px_per_mm);
        if (core.extent / std::max(1.0, static_cast<double>(core.pixels.size()) / core.extent) < 3.0 &&
            core.extent <= max_pit && std::sqrt(static_cast<double>(core.pixels.size())) >= p.min_pit_px * 0.8) {
          return "pit";
        }
      }
    }
    if (r.elongation < p.min_elongation) return "";
    // Smooth (however it bends), one strand, gradients agreeing stretch by
    // stretch: a scratch. Not smooth, dark, and zig-zagging (its centre line
    // straying at least `min_zigzag_mm`), branched or clearly incoherent
    // (below `max_crack_coherence`): a crack. A stroke that is not smooth
    // only because its gradients agree a little less than a scratch's, with
    // a centre line that hardly strays, is a blotch of the texture: neither.
    const bool branched = r.forks >= p.min_branch_mm * px_per_mm;
    const bool smooth = r.coherence >= p.crack_coherence && r.jaggedness <= p.crack_jaggedness && !branched;
    const bool zigzag =
        r.jaggedness >= p.min_zigzag_mm * px_per_mm || branched || r.coherence < p.max_crack_coherence;
    // The longer and thinner a stroke, the less likely noise or texture
    // strings that many pixels together: the mean contrast asked of it falls
    // by up to 15 %, reached at twice the shortest length of its class and
    // three times the least elongation (a blotch of the texture is long but
    // not thin, and is not let off).
    auto relaxed = [&](double min_mm, double sigmas) {
      const double longer = std::clamp(r.length / (min_mm * px_per_mm) - 1.0, 0.0, 1.0);
      const double thinner = std::clamp((r.elongation - p.min_elongation) / (2 * p.min_elongation), 0.0, 1.0);
      return sigmas * (1.0 - 0.15 * std::min(longer, thinner));
    };
    if (smooth && r.length >= p.min_scratch_mm * px_per_mm &&
        r.mean >= relaxed(p.min_scratch_mm, p.min_scratch_sigmas)) {
      return "scratch";
    }
    if (!smooth && zigzag && r.dark && r.length >= p.min_crack_mm * px_per_mm &&
        r.mean >= relaxed(p.min_crack_mm, p.min_crack_sigmas)) {
      return "crack";
    }
    return "";
  };
  std::vector<std::string> classes(regions.size());
  for (std::size_t i = 0; i < regions.size(); ++i) {
    if (regions[i].pixels.size() >= 3) classes[i] = classify(regions[i]);
  }
  // A crack whose faint stretch fell below the low threshold comes in
  // pieces that zig-zag away from one another, so they do not bridge as a
  // scratch's do: dark strokes within `crack_gap_mm` of a crack are part of
  // it (pits and scratches excepted).
  const int crack_gap = std::max(2, static_cast<int>(std::lround(p.crack_gap_mm * px_per_mm)));
  for (bool joined = true; joined;) {
    joined = false;
    for (std::size_t i = 0; i < regions.size() && !joined; ++i) {
      if (classes[i] != "crack") continue;
      Region& a = regions[i];
      for (std::size_t j = 0; j < regions.size() && !joined; ++j) {
        Region& b = regions[j];
        if (j == i || !b.dark || b.pixels.size() < 3 || (classes[j] != "crack" && classes[j] != "") ||
            (classes[j].empty() && b.elongation < 3.0)) {
          continue;
        }
        if (!within(a, b, crack_gap)) continue;
        const double forks = std::max(a.forks, b.forks);
        a.pixels.insert(a.pixels.end(), b.pixels.begin(), b.pixels.end());
        a.values.insert(a.values.end(), b.values.begin(), b.values.end());
        a.peak = std::max(a.peak, b.peak);
        a.two_tone = a.two_tone || b.two_tone;
        a.mean = 0;
        for (float v : a.values) a.mean += v;
        a.mean /= static_cast<double>(a.values.size());
        measure(a, px_per_mm);
        if (a.two_tone) a.forks = forks;
        const std::string again = classify(a);
        classes[i] = again.empty() ? "crack" : again;
        regions.erase(regions.begin() + static_cast<std::ptrdiff_t>(j));
        classes.erase(classes.begin() + static_cast<std::ptrdiff_t>(j));
        joined = true;
      }
    }
  }
  // -- faint strokes, followed along their direction --------------------------------
  // A faint scratch in a dim part of the plate breaks into pieces that pass
  // the thresholds pixel by pixel only here and there. From each piece that
  // classification left out, and each faint stroke-like piece, the stroke
  // is followed along its own direction (StrokeTracer) and judged on the
  // evidence gathered along it: long enough for a scratch, smooth, a mean
  // ridge contrast of `min_trace_contrast` percent, and `trace_evidence`
  // robust spreads above what the surface around it gives along the same
  // direction (so the metal's brushed texture, which a line filter also
  // follows for some millimetres, is measured against itself).
  std::vector<Region> added;
  {
    const double step = std::max(4.0, kTraceStepMm * px_per_mm);
    const StrokeTracer tracer(z, mask, sigma_map, step, std::max(2.0, kTraceSideMm * px_per_mm));
    const int max_steps = static_cast<int>(std::ceil(kTraceMaxMm * px_per_mm / step));
    const int pair = std::max(2, static_cast<int>(std::lround(p.pair_mm * px_per_mm)));
    // A region left out with the contrast of a clear mark had evidence
    // enough pixel by pixel, and was left out for its shape (a zig-zag too
    // fine to resolve, a blotch): following it would smooth that away.
    const double faint_mean = kTraceFaint * p.min_scratch_sigmas;
    std::vector<const Region*> seeds;
    for (std::size_t i = 0; i < regions.size(); ++i) {
      if (classes[i].empty() && regions[i].pixels.size() >= 3 && regions[i].mean < faint_mean) {
        seeds.push_back(&regions[i]);
      }
    }
    for (const auto& f : faint) seeds.push_back(&f);
    std::stable_sort(seeds.begin(), seeds.end(), [](const Region* a, const Region* b) { return a->peak > b->peak; });
    std::vector<cv::Point2d> followed;  // every sample of every stroke followed: not followed again
    // The regions of `seeds` point into `regions`, which grows only after
    // this loop (`added`).
    for (const Region* seed_region : seeds) {
      const Region& r = *seed_region;
      const auto top = static_cast<std::size_t>(std::max_element(r.values.begin(), r.values.end()) - r.values.begin());
      const cv::Point2d seed = cv::Point2d(r.pixels[top] - roi.tl());
      if (std::any_of(followed.begin(), followed.end(), [&](cv::Point2d c) { return cv::norm(c - seed) < 3.0; })) {
        continue;
      }
      const double sign = r.dark ? -1.0 : 1.0;
      double score = 0;
      const cv::Point2d d = tracer.best_direction(seed, sign, &score);
      if (!(score >= kTraceStepSigmas)) continue;
      StrokeTrace back, ahead;
      tracer.follow(seed, -d, sign, kTraceStepSigmas, max_steps, &back);
      tracer.follow(seed, d, sign, kTraceStepSigmas, max_steps, &ahead);
      StrokeTrace t;
      t.centre.assign(back.centre.rbegin(), back.centre.rend());
      t.centre.push_back(seed);
      t.centre.insert(t.centre.end(), ahead.centre.begin(), ahead.centre.end());
      followed.insert(followed.end(), t.centre.begin(), t.centre.end());
      const auto samples = static_cast<double>(back.centre.size() + ahead.centre.size());
      if (samples <= 0) continue;
      t.ridge = (back.ridge + ahead.ridge) / samples;
      t.percent = (back.percent + ahead.percent) / samples;
      for (std::size_t k = 1; k < t.centre.size(); ++k) t.span += cv::norm(t.centre[k] - t.centre[k - 1]);
      if (t.span < p.min_scratch_mm * px_per_mm || t.percent < p.min_trace_contrast) continue;
      Region stroke;
      stroke.dark = r.dark;
      for (const auto& c : t.centre) {
        const cv::Point q(static_cast<int>(std::lround(c.x)) + roi.x, static_cast<int>(std::lround(c.y)) + roi.y);
        if (!stroke.pixels.empty() && stroke.pixels.back() == q) continue;
        stroke.pixels.push_back(q);
        stroke.values.push_back(static_cast<float>(t.ridge));
      }
      measure(stroke, px_per_mm);
      if (stroke.jaggedness > p.crack_jaggedness) continue;
      // What the surface around gives along the same direction.
      const cv::Point2d chord = t.centre.back() - t.centre.front();
      const cv::Point2d dir = chord * (1.0 / std::max(1.0, cv::norm(chord)));
      const int around = static_cast<int>(std::lround(kTraceNullMm * px_per_mm));
      const cv::Rect area(stroke.box.x - roi.x - around, stroke.box.y - roi.y - around, stroke.box.width + 2 * around,
                          stroke.box.height + 2 * around);
      double median = 0, median_across = 0;
      const double spread = tracer.null_spread(area, dir, sign, t.centre, &median);
      const double evidence = spread > 0 ? (t.ridge - median) / spread : 0.0;
      if (evidence < p.trace_evidence) continue;
      // Texture that runs along the stroke (brushed metal) strings its
      // streaks together from segment to segment, so the stroke's mean does
      // not average its noise down as it does across isotropic texture: the
      // evidence asked grows with the spread along over the spread across.
      const double across = tracer.null_spread(area, cv::Point2d(-dir.y, dir.x), sign, t.centre, &median_across);
      const double grain = across > 0 ? spread / across : 1.0;
      if (grain > kTraceIsotropic && evidence < p.trace_evidence * grain / kTraceIsotropic) continue;
      // The same mark as scratches already found (a scratch found in part,
      // in pieces, or one wall of a two-toned one): they become one scratch
      // over the stroke's extent. Next to a pit or a crack it is left out.
      std::vector<std::size_t> near;
      bool other = false;
      for (std::size_t j = 0; j < regions.size(); ++j) {
        if (classes[j].empty() || regions[j].pixels.empty() || !within(stroke, regions[j], pair)) continue;
        if (classes[j] == "scratch") {
          near.push_back(j);
        } else {
          other = true;
        }
      }
      if (other) continue;
      // Or a stroke followed already, from another of its pieces.
      const auto again = std::find_if(added.begin(), added.end(), [&](const Region& a) { return within(stroke, a, pair); });
      if (again != added.end()) {
        again->box |= stroke.box;
        continue;
      }
      if (!near.empty()) {
        Region& keep = regions[near.front()];
        keep.box |= stroke.box;
        for (std::size_t k = 1; k < near.size(); ++k) {
          Region& gone = regions[near[k]];
          keep.box |= gone.box;
          keep.pixels.insert(keep.pixels.end(), gone.pixels.begin(), gone.pixels.end());
          keep.peak = std::max(keep.peak, gone.peak);
          gone.pixels.clear();  // one finding now, with `keep`
          gone.values.clear();
        }
        continue;
      }
      // Its score: as if it had just reached k_high (it passed on evidence
      // of its own); its mean contrast is the ridge contrast gathered along it.
      stroke.peak = std::max(r.peak, high);
      stroke.mean = t.ridge;
      stroke.coherence = orientation_coherence(g, roi.tl(), stroke, chunk);
      added.push_back(std::move(stroke));
    }
  }
  for (auto& a : added) {
    regions.push_back(std::move(a));
    classes.emplace_back("scratch");
  }
  for (std::size_t i = 0; i < regions.size(); ++i) {
    const Region& r = regions[i];
    if (r.pixels.size() < 3) continue;
    if (classes[i].empty() && !p.keep_rejected) continue;
    out.defects.push_back(FoundDefect{classes[i], cv::Rect2f(cv::Rect2d(r.box)), score_from(r.peak, p.k_high),
                                      RegionFeatures{r.length, r.thickness, r.elongation, r.jaggedness, r.coherence,
                                                     r.peak, r.mean, r.dark, r.forks, r.two_tone}});
  }

  if (p.check_holes) find_missing_holes(grey, plate, p, &out.defects);
  return out;
}

}  // namespace swarmflow::inspection
