#include "video/synthetic_ultrasound.hpp"
#include "video/splitmix.hpp"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <stdexcept>

#include <nlohmann/json.hpp>
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

namespace swarmflow::video {

namespace {

constexpr double kPi = 3.14159265358979323846;
constexpr int kContourVertices = 96;
constexpr int kStripLength = 1024;  ///< blood scatterers along the vessel, px (periodic)
constexpr int kNoiseMargin = 64;    ///< the noise tile is this much larger than a frame
constexpr double kTopDb = 20.0;     ///< the tissue's mean echo sits this far below white
constexpr std::size_t kScenesKept = 2;

// -- deterministic randomness (splitmix.hpp) -----------------------------------

using splitmix::mix64;
using splitmix::Rng;

std::uint64_t hash_of(std::initializer_list<std::uint64_t> values) { return splitmix::hash_of(0x0517a50d12345678ULL, values); }

/// Tags that keep the random streams of different purposes apart.
enum class Stream : std::uint64_t { scene = 1, scatterers = 2, blood = 3, noise = 4, frame = 5, texture = 6 };

std::uint64_t key(std::uint64_t seed, std::uint64_t what, Stream stream) {
  return hash_of({seed, what, static_cast<std::uint64_t>(stream)});
}

/// Point-spread function at 0.1 mm/px: Gaussian, FWHM 0.35 mm axially and
/// 0.6 mm laterally (a 7.5 MHz linear array with a two-cycle pulse, at focus).
constexpr double kAxialFwhmMm = 0.35;
constexpr double kLateralFwhmMm = 0.6;
constexpr double kFwhmToSigma = 1.0 / 2.3548;

const char* kClassNames[] = {"hypoechoic", "hyperechoic", "anechoic"};

}  // namespace

// -- the scene: what lies under the probe for scene_frames frames -------------

struct SceneLesion {
  int id = 0;
  int klass = 0;  ///< index into kClassNames
  bool irregular = false;
  double aspect = 1;
  double contrast_db = 0;
  std::vector<cv::Point2f> outline;  ///< scene pixels
  double size_mm = 0, width_mm = 0, area_mm2 = 0;
  cv::Point2d centre;
};

struct SyntheticUltrasound::Scene {
  std::uint64_t index = 0;
  int mx = 0, mz = 0;  ///< margins of the canvas around the scene, px
  cv::Mat iq;          ///< CV_32FC2 canvas: the tissue's echo (baseband), attenuation beyond TGC included
  cv::Mat atten;       ///< CV_32F canvas: amplitude left by attenuation beyond what TGC undoes
  std::vector<SceneLesion> lesions;
  bool has_vessel = false;
  double vx = 0, vy = 0, theta = 0, vr_px = 0, v_mm_s = 0;  ///< axis point (scene px), angle (rad), radius
  int vdir = 1;
  int half = 0;      ///< rows of the blood strip either side of the axis
  cv::Mat strip;     ///< CV_32FC2, (2 half + 1) x kStripLength: blood scatterers in vessel coordinates
  double psf_x = 1, psf_z = 1;  ///< PSF sigmas, px
  double amp_mm = 0, period_s = 1, phase = 0, axial_mm = 0, axial_period_s = 1, axial_phase = 0;
  double tgc_error = 0, gain_db = 0;
};

namespace {

double ellipse_radius(double a, double b, double phi) {
  const double c = std::cos(phi), s = std::sin(phi);
  return a * b / std::sqrt((b * c) * (b * c) + (a * s) * (a * s));
}

/// Longest diameter of a polygon and the extent perpendicular to it.
void feret(const std::vector<cv::Point2f>& pts, double* longest, double* across) {
  double best = 0;
  cv::Point2f pa, pb;
  for (std::size_t i = 0; i < pts.size(); ++i) {
    for (std::size_t j = i + 1; j < pts.size(); ++j) {
      const double d = std::hypot(pts[i].x - pts[j].x, pts[i].y - pts[j].y);
      if (d > best) {
        best = d;
        pa = pts[i];
        pb = pts[j];
      }
    }
  }
  double lo = 0, hi = 0;
  if (best > 0) {
    const double nx = -(pb.y - pa.y) / best, ny = (pb.x - pa.x) / best;
    lo = 1e300;
    hi = -1e300;
    for (const auto& p : pts) {
      const double t = (p.x - pa.x) * nx + (p.y - pa.y) * ny;
      lo = std::min(lo, t);
      hi = std::max(hi, t);
    }
  }
  *longest = best;
  *across = hi - lo;
}

}  // namespace

bool parse_ultrasound_uri(const std::string& uri, SyntheticUltrasoundConfig* config, std::string* error) {
  auto fail = [&](const std::string& message) {
    if (error != nullptr) *error = message;
    return false;
  };
  static const char* kKeys =
      "seed, width, height, mm_per_px, fps, scene_frames, max_lesions, vessels, f0_mhz, attenuation, "
      "dynamic_range_db, noise_db, motion_mm";
  SyntheticUltrasoundConfig c = *config;
  const std::string prefix = "synthetic://ultrasound";
  if (uri.compare(0, prefix.size(), prefix) != 0) return fail("not a synthetic://ultrasound URI: " + uri);
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
    const std::string name = item.substr(0, eq), value = item.substr(eq + 1);
    std::string range;
    try {
      std::size_t used = 0;
      auto as_int = [&](long long lo, long long hi) {
        range = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
        const long long v = std::stoll(value, &used);
        if (used != value.size() || v < lo || v > hi) throw std::out_of_range(name);
        return v;
      };
      auto as_double = [&](double lo, double hi) {
        range = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
        const double v = std::stod(value, &used);
        if (used != value.size() || !(v >= lo && v <= hi)) throw std::out_of_range(name);
        return v;
      };
      if (name == "seed") {
        const unsigned long long v = std::stoull(value, &used);
        if (used != value.size()) throw std::out_of_range(name);
        c.seed = v;
      } else if (name == "width") {
        c.width = static_cast<int>(as_int(320, 4096));
      } else if (name == "height") {
        c.height = static_cast<int>(as_int(240, 4096));
      } else if (name == "mm_per_px") {
        c.mm_per_px = as_double(0.05, 0.2);
      } else if (name == "fps") {
        c.fps = as_double(5, 200);
      } else if (name == "scene_frames") {
        c.scene_frames = static_cast<int>(as_int(1, 1'000'000));
      } else if (name == "max_lesions") {
        c.max_lesions = static_cast<int>(as_int(1, 3));
      } else if (name == "vessels") {
        c.vessels = static_cast<int>(as_int(0, 1));
      } else if (name == "f0_mhz") {
        c.f0_mhz = as_double(2, 15);
      } else if (name == "attenuation") {
        c.attenuation = as_double(0, 1.5);
      } else if (name == "dynamic_range_db") {
        c.dynamic_range_db = as_double(40, 80);
      } else if (name == "noise_db") {
        c.noise_db = as_double(-80, -20);
      } else if (name == "motion_mm") {
        c.motion_mm = as_double(0, 5);
      } else {
        return fail("unknown key '" + name + "' in " + uri + " (known: " + kKeys + ")");
      }
    } catch (const std::exception&) {
      return fail("bad value '" + value + "' for " + name + " in " + uri +
                  (range.empty() ? std::string() : " (allowed: " + range + ")"));
    }
  }
  // The field must hold the largest lesion with room for the vessel and the
  // lesion's posterior region.
  if (c.width * c.mm_per_px < 32 || c.height * c.mm_per_px < 24) {
    return fail("synthetic://ultrasound needs a field of at least 32 x 24 mm (width x mm_per_px, height x "
                "mm_per_px); " + uri + " gives " + std::to_string(c.width * c.mm_per_px) + " x " +
                std::to_string(c.height * c.mm_per_px) + " mm");
  }
  *config = c;
  return true;
}

