// The synthetic inspection camera: determinism, the pairing of a station's
// two cameras, ground truth as JSON, URIs, and what a 1080p frame shows.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "inspection/part_drawings.hpp"
#include "video/synthetic_parts.hpp"

namespace swarmflow {
namespace {

using video::PartTruth;
using video::SyntheticParts;
using video::SyntheticPartsConfig;

SyntheticPartsConfig small_config(int station, int camera) {
  SyntheticPartsConfig c;
  c.seed = 41;
  c.width = 960;
  c.height = 540;
  c.mm_per_px = 0.2;
  c.station = station;
  c.camera = camera;
  c.defect_rate = 0.9;
  return c;
}

std::vector<std::uint8_t> render(const SyntheticParts& camera, std::uint64_t index, PartTruth* truth) {
  const auto& c = camera.config();
  const std::size_t stride = static_cast<std::size_t>(c.width) * 3 + 16;  // padded rows
  std::vector<std::uint8_t> pixels(stride * static_cast<std::size_t>(c.height), 0xAB);
  *truth = camera.render(index, pixels.data(), stride);
  return pixels;
}

TEST(SyntheticParts, SameSeedStationCameraIndexGivesTheSamePixels) {
  const SyntheticParts one(small_config(1, 0)), two(small_config(1, 0));
  PartTruth t1, t2;
  for (std::uint64_t index : {0U, 5U, 17U}) {
    const auto p1 = render(one, index, &t1);
    const auto p2 = render(two, index, &t2);
    EXPECT_EQ(p1, p2) << "frame " << index;
    EXPECT_EQ(video::to_json(t1), video::to_json(t2));
  }
  // Another index, camera or seed gives other pixels.
  const auto base = render(one, 3, &t1);
  EXPECT_NE(base, render(one, 4, &t2));
  EXPECT_NE(base, render(SyntheticParts(small_config(1, 1)), 3, &t2));
  auto other_seed = small_config(1, 0);
  other_seed.seed = 42;
  EXPECT_NE(base, render(SyntheticParts(other_seed), 3, &t2));
}

TEST(SyntheticParts, RenderLeavesRowPaddingAlone) {
  const SyntheticParts camera(small_config(0, 0));
  PartTruth t;
  const auto pixels = render(camera, 2, &t);
  const std::size_t stride = 960 * 3 + 16;
  for (std::size_t y = 0; y < 540; ++y) {
    for (std::size_t i = 960 * 3; i < stride; ++i) ASSERT_EQ(pixels[y * stride + i], 0xAB) << "row " << y;
  }
}

TEST(SyntheticParts, TwoCamerasOfAStationSeeTheSamePart) {
  const SyntheticParts cam0(small_config(2, 0)), cam1(small_config(2, 1));
  int poses_differ = 0;
  for (std::uint64_t index = 0; index < 12; ++index) {
    PartTruth a, b;
    render(cam0, index, &a);
    render(cam1, index, &b);
    EXPECT_EQ(a.part_id, b.part_id);
    EXPECT_EQ(a.part_id, 3'000'000U + index);
    EXPECT_EQ(a.part_id, video::synthetic_part_id(2, index));
    EXPECT_EQ(a.variant, b.variant);
    EXPECT_EQ(a.width_mm, b.width_mm);
    EXPECT_EQ(a.height_mm, b.height_mm);
    ASSERT_EQ(a.holes.size(), b.holes.size());
    for (std::size_t i = 0; i < a.holes.size(); ++i) {
      EXPECT_EQ(a.holes[i].diameter_mm, b.holes[i].diameter_mm);
      EXPECT_EQ(a.holes[i].missing, b.holes[i].missing);
    }
    ASSERT_EQ(a.defects.size(), b.defects.size());
    for (std::size_t i = 0; i < a.defects.size(); ++i) {
      EXPECT_EQ(a.defects[i].class_name, b.defects[i].class_name);
      EXPECT_EQ(a.defects[i].contrast, b.defects[i].contrast);
    }
    EXPECT_EQ(a.camera, 0);
    EXPECT_EQ(b.camera, 1);
    if (a.angle_deg != b.angle_deg || a.centre_x_px != b.centre_x_px) ++poses_differ;
    EXPECT_LE(std::abs(a.angle_deg), 4.0);
  }
  EXPECT_EQ(poses_differ, 12);
  // Another station machines other parts.
  PartTruth other;
  render(SyntheticParts(small_config(3, 0)), 0, &other);
  EXPECT_EQ(other.part_id, 4'000'000U);
}

TEST(SyntheticParts, DefectsOfEveryClassWithBoxesInsideTheFrame) {
  const SyntheticParts camera(small_config(0, 0));
  std::map<std::string, int> count;
  for (std::uint64_t index = 0; index < 40; ++index) {
    const PartTruth t = camera.truth(index);
    for (const auto& d : t.defects) {
      ++count[d.class_name];
      EXPECT_GE(d.x, 0.0F);
      EXPECT_GE(d.y, 0.0F);
      EXPECT_LE(d.x + d.width, 960.0F);
      EXPECT_LE(d.y + d.height, 540.0F);
      EXPECT_GE(std::min(d.width, d.height), 1.0F) << d.class_name;
    }
    int missing = 0;
    for (const auto& h : t.holes) missing += h.missing ? 1 : 0;
    EXPECT_LE(missing, 1);
  }
  for (const char* cls : {"scratch", "pit", "crack", "missing_hole"}) EXPECT_GT(count[cls], 5) << cls;
}

TEST(SyntheticParts, TruthWithoutRenderingIsTheRenderedTruth) {
  const SyntheticParts camera(small_config(1, 1));
  PartTruth rendered;
  render(camera, 9, &rendered);
  EXPECT_EQ(video::to_json(camera.truth(9)), video::to_json(rendered));
}

TEST(SyntheticParts, TruthJsonRoundTrip) {
  const SyntheticParts camera(small_config(0, 1));
  for (std::uint64_t index = 0; index < 10; ++index) {
    const PartTruth t = camera.truth(index);
    const std::string json = video::to_json(t);
    EXPECT_EQ(json.find('\n'), std::string::npos);
    const auto back = video::parse_truth(json);
    ASSERT_TRUE(back.has_value()) << json;
    EXPECT_EQ(video::to_json(*back), json);
    EXPECT_EQ(back->part_id, t.part_id);
    EXPECT_EQ(back->width_mm, t.width_mm);
    EXPECT_EQ(back->holes.size(), t.holes.size());
    ASSERT_EQ(back->defects.size(), t.defects.size());
    for (std::size_t i = 0; i < t.defects.size(); ++i) {
      EXPECT_EQ(back->defects[i].class_name, t.defects[i].class_name);
      EXPECT_EQ(back->defects[i].x, t.defects[i].x);
      EXPECT_EQ(back->defects[i].height, t.defects[i].height);
    }
  }
  EXPECT_FALSE(video::parse_truth("").has_value());
  EXPECT_FALSE(video::parse_truth("{not json").has_value());
  EXPECT_FALSE(video::parse_truth("[1, 2]").has_value());
  EXPECT_FALSE(video::parse_truth(R"({"station": 1})").has_value());  // no part_id
}

TEST(SyntheticParts, UriSetsEveryKeyAndRejectsUnknownOnes) {
  SyntheticPartsConfig c;
  std::string error;
  ASSERT_TRUE(video::parse_synthetic_uri(
      "synthetic://parts?seed=3&station=2&camera=1&width=640&height=360&mm_per_px=0.3&defect_rate=0.5&noise_sigma=2",
      &c, &error))
      << error;
  EXPECT_EQ(c.seed, 3U);
  EXPECT_EQ(c.station, 2);
  EXPECT_EQ(c.camera, 1);
  EXPECT_EQ(c.width, 640);
  EXPECT_EQ(c.height, 360);
  EXPECT_DOUBLE_EQ(c.mm_per_px, 0.3);
  EXPECT_DOUBLE_EQ(c.defect_rate, 0.5);
  EXPECT_DOUBLE_EQ(c.noise_sigma, 2.0);
  SyntheticPartsConfig d;
  EXPECT_TRUE(video::parse_synthetic_uri("synthetic://parts", &d, &error));
  EXPECT_EQ(d.seed, 7U);
  EXPECT_FALSE(video::parse_synthetic_uri("synthetic://parts?colour=red", &d, &error));
  EXPECT_NE(error.find("colour"), std::string::npos) << error;
  EXPECT_FALSE(video::parse_synthetic_uri("synthetic://parts?seed=x", &d, &error));
  EXPECT_FALSE(video::parse_synthetic_uri("synthetic://parts?defect_rate=2", &d, &error));
  EXPECT_FALSE(video::parse_synthetic_uri("synthetic://blobs", &d, &error));
}

TEST(SyntheticParts, VariantsAreTheInspectionDrawings) {
  const auto& variants = video::synthetic_part_variants();
  const auto& drawings = inspection::part_drawings();
  ASSERT_EQ(variants.size(), drawings.size());
  for (std::size_t i = 0; i < variants.size(); ++i) {
    EXPECT_EQ(variants[i].name, drawings[i].name);
    EXPECT_EQ(variants[i].width_mm, drawings[i].width_mm);
    EXPECT_EQ(variants[i].height_mm, drawings[i].height_mm);
    ASSERT_EQ(variants[i].holes.size(), drawings[i].holes.size());
    for (std::size_t k = 0; k < variants[i].holes.size(); ++k) {
      EXPECT_EQ(variants[i].holes[k].x_mm, drawings[i].holes[k].x_mm);
      EXPECT_EQ(variants[i].holes[k].y_mm, drawings[i].holes[k].y_mm);
      EXPECT_EQ(variants[i].holes[k].diameter_mm, drawings[i].holes[k].diameter_mm);
    }
  }
}

/// The median of `values` (which it reorders); 0 for none.
int median(std::vector<int>& values) {
  if (values.empty()) return 0;
  auto mid = values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2);
  std::nth_element(values.begin(), mid, values.end());
  return *mid;
}

TEST(SyntheticParts, RendersA1080pFrameOfThePlateItsTruthDescribes) {
  SyntheticPartsConfig c;  // the documented camera: 1920x1080 at 0.1 mm/px
  const SyntheticParts camera(c);
  constexpr int kW = 1920;
  constexpr int kH = 1080;
  const std::size_t stride = kW * 3;
  const auto& variants = video::synthetic_part_variants();
  std::map<std::string, int> variants_seen;
  // The first frames, and the first with a missing hole.
  std::vector<std::uint64_t> frames = {0, 1, 2, 3, 4, 5};
  for (std::uint64_t index = 6; index < 200 && frames.size() == 6; ++index) {
    const PartTruth t = camera.truth(index);
    if (std::any_of(t.holes.begin(), t.holes.end(), [](const video::HoleTruth& h) { return h.missing; })) {
      frames.push_back(index);
    }
  }
  ASSERT_EQ(frames.size(), 7U) << "no missing hole in 200 frames";
  for (std::uint64_t index : frames) {
    SCOPED_TRACE("frame " + std::to_string(index));
    // Filled with a colour the camera, which is grey, never writes: a pixel
    // left unwritten shows.
    std::vector<std::uint8_t> pixels(stride * kH);
    for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = i % 3 == 0 ? 1 : 200;
    const PartTruth t = camera.render(index, pixels.data(), stride);
    EXPECT_EQ(video::to_json(t), video::to_json(camera.truth(index)));
    EXPECT_EQ(t.frame_index, index);
    EXPECT_EQ(t.station, 0);
    EXPECT_EQ(t.camera, 0);
    EXPECT_EQ(t.part_id, video::synthetic_part_id(0, index));
    EXPECT_DOUBLE_EQ(t.mm_per_px, 0.1);
    const auto variant = std::find_if(variants.begin(), variants.end(),
                                      [&](const video::PartVariant& v) { return v.name == t.variant; });
    ASSERT_NE(variant, variants.end()) << t.variant;
    ++variants_seen[t.variant];
    EXPECT_NEAR(t.width_mm, variant->width_mm, 0.5);
    EXPECT_NEAR(t.height_mm, variant->height_mm, 0.5);
    ASSERT_EQ(t.holes.size(), variant->holes.size());

    std::size_t not_grey = 0;
    for (std::size_t i = 0; i < pixels.size(); i += 3) {
      not_grey += pixels[i] != pixels[i + 1] || pixels[i] != pixels[i + 2] ? 1 : 0;
    }
    EXPECT_EQ(not_grey, 0U) << "pixels left unwritten, or not grey";

    // Where the truth puts the plate, in pixels: a point (u, v) mm in the
    // plate's own frame is at centre + R(angle) (u, v) / mm_per_px.
    const double a = t.angle_deg * 3.14159265358979 / 180.0;
    const double ca = std::cos(a), sa = std::sin(a), scale = 1.0 / t.mm_per_px;
    auto grey_at = [&](double u_mm, double v_mm) {
      const long x = std::lround(t.centre_x_px + (u_mm * ca - v_mm * sa) * scale);
      const long y = std::lround(t.centre_y_px + (u_mm * sa + v_mm * ca) * scale);
      if (x < 0 || y < 0 || x >= kW || y >= kH) return -1;
      return static_cast<int>(pixels[static_cast<std::size_t>(y) * stride + static_cast<std::size_t>(x) * 3]);
    };
    const double hw = t.width_mm / 2, hh = t.height_mm / 2;
    // The plate lies wholly in the frame.
    for (double u : {-hw, hw}) {
      for (double v : {-hh, hh}) EXPECT_GE(grey_at(u, v), 0) << "corner (" << u << ", " << v << ") outside";
    }
    // Its metal, away from the edges and holes, against the belt around it.
    std::vector<int> metal;
    for (double u = -hw + 3; u <= hw - 3; u += 1.5) {
      for (double v = -hh + 3; v <= hh - 3; v += 1.5) {
        bool near_hole = false;
        for (const auto& h : t.holes) {
          near_hole = near_hole || std::hypot(u - h.x_mm, v - h.y_mm) < h.diameter_mm / 2 + 2;
        }
        if (!near_hole) metal.push_back(grey_at(u, v));
      }
    }
    std::vector<int> belt;
    for (double u = -hw - 40; u <= hw + 40; u += 2) {
      for (double v = -hh - 30; v <= hh + 30; v += 2) {
        if (std::abs(u) < hw + 3 && std::abs(v) < hh + 3) continue;
        if (const int g = grey_at(u, v); g >= 0) belt.push_back(g);
      }
    }
    ASSERT_GT(metal.size(), 1000U);
    ASSERT_GT(belt.size(), 1000U);
    const int metal_grey = median(metal);
    const int belt_grey = median(belt);
    EXPECT_GT(metal_grey, belt_grey + 60) << "the plate does not stand out from the belt";
    // Drilled holes show the belt; a missing one shows metal.
    const int between = (metal_grey + belt_grey) / 2;
    for (const auto& h : t.holes) {
      std::vector<int> inside;
      const double r = h.diameter_mm / 2 - 1;
      for (double du = -r; du <= r; du += 0.5) {
        for (double dv = -r; dv <= r; dv += 0.5) {
          if (std::hypot(du, dv) <= r) inside.push_back(grey_at(h.x_mm + du, h.y_mm + dv));
        }
      }
      if (h.missing) {
        EXPECT_GT(median(inside), between) << "missing hole at (" << h.x_mm << ", " << h.y_mm << ")";
      } else {
        EXPECT_LT(median(inside), between) << "hole at (" << h.x_mm << ", " << h.y_mm << ")";
      }
    }
  }
  EXPECT_GE(variants_seen.size(), 2U) << "every part of one variant";

  // The same seed renders the same bytes, in another instance too; the next
  // frame differs.
  std::vector<std::uint8_t> one(stride * kH), two(stride * kH), next(stride * kH);
  camera.render(3, one.data(), stride);
  SyntheticParts(c).render(3, two.data(), stride);
  camera.render(4, next.data(), stride);
  EXPECT_TRUE(one == two);
  EXPECT_FALSE(one == next);
}

}  // namespace
}  // namespace swarmflow