SyntheticUltrasound::SyntheticUltrasound(SyntheticUltrasoundConfig config) : config_(config) {
  cv::RNG rng(key(config_.seed, 0, Stream::noise));
  noise_.create(config_.height + kNoiseMargin, config_.width + kNoiseMargin, CV_32FC2);
  const double sigma = std::pow(10.0, config_.noise_db / 20.0) / std::sqrt(2.0);
  rng.fill(noise_, cv::RNG::NORMAL, 0.0, sigma);
}

SyntheticUltrasound::~SyntheticUltrasound() = default;

std::shared_ptr<const SyntheticUltrasound::Scene> SyntheticUltrasound::scene(std::uint64_t s) const {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& c : cache_) {
      if (c->index == s) return c;
    }
  }
  const SyntheticUltrasoundConfig& cfg = config_;
  const double mm = cfg.mm_per_px;
  auto sc = std::make_shared<Scene>();
  sc->index = s;
  Rng rng(key(cfg.seed, s, Stream::scene));

  // Probe motion: slow lateral sliding and a little axial breathing.
  sc->amp_mm = cfg.motion_mm * rng.uniform(0.5, 1.0);
  sc->period_s = rng.uniform(4.0, 8.0);
  sc->phase = rng.uniform(0, 2 * kPi);
  sc->axial_mm = std::min(0.3, 0.15 * cfg.motion_mm) * rng.uniform(0.5, 1.0);
  sc->axial_period_s = rng.uniform(2.0, 4.0);
  sc->axial_phase = rng.uniform(0, 2 * kPi);
  sc->tgc_error = rng.uniform(-0.1, 0.1);
  sc->gain_db = rng.uniform(-1.0, 1.0);
  sc->mx = static_cast<int>(std::ceil((cfg.motion_mm + 0.5) / mm)) + 2;
  sc->mz = static_cast<int>(std::ceil(0.5 / mm)) + 2;
  const int cw = cfg.width + 2 * sc->mx, ch = cfg.height + 2 * sc->mz;
  const double width_mm = cfg.width * mm, height_mm = cfg.height * mm;

  // The vessel: a straight tube across the field.
  double blood_db = -12;
  if (cfg.vessels > 0) {
    sc->has_vessel = true;
    const double r_mm = rng.uniform(1.5, 2.5);
    double theta = rng.uniform(-10.0, 10.0) * kPi / 180.0;
    const double lo = r_mm + 4.0, hi = height_mm - r_mm - 6.0;
    double span = (width_mm / 2 + cfg.motion_mm + 1.0) * std::abs(std::tan(theta));
    if (lo + span > hi - span) {
      theta = 0;
      span = 0;
    }
    sc->theta = theta;
    sc->vr_px = r_mm / mm;
    sc->vx = cfg.width / 2.0;
    sc->vy = rng.uniform(lo + span, hi - span) / mm;
    sc->v_mm_s = rng.uniform(10.0, 30.0);
    sc->vdir = rng.chance(0.5) ? 1 : -1;
    blood_db = rng.uniform(-14.0, -10.0);
  }

  // Lesions, placed apart from each other, from the vessel and from the edges.
  const int wanted = std::min(cfg.max_lesions, rng.chance(0.4) ? 1 : (rng.chance(0.667) ? 2 : 3));
  const int first_class = static_cast<int>((cfg.seed + s) % 3);
  for (int n = 0; n < wanted; ++n) {
    SceneLesion l;
    l.id = n + 1;
    l.klass = n == 0 ? first_class : rng.range(0, 2);
    const bool cyst = l.klass == 2;
    const double d = cyst ? rng.uniform(6.0, 12.0) : rng.uniform(5.0, 14.0);
    l.aspect = cyst ? rng.uniform(0.75, 1.0) : rng.uniform(0.6, 1.0);
    l.irregular = !cyst && rng.chance(l.klass == 0 ? 0.5 : 0.3);
    l.contrast_db = l.klass == 0 ? rng.uniform(-14.0, -8.0) : (l.klass == 1 ? rng.uniform(6.0, 10.0) : -60.0);
    const double a = d / 2, b = a * l.aspect, rot = rng.uniform(0, kPi);
    double harm[5], phase[5];
    for (int k = 0; k < 5; ++k) {
      harm[k] = l.irregular ? rng.uniform(0.04, 0.09) : rng.uniform(0.0, 0.012);
      phase[k] = rng.uniform(0, 2 * kPi);
    }
    std::vector<cv::Point2d> shape_mm;
    double rmax = 0;
    for (int i = 0; i < kContourVertices; ++i) {
      const double phi = 2 * kPi * i / kContourVertices;
      double r = ellipse_radius(a, b, phi);
      double f = 1;
      for (int k = 0; k < 5; ++k) f += harm[k] * std::cos((k + 3) * phi + phase[k]);
      r *= f;
      rmax = std::max(rmax, r);
      shape_mm.emplace_back(r * std::cos(phi + rot), r * std::sin(phi + rot));
    }
    bool placed = false;
    for (int attempt = 0; attempt < 200 && !placed; ++attempt) {
      const double edge = cfg.motion_mm + 3.0 + rmax;
      const double cx = rng.uniform(edge, width_mm - edge);
      const double cz = rng.uniform(5.0 + rmax, height_mm - 10.0 - rmax);
      if (cx < edge || cz < 5.0 + rmax || cx > width_mm - edge || cz > height_mm - 10.0 - rmax) continue;
      bool ok = true;
      if (sc->has_vessel) {
        const double w = -(cx / mm - sc->vx) * std::sin(sc->theta) + (cz / mm - sc->vy) * std::cos(sc->theta);
        if (std::abs(w) * mm < sc->vr_px * mm + rmax + 3.0) ok = false;
      }
      for (const SceneLesion& o : sc->lesions) {
        const double ox = o.centre.x * mm, oz = o.centre.y * mm;
        double orad = 0;
        for (const auto& p : o.outline) orad = std::max(orad, std::hypot(p.x - o.centre.x, p.y - o.centre.y) * mm);
        // Never in one another's columns: the region under a lesion is where
        // its posterior features show.
        if (std::abs(cx - ox) < rmax + orad + 2.0) ok = false;
        (void)oz;
      }
      if (!ok) continue;
      l.centre = cv::Point2d(cx / mm, cz / mm);
      for (const auto& p : shape_mm) {
        l.outline.emplace_back(static_cast<float>((cx + p.x) / mm), static_cast<float>((cz + p.y) / mm));
      }
      placed = true;
    }
    if (!placed) continue;
    double longest = 0, across = 0;
    feret(l.outline, &longest, &across);
    l.size_mm = longest * mm;
    l.width_mm = across * mm;
    l.area_mm2 = cv::contourArea(l.outline) * mm * mm;
    sc->lesions.push_back(std::move(l));
  }

  // Reflectivity: tissue with a gentle large-scale variation (1 dB sigma,
  // about 10 mm across), lesions scaled by their contrast, the lumen empty.
  cv::Mat refl(ch, cw, CV_32F);
  {
    cv::RNG trng(key(cfg.seed, s, Stream::texture));
    const int gw = std::max(3, static_cast<int>(cw * mm / 10.0) + 2), gh = std::max(3, static_cast<int>(ch * mm / 10.0) + 2);
    cv::Mat grid(gh, gw, CV_32F);
    trng.fill(grid, cv::RNG::NORMAL, 0.0, 1.0);
    cv::Mat db;
    cv::resize(grid, db, refl.size(), 0, 0, cv::INTER_CUBIC);
    db *= std::log(10.0) / 20.0;
    cv::exp(db, refl);
  }
  cv::Mat alpha_excess(ch, cw, CV_32F, cv::Scalar(0));  // attenuation beyond the tissue's, dB/(cm MHz)
  auto polygon = [&](const std::vector<cv::Point2f>& pts) {
    std::vector<cv::Point> p;
    for (const auto& q : pts) {
      p.emplace_back(static_cast<int>(std::lround((q.x + sc->mx) * 16)), static_cast<int>(std::lround((q.y + sc->mz) * 16)));
    }
    return p;
  };
  cv::Mat mask(ch, cw, CV_8U);
  for (const SceneLesion& l : sc->lesions) {
    mask.setTo(0);
    std::vector<std::vector<cv::Point>> polys{polygon(l.outline)};
    cv::fillPoly(mask, polys, cv::Scalar(255), cv::LINE_8, 4);
    if (l.klass == 2) {
      refl.setTo(0, mask);
      alpha_excess.setTo(-cfg.attenuation, mask);  // fluid: next to no attenuation
    } else {
      cv::Mat scaled = refl * std::pow(10.0, l.contrast_db / 20.0);
      scaled.copyTo(refl, mask);
    }
  }
  if (sc->has_vessel) {
    const double c = std::cos(sc->theta), sn = std::sin(sc->theta);
    for (int i = 0; i < ch; ++i) {
      auto* rp = refl.ptr<float>(i);
      auto* ap = alpha_excess.ptr<float>(i);
      for (int j = 0; j < cw; ++j) {
        const double w = -(j - sc->mx - sc->vx) * sn + (i - sc->mz - sc->vy) * c;
        if (std::abs(w) <= sc->vr_px) {
          rp[j] = 0;
          ap[j] = static_cast<float>(-0.7 * cfg.attenuation);  // blood: about 0.15 dB/(cm MHz)
        }
      }
    }
  }

  // Scatterers: a circular complex Gaussian per pixel (the limit of many
  // point scatterers per resolution cell: fully developed speckle), scaled by
  // the reflectivity, convolved with the PSF (baseband, so its magnitude is
  // the envelope), scaled so that the tissue's mean echo power is 1.
  const double sx = kLateralFwhmMm * kFwhmToSigma / mm, sz = kAxialFwhmMm * kFwhmToSigma / mm;
  const double scale = std::sqrt(2 * kPi * sx * sz);
  cv::Mat scat(ch, cw, CV_32FC2);
  cv::RNG srng(key(cfg.seed, s, Stream::scatterers));
  srng.fill(scat, cv::RNG::NORMAL, 0.0, scale);
  for (int i = 0; i < ch; ++i) {
    auto* p = scat.ptr<cv::Vec2f>(i);
    const auto* r = refl.ptr<float>(i);
    for (int j = 0; j < cw; ++j) p[j] *= r[j];
  }
  cv::GaussianBlur(scat, sc->iq, cv::Size(0, 0), sx, sz, cv::BORDER_REFLECT);

  // Attenuation that TGC does not undo: below a cyst (or the vessel) the
  // beam has lost less than TGC assumes, so echoes there come back stronger.
  sc->atten.create(ch, cw, CV_32F);
  std::vector<double> acc(static_cast<std::size_t>(cw), 0.0);
  const double per_px = 2.0 * cfg.f0_mhz * mm / 10.0;  // round trip, dB per (dB/(cm MHz)) per pixel
  for (int i = 0; i < ch; ++i) {
    auto* e = sc->atten.ptr<float>(i);
    const auto* ax = alpha_excess.ptr<float>(i);
    auto* iq = sc->iq.ptr<cv::Vec2f>(i);
    for (int j = 0; j < cw; ++j) {
      const double g = acc[static_cast<std::size_t>(j)] == 0 ? 1.0 : std::pow(10.0, -acc[static_cast<std::size_t>(j)] / 20.0);
      e[j] = static_cast<float>(g);
      iq[j] *= static_cast<float>(g);
      acc[static_cast<std::size_t>(j)] += ax[j] * per_px;
    }
  }

  // Blood: its own scatterers in vessel coordinates (u along the axis,
  // periodic over kStripLength; w across, zero outside the lumen). Each
  // frame moves them along their streamline and convolves them with the PSF.
  if (sc->has_vessel) {
    sc->half = static_cast<int>(std::ceil(sc->vr_px + 3 * std::max(sx, sz))) + 1;
    const int rows = 2 * sc->half + 1;
    sc->strip.create(rows, kStripLength, CV_32FC2);
    cv::RNG brng(key(cfg.seed, s, Stream::blood));
    brng.fill(sc->strip, cv::RNG::NORMAL, 0.0, scale * std::pow(10.0, blood_db / 20.0));
    for (int i = 0; i < rows; ++i) {
      if (std::abs(i - sc->half) > sc->vr_px) sc->strip.row(i).setTo(cv::Scalar(0, 0));
    }
    sc->psf_x = sx;
    sc->psf_z = sz;
  }

  std::lock_guard<std::mutex> lock(mutex_);
  cache_.push_back(sc);
  if (cache_.size() > kScenesKept) cache_.erase(cache_.begin());
  return sc;
}

namespace {

struct Pose {
  double dx = 0, dz = 0;  ///< probe position, px
  double t = 0;           ///< seconds
};

Pose pose_of(const SyntheticUltrasound::Scene& sc, const SyntheticUltrasoundConfig& cfg, std::uint64_t index) {
  Pose p;
  p.t = static_cast<double>(index) / cfg.fps;
  p.dx = sc.amp_mm * std::sin(2 * kPi * p.t / sc.period_s + sc.phase) / cfg.mm_per_px;
  p.dz = sc.axial_mm * std::sin(2 * kPi * p.t / sc.axial_period_s + sc.axial_phase) / cfg.mm_per_px;
  return p;
}

UltrasoundTruth truth_of(const SyntheticUltrasound::Scene& sc, const SyntheticUltrasoundConfig& cfg,
                         std::uint64_t index, const Pose& p) {
  UltrasoundTruth t;
  t.frame_index = index;
  t.scene = sc.index;
  t.mm_per_px = cfg.mm_per_px;
  t.fps = cfg.fps;
  t.dynamic_range_db = cfg.dynamic_range_db;
  t.probe_x_mm = p.dx * cfg.mm_per_px;
  t.probe_z_mm = p.dz * cfg.mm_per_px;
  for (const SceneLesion& l : sc.lesions) {
    LesionTruth lt;
    lt.id = l.id;
    lt.echogenicity = kClassNames[l.klass];
    lt.margin = l.irregular ? "irregular" : "circumscribed";
    lt.shape = l.irregular ? "irregular" : (l.aspect >= 0.85 ? "round" : "oval");
    lt.posterior = l.klass == 2 ? "enhancement" : "none";
    lt.contrast_db = l.contrast_db;
    lt.size_mm = l.size_mm;
    lt.width_mm = l.width_mm;
    lt.area_mm2 = l.area_mm2;
    lt.centre_x_px = l.centre.x - p.dx;
    lt.centre_y_px = l.centre.y - p.dz;
    for (const auto& q : l.outline) {
      lt.contour.emplace_back(static_cast<float>(q.x - p.dx), static_cast<float>(q.y - p.dz));
    }
    t.lesions.push_back(std::move(lt));
  }
  if (sc.has_vessel) {
    VesselTruth v;
    v.id = 1;
    v.axis_x_px = cfg.width / 2.0;
    v.axis_y_px = sc.vy - p.dz + p.dx * std::tan(sc.theta);
    v.angle_deg = sc.theta * 180.0 / kPi;
    v.radius_mm = sc.vr_px * cfg.mm_per_px;
    v.velocity_mm_s = sc.v_mm_s;
    v.direction = sc.vdir;
    t.vessels.push_back(v);
  }
  return t;
}

}  // namespace

UltrasoundTruth SyntheticUltrasound::truth(std::uint64_t index) const {
  const auto sc = scene(index / static_cast<std::uint64_t>(config_.scene_frames));
  return truth_of(*sc, config_, index, pose_of(*sc, config_, index));
}

UltrasoundTruth SyntheticUltrasound::render_grey(std::uint64_t index, cv::Mat& grey) const {
  const SyntheticUltrasoundConfig& cfg = config_;
  const auto sc = scene(index / static_cast<std::uint64_t>(cfg.scene_frames));
  const Pose p = pose_of(*sc, cfg, index);
  const int w = cfg.width, h = cfg.height;

  // The tissue moves with the probe: sample the scene's echo where the probe is.
  cv::Mat iq;
  const cv::Matx23d m(1, 0, p.dx + sc->mx, 0, 1, p.dz + sc->mz);
  cv::warpAffine(sc->iq, iq, m, cv::Size(w, h), cv::INTER_LINEAR | cv::WARP_INVERSE_MAP, cv::BORDER_REFLECT);

  // Blood: each streamline carries its scatterers at v (1 - (w / R)^2);
  // then the PSF, so that shear decorrelates the blood's speckle.
  if (sc->has_vessel) {
    const double c = std::cos(sc->theta), sn = std::sin(sc->theta);
    const double v_px = sc->vdir * sc->v_mm_s / cfg.mm_per_px;  // px/s at the centre line
    const double r = sc->vr_px;
    const int rows = sc->strip.rows;
    const int pad = static_cast<int>(std::ceil(3 * std::max(sc->psf_x, sc->psf_z))) + 1;
    cv::Mat moved(rows + 2 * pad, kStripLength + 2 * pad, CV_32FC2, cv::Scalar(0, 0));
    for (int k = 0; k < rows; ++k) {
      const double rel = std::min(1.0, std::abs(k - sc->half) / r);
      if (rel >= 1.0) continue;
      const double shift = v_px * (1 - rel * rel) * p.t;
      const double fl = std::floor(shift);
      const float f = static_cast<float>(shift - fl);
      // Linear interpolation of white scatterers, renormalised so that
      // their power does not depend on the fraction.
      const float norm = 1.0F / std::sqrt((1 - f) * (1 - f) + f * f);
      const long long s0 = static_cast<long long>(fl);
      const cv::Vec2f* in = sc->strip.ptr<cv::Vec2f>(k);
      cv::Vec2f* out = moved.ptr<cv::Vec2f>(k + pad) + pad;
      for (int u = 0; u < kStripLength; ++u) {
        long long a = (u - s0) % kStripLength;
        if (a < 0) a += kStripLength;
        const long long b = a == 0 ? kStripLength - 1 : a - 1;
        out[u] = (in[a] * (1 - f) + in[b] * f) * norm;
      }
      for (int u = 0; u < pad; ++u) {
        out[-1 - u] = out[kStripLength - 1 - u];
        out[kStripLength + u] = out[u];
      }
    }
    cv::Mat blurred;
    cv::GaussianBlur(moved, blurred, cv::Size(0, 0), sc->psf_x, sc->psf_z, cv::BORDER_CONSTANT);
    const cv::Mat blood = blurred(cv::Rect(pad, pad, kStripLength, rows));
    for (int i = 0; i < h; ++i) {
      auto* out = iq.ptr<cv::Vec2f>(i);
      const double szz = i + p.dz - sc->vy;
      for (int j = 0; j < w; ++j) {
        const double sxx = j + p.dx - sc->vx;
        const double wv = -sxx * sn + szz * c;
        if (std::abs(wv) > sc->half - 1) continue;
        const double u = sxx * c + szz * sn;
        double us = std::fmod(u, static_cast<double>(kStripLength));
        if (us < 0) us += kStripLength;
        const double ws = wv + sc->half;
        const int u0 = static_cast<int>(us), w0 = static_cast<int>(ws);
        const double fu = us - u0, fw = ws - w0;
        const int u1 = (u0 + 1) % kStripLength;
        const cv::Vec2f* r0 = blood.ptr<cv::Vec2f>(w0);
        const cv::Vec2f* r1 = blood.ptr<cv::Vec2f>(std::min(w0 + 1, rows - 1));
        const cv::Vec2f v = r0[u0] * static_cast<float>((1 - fu) * (1 - fw)) + r0[u1] * static_cast<float>(fu * (1 - fw)) +
                            r1[u0] * static_cast<float>((1 - fu) * fw) + r1[u1] * static_cast<float>(fu * fw);
        const int ci = std::clamp(static_cast<int>(std::lround(i + p.dz + sc->mz)), 0, sc->atten.rows - 1);
        const int cj = std::clamp(static_cast<int>(std::lround(j + p.dx + sc->mx)), 0, sc->atten.cols - 1);
        out[j] += v * sc->atten.at<float>(ci, cj);
      }
    }
  }

  // Electronic noise, envelope, log compression, the gain TGC leaves.
  Rng frng(key(cfg.seed, index, Stream::frame));
  const int nx = frng.range(0, kNoiseMargin - 1), ny = frng.range(0, kNoiseMargin - 1);
  cv::Mat power(h, w, CV_32F);
  for (int i = 0; i < h; ++i) {
    const auto* a = iq.ptr<cv::Vec2f>(i);
    const auto* n = noise_.ptr<cv::Vec2f>(i + ny) + nx;
    auto* o = power.ptr<float>(i);
    for (int j = 0; j < w; ++j) {
      const float re = a[j][0] + n[j][0], im = a[j][1] + n[j][1];
      o[j] = re * re + im * im + 1e-12F;
    }
  }
  cv::log(power, power);
  grey.create(h, w, CV_8U);
  const double dr = cfg.dynamic_range_db;
  const double per_ln = 10.0 / std::log(10.0);  // dB per natural log of power
  const double round_trip = 2 * cfg.attenuation * cfg.f0_mhz;  // dB/cm
  for (int i = 0; i < h; ++i) {
    const double depth_cm = i * cfg.mm_per_px / 10.0;
    const double gain = sc->gain_db - sc->tgc_error * round_trip * depth_cm;
    const double a = per_ln * 255.0 / dr;
    const double b = (gain - (kTopDb - dr)) * 255.0 / dr;
    power.row(i).convertTo(grey.row(i), CV_8U, a, b);
  }
  return truth_of(*sc, cfg, index, p);
}

UltrasoundTruth SyntheticUltrasound::render(std::uint64_t index, std::uint8_t* bgr, std::size_t stride) const {
  cv::Mat grey;
  UltrasoundTruth t = render_grey(index, grey);
  cv::Mat out(config_.height, config_.width, CV_8UC3, bgr, stride);
  cv::cvtColor(grey, out, cv::COLOR_GRAY2BGR);
  return t;
}

// -- ground truth as JSON --------------------------------------------------------

namespace {
double round_to(double v, double step) { return std::round(v / step) * step; }
}  // namespace

std::string to_json(const UltrasoundTruth& t) {
  nlohmann::json j;
  j["kind"] = "ultrasound";
  j["frame_index"] = t.frame_index;
  j["scene"] = t.scene;
  j["mm_per_px"] = t.mm_per_px;
  j["fps"] = t.fps;
  j["dynamic_range_db"] = t.dynamic_range_db;
  j["probe_x_mm"] = round_to(t.probe_x_mm, 1e-4);
  j["probe_z_mm"] = round_to(t.probe_z_mm, 1e-4);
  j["lesions"] = nlohmann::json::array();
  for (const LesionTruth& l : t.lesions) {
    nlohmann::json c = nlohmann::json::array();
    for (const auto& p : l.contour) {
      c.push_back(round_to(p.x, 0.01));
      c.push_back(round_to(p.y, 0.01));
    }
    j["lesions"].push_back({{"id", l.id},
                            {"echogenicity", l.echogenicity},
                            {"margin", l.margin},
                            {"shape", l.shape},
                            {"posterior", l.posterior},
                            {"contrast_db", round_to(l.contrast_db, 0.01)},
                            {"size_mm", round_to(l.size_mm, 1e-3)},
                            {"width_mm", round_to(l.width_mm, 1e-3)},
                            {"area_mm2", round_to(l.area_mm2, 1e-3)},
                            {"centre", {round_to(l.centre_x_px, 0.01), round_to(l.centre_y_px, 0.01)}},
                            {"contour", std::move(c)}});
  }
  j["vessels"] = nlohmann::json::array();
  for (const VesselTruth& v : t.vessels) {
    j["vessels"].push_back({{"id", v.id},
                            {"axis", {round_to(v.axis_x_px, 0.01), round_to(v.axis_y_px, 0.01)}},
                            {"angle_deg", round_to(v.angle_deg, 1e-3)},
                            {"radius_mm", round_to(v.radius_mm, 1e-3)},
                            {"velocity_mm_s", round_to(v.velocity_mm_s, 1e-3)},
                            {"direction", v.direction}});
  }
  return j.dump();
}

bool is_ultrasound_truth(std::string_view json) { return json.find("\"kind\":\"ultrasound\"") != std::string_view::npos; }

std::optional<UltrasoundTruth> parse_ultrasound_truth(std::string_view json) {
  const nlohmann::json j = nlohmann::json::parse(json.begin(), json.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object() || j.value("kind", "") != "ultrasound") return std::nullopt;
  try {
    UltrasoundTruth t;
    t.frame_index = j.at("frame_index").get<std::uint64_t>();
    t.scene = j.value("scene", std::uint64_t{0});
    t.mm_per_px = j.at("mm_per_px").get<double>();
    t.fps = j.value("fps", 30.0);
    t.dynamic_range_db = j.value("dynamic_range_db", 60.0);
    t.probe_x_mm = j.value("probe_x_mm", 0.0);
    t.probe_z_mm = j.value("probe_z_mm", 0.0);
    for (const auto& l : j.at("lesions")) {
      LesionTruth lt;
      lt.id = l.at("id").get<int>();
      lt.echogenicity = l.at("echogenicity").get<std::string>();
      lt.margin = l.value("margin", "");
      lt.shape = l.value("shape", "");
      lt.posterior = l.value("posterior", "");
      lt.contrast_db = l.value("contrast_db", 0.0);
      lt.size_mm = l.at("size_mm").get<double>();
      lt.width_mm = l.value("width_mm", 0.0);
      lt.area_mm2 = l.value("area_mm2", 0.0);
      lt.centre_x_px = l.at("centre").at(0).get<double>();
      lt.centre_y_px = l.at("centre").at(1).get<double>();
      const auto& c = l.at("contour");
      for (std::size_t i = 0; i + 1 < c.size(); i += 2) {
        lt.contour.emplace_back(c[i].get<float>(), c[i + 1].get<float>());
      }
      t.lesions.push_back(std::move(lt));
    }
    for (const auto& v : j.value("vessels", nlohmann::json::array())) {
      VesselTruth vt;
      vt.id = v.at("id").get<int>();
      vt.axis_x_px = v.at("axis").at(0).get<double>();
      vt.axis_y_px = v.at("axis").at(1).get<double>();
      vt.angle_deg = v.at("angle_deg").get<double>();
      vt.radius_mm = v.at("radius_mm").get<double>();
      vt.velocity_mm_s = v.at("velocity_mm_s").get<double>();
      vt.direction = v.value("direction", 1);
      t.vessels.push_back(vt);
    }
    return t;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

}  // namespace swarmflow::video
