// inspection.defects and inspection.measure under the conditions of a real
// line (issue 16): curved, two-toned scratches, branching cracks, irregular
// pits, specular glints, side light, strong vignetting, a light belt, and all
// of them at once. Each condition runs over three seeds at 1920x1080
// (0.1 mm/px), both cameras of a station, 8 parts a seed, and requires:
//  - precision and recall >= 0.95 for every class;
//  - every size within 0.1 mm of the truth;
//  - no wrong accept/reject verdict where the true size is more than 0.05 mm
//    from a tolerance limit;
//  - no frame flagged "cannot inspect" (these are inside the supported range).
// Outside the range (OutsideTheRange*), frames must be flagged, never judged.
//
// SWARMFLOW_OPTICS_DUMP=DIR writes every frame as a PNG, to look at.

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <opencv2/calib3d.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "inspection/defect_finder.hpp"
#include "inspection_test_support.hpp"
#include "vision/camera_calibration.hpp"
#include "vision/vision.hpp"

namespace swarmflow {
namespace {

using inspection_test::find_measurement;
using inspection_test::inspection_registry;
using inspection_test::render_frame;
using inspection_test::step_joined;
using inspection_test::Tally;
using testing::StageRunner;

struct Condition {
  const char* name;
  std::function<void(video::SyntheticPartsConfig&)> apply;
};

const std::vector<Condition>& conditions() {
  static const std::vector<Condition> all = {
      {"plain", [](video::SyntheticPartsConfig&) {}},
      {"curved_scratches", [](video::SyntheticPartsConfig& c) { c.curved = 0.1; }},
      {"two_toned_scratches",
       [](video::SyntheticPartsConfig& c) {
         c.two_tone = 1.0;
         c.side_light = 0.5;
       }},
      {"branching_cracks", [](video::SyntheticPartsConfig& c) { c.branching = 1.0; }},
      {"irregular_pits", [](video::SyntheticPartsConfig& c) { c.irregular_pits = true; }},
      {"glints", [](video::SyntheticPartsConfig& c) { c.glints = 3; }},
      {"hot_spots",
       [](video::SyntheticPartsConfig& c) {
         c.glints = 3;
         c.soft_glints = 1.0;
       }},
      {"side_light", [](video::SyntheticPartsConfig& c) { c.side_light = 0.6; }},
      {"vignetting", [](video::SyntheticPartsConfig& c) { c.vignette = 1.2; }},
      {"light_belt", [](video::SyntheticPartsConfig& c) { c.belt_level = 110; }},
      {"combined",
       [](video::SyntheticPartsConfig& c) {
         c.curved = 0.1;
         c.two_tone = 0.5;
         c.branching = 0.5;
         c.irregular_pits = true;
         c.glints = 2;
         c.side_light = 0.5;
         c.vignette = 0.8;
         c.belt_level = 100;
       }},
  };
  return all;
}

constexpr int kParts = 12;  ///< parts a seed
/// Seeds 31-33; SWARMFLOW_OPTICS_SEED0=N runs N, N+1, N+2 instead (to check
/// that the figures hold beyond the seeds the tests fix).
std::vector<std::uint64_t> seeds() {
  const char* first = std::getenv("SWARMFLOW_OPTICS_SEED0");
  const std::uint64_t s = first != nullptr ? std::strtoull(first, nullptr, 10) : 31;
  return {s, s + 1, s + 2};
}

video::SyntheticPartsConfig camera_config(const Condition& condition, std::uint64_t seed, int camera) {
  video::SyntheticPartsConfig c;
  c.seed = seed;
  c.station = 0;
  c.camera = camera;
  c.width = 1920;
  c.height = 1080;
  c.mm_per_px = 0.1;
  c.defect_rate = 1.0;
  condition.apply(c);
  return c;
}

std::unique_ptr<StageRunner> started(const char* type, double mm_per_px) {
  auto runner = std::make_unique<StageRunner>(inspection_registry(), type, "stage");
  EXPECT_TRUE(runner->set("mm_per_px", mm_per_px).ok());
  const Status s = runner->start();
  EXPECT_TRUE(s.ok()) << s.message();
  return runner;
}

struct Outcome {
  std::map<std::string, Tally> tallies;
  double size_error_max = 0;
  int sizes = 0;
  int wrong_verdicts = 0;
  int judged_verdicts = 0;
  int frames = 0;
  int frames_not_inspected = 0;
  int parts_not_inspected = 0;
  int glint_hits = 0;  ///< detections whose centre lies on a glint
};

bool on_glint(const schema::Defect& d, const video::PartTruth& truth) {
  if (d.box() == nullptr) return false;
  const float cx = d.box()->x() + d.box()->width() / 2, cy = d.box()->y() + d.box()->height() / 2;
  for (const auto& g : truth.glints) {
    if (cx >= g.x && cx <= g.x + g.width && cy >= g.y && cy <= g.y + g.height) return true;
  }
  return false;
}

void judge_sizes(const schema::VisionResults& r, const video::PartTruth& truth, Outcome* o) {
  auto judge = [&](const schema::Measurement* m, double true_value) {
    if (m == nullptr) {
      ADD_FAILURE() << "a size is missing for part " << truth.part_id;
      return;
    }
    o->size_error_max = std::max(o->size_error_max, std::abs(m->value() - true_value));
    if (std::abs(m->value() - true_value) > 0.1) {
      std::printf("  part %llu: %s %.3f mm, true %.3f mm\n", static_cast<unsigned long long>(truth.part_id),
                  m->name()->c_str(), m->value(), true_value);
    }
    ++o->sizes;
    const double margin = std::abs(true_value - m->nominal()) - m->tolerance();
    if (std::abs(margin) > 0.05) {
      ++o->judged_verdicts;
      if (m->in_tolerance() != (margin < 0)) ++o->wrong_verdicts;
    }
  };
  judge(find_measurement(r, "width"), truth.width_mm);
  judge(find_measurement(r, "height"), truth.height_mm);
  for (std::size_t k = 0; k < truth.holes.size(); ++k) {
    if (truth.holes[k].missing) continue;
    judge(find_measurement(r, "hole_" + std::to_string(k) + "_diameter"), truth.holes[k].diameter_mm);
  }
}

Outcome run(const Condition& condition) {
  Outcome o;
  auto detect = started("inspection.defects", 0.1);
  auto measure = started("inspection.measure", 0.1);
  const char* dump = std::getenv("SWARMFLOW_OPTICS_DUMP");
  for (const std::uint64_t seed : seeds()) {
    const video::SyntheticParts cam0(camera_config(condition, seed, 0));
    const video::SyntheticParts cam1(camera_config(condition, seed, 1));
    for (int i = 0; i < kParts; ++i) {
      video::PartTruth truth[2];
      const Envelope frames[2] = {render_frame(cam0, static_cast<std::uint64_t>(i), true, &truth[0]),
                                  render_frame(cam1, static_cast<std::uint64_t>(i), true, &truth[1])};
      for (int cam = 0; cam < 2 && dump != nullptr; ++cam) {
        const auto* f = frames[cam].as<schema::Frame>();
        const cv::Mat bgr(static_cast<int>(f->height()), static_cast<int>(f->width()), CV_8UC3,
                          const_cast<std::uint8_t*>(f->pixels()->data()), f->stride());
        cv::imwrite(std::string(dump) + "/" + condition.name + "_s" + std::to_string(seed) + "_f" +
                        std::to_string(i) + "_c" + std::to_string(cam) + ".png",
                    bgr);
      }
      for (int cam = 0; cam < 2; ++cam) {
        const std::size_t before = detect->output("results").size();
        const Status s = detect->feed("frames", frames[cam]);
        EXPECT_TRUE(s.ok()) << s.message();
        if (detect->output("results").size() != before + 1) {
          ADD_FAILURE() << "no result";
          continue;
        }
        const auto* r = detect->output("results").back().as<schema::VisionResults>();
        ++o.frames;
        if (r->cannot_inspect() != nullptr && r->cannot_inspect()->size() > 0) {
          ++o.frames_not_inspected;
          std::printf("  %s seed %llu frame %d camera %d: cannot inspect: %s\n", condition.name,
                      static_cast<unsigned long long>(seed), i, cam, r->cannot_inspect()->c_str());
        }
        for (const auto* d : *r->defects()) o.glint_hits += on_glint(*d, truth[cam]) ? 1 : 0;
        inspection_test::tally(*r, truth[cam], &o.tallies);
      }
      Status s;
      const auto out = step_joined(*measure, &frames[0], &frames[1], false, &s);
      EXPECT_TRUE(s.ok()) << s.message();
      if (out.size() != 1) {
        ADD_FAILURE() << "no measurement";
        continue;
      }
      const auto* r = out[0].as<schema::VisionResults>();
      if (r->cannot_inspect() != nullptr && r->cannot_inspect()->size() > 0) {
        ++o.parts_not_inspected;
        std::printf("  %s seed %llu part %d: cannot measure: %s\n", condition.name,
                    static_cast<unsigned long long>(seed), i, r->cannot_inspect()->c_str());
        continue;
      }
      judge_sizes(*r, truth[0], &o);
    }
  }
  return o;
}

void print(const Condition& c, const Outcome& o) {
  std::printf("[optics] %-20s frames %d (not inspected %d), parts not measured %d\n", c.name, o.frames,
              o.frames_not_inspected, o.parts_not_inspected);
  std::printf("  %-13s %6s %4s %4s %4s %9s %7s\n", "class", "truth", "TP", "FP", "FN", "precision", "recall");
  for (const auto& [cls, t] : o.tallies) {
    std::printf("  %-13s %6d %4d %4d %4d %9.3f %7.3f\n", cls.empty() ? "(none)" : cls.c_str(), t.truths,
                t.true_positives, t.false_positives, t.false_negatives, t.precision(), t.recall());
  }
  std::printf("  sizes %d, largest error %.4f mm, verdicts judged %d, wrong %d, detections on glints %d\n", o.sizes,
              o.size_error_max, o.judged_verdicts, o.wrong_verdicts, o.glint_hits);
  std::fflush(stdout);
}

class OpticsCondition : public ::testing::TestWithParam<std::size_t> {};

TEST_P(OpticsCondition, MeetsTheTargets) {
  const Condition& c = conditions()[GetParam()];
  const Outcome o = run(c);
  print(c, o);
  for (const char* cls : {"scratch", "pit", "crack", "missing_hole"}) {
    ASSERT_TRUE(o.tallies.count(cls)) << cls;
    const Tally& t = o.tallies.at(cls);
    EXPECT_GE(t.truths, 8) << cls;
    EXPECT_GE(t.precision(), 0.95) << cls;
    EXPECT_GE(t.recall(), 0.95) << cls;
  }
  for (const auto& [cls, t] : o.tallies) {
    EXPECT_TRUE(cls == "scratch" || cls == "pit" || cls == "crack" || cls == "missing_hole") << cls;
  }
  EXPECT_EQ(o.frames_not_inspected, 0);
  EXPECT_EQ(o.parts_not_inspected, 0);
  EXPECT_EQ(o.glint_hits, 0);
  EXPECT_GE(o.sizes, 100);
  EXPECT_LE(o.size_error_max, 0.1);
  EXPECT_EQ(o.wrong_verdicts, 0);
}

/// Outside the supported range every frame and part is either inspected
/// right or flagged, never judged wrong: flagged results carry no defects and
/// no measurements.
Outcome run_outside(const std::function<void(video::SyntheticPartsConfig&)>& apply, int parts) {
  const Condition condition{"outside", apply};
  Outcome o;
  auto detect = started("inspection.defects", 0.1);
  auto measure = started("inspection.measure", 0.1);
  const video::SyntheticParts cam0(camera_config(condition, 71, 0));
  const video::SyntheticParts cam1(camera_config(condition, 71, 1));
  for (int i = 0; i < parts; ++i) {
    video::PartTruth truth[2];
    const Envelope frames[2] = {render_frame(cam0, static_cast<std::uint64_t>(i), true, &truth[0]),
                                render_frame(cam1, static_cast<std::uint64_t>(i), true, &truth[1])};
    for (int cam = 0; cam < 2; ++cam) {
      EXPECT_TRUE(detect->feed("frames", frames[cam]).ok());
      const auto* r = detect->output("results").back().as<schema::VisionResults>();
      ++o.frames;
      if (r->cannot_inspect() != nullptr && r->cannot_inspect()->size() > 0) {
        ++o.frames_not_inspected;
        EXPECT_EQ(r->defects()->size(), 0U) << "a flagged frame gives no defects";
        continue;
      }
      inspection_test::tally(*r, truth[cam], &o.tallies);
    }
    Status s;
    const auto out = step_joined(*measure, &frames[0], &frames[1], false, &s);
    EXPECT_TRUE(s.ok()) << s.message();
    if (out.size() != 1) continue;
    const auto* r = out[0].as<schema::VisionResults>();
    if (r->cannot_inspect() != nullptr && r->cannot_inspect()->size() > 0) {
      ++o.parts_not_inspected;
      EXPECT_TRUE(r->measurements() == nullptr || r->measurements()->size() == 0);
      continue;
    }
    judge_sizes(*r, truth[0], &o);
  }
  return o;
}

TEST(OpticsOutsideTheRange, BeltAsLightAsTheMetalIsFlaggedNeverJudged) {
  // A belt of grey 150 against metal of 150-178: a reflectance ratio of
  // 1.19 at most, below the 1.25 the outline needs.
  const Outcome o = run_outside([](video::SyntheticPartsConfig& c) { c.belt_level = 150; }, 6);
  std::printf("[optics] belt at 150: frames %d, flagged %d; parts flagged %d\n", o.frames, o.frames_not_inspected,
              o.parts_not_inspected);
  EXPECT_EQ(o.frames_not_inspected, o.frames);
  EXPECT_EQ(o.parts_not_inspected, 6);
}

TEST(OpticsOutsideTheRange, GlareOverMuchOfThePartIsFlaggedNeverJudged) {
  // Up to 8 glints a part: where they leave more than 15 % of the surface
  // out, the frame is flagged; the others are inspected as usual.
  const Outcome o = run_outside([](video::SyntheticPartsConfig& c) { c.glints = 8; }, 8);
  std::printf("[optics] up to 8 glints: frames %d, flagged %d\n", o.frames, o.frames_not_inspected);
  EXPECT_GT(o.frames_not_inspected, 0);
  EXPECT_LT(o.frames_not_inspected, o.frames);
  for (const auto& [cls, t] : o.tallies) EXPECT_GE(t.precision(), 0.95) << cls;
  EXPECT_LE(o.size_error_max, 0.1);
  EXPECT_EQ(o.wrong_verdicts, 0);
}

TEST(OpticsOutsideTheRange, LightTooUnevenIsFlaggedNeverJudged) {
  // Side light and vignetting that leave part of the plate with less than
  // 15 % of the light of its brightest part.
  const Outcome o = run_outside(
      [](video::SyntheticPartsConfig& c) {
        c.side_light = 1.5;
        c.vignette = 2.0;
      },
      6);
  std::printf("[optics] side light 1.5, vignette 2: frames %d, flagged %d; parts measured %d\n", o.frames,
              o.frames_not_inspected, 6 - o.parts_not_inspected);
  EXPECT_GT(o.frames_not_inspected, o.frames / 2);
  for (const auto& [cls, t] : o.tallies) EXPECT_GE(t.precision(), 0.95) << cls;
  EXPECT_EQ(o.wrong_verdicts, 0);
}

// -- hot spots that do not saturate ------------------------------------------------
// A glint whose core stays below clipping is found by its brightness and
// shape alone, and left out with its halo as a saturating one is: every
// glint of the truth is found, nothing else is taken for one, and the
// surface left out stays small.
TEST(OpticsHotSpots, AreFoundAsGlintsAndLeftOut) {
  const Condition hot{"hot", [](video::SyntheticPartsConfig& c) {
                        c.glints = 3;
                        c.soft_glints = 1.0;
                      }};
  ::swarmflow::inspection::DefectFinderParams params;
  params.mm_per_px = 0.1;
  int truths = 0, found = 0, saturated = 0, frames = 0;
  double glare = 0;
  for (const std::uint64_t seed : {31, 32}) {
    const video::SyntheticParts camera(camera_config(hot, seed, 0));
    for (int i = 0; i < 6; ++i) {
      cv::Mat bgr(1080, 1920, CV_8UC3), grey;
      const video::PartTruth truth = camera.render(static_cast<std::uint64_t>(i), bgr.data, bgr.step);
      cv::cvtColor(bgr, grey, cv::COLOR_BGR2GRAY);
      saturated += cv::countNonZero(grey >= 250);
      const auto finding = ::swarmflow::inspection::find_defects(grey, params);
      EXPECT_TRUE(finding.cannot_inspect.empty()) << finding.cannot_inspect;
      truths += static_cast<int>(truth.glints.size());
      found += finding.glints;
      glare = std::max(glare, finding.glare_fraction);
      ++frames;
    }
  }
  std::printf("[optics] hot spots below clipping: %d frames, %d in the truth, %d found as glints, %d saturated "
              "pixels, at most %.1f %% of the surface left out\n",
              frames, truths, found, saturated, 100 * glare);
  EXPECT_EQ(saturated, 0) << "the hot spots must stay below clipping";
  EXPECT_GE(truths, 12);
  EXPECT_EQ(found, truths);
  EXPECT_LT(glare, 0.15);
}

TEST(OpticsHotSpots, SoftGlintsKeyIsReadAndChecked) {
  video::SyntheticPartsConfig c;
  std::string error;
  ASSERT_TRUE(video::parse_synthetic_uri("synthetic://parts?glints=2&soft_glints=0.5", &c, &error)) << error;
  EXPECT_EQ(c.glints, 2);
  EXPECT_DOUBLE_EQ(c.soft_glints, 0.5);
  EXPECT_FALSE(video::parse_synthetic_uri("synthetic://parts?soft_glints=2", &c, &error));
  EXPECT_NE(error.find("soft_glints"), std::string::npos) << error;
}

// With plain glints off, the plain camera's frames have no hot spot: none is
// found where there is none.
TEST(OpticsHotSpots, NoneFoundWithoutGlints) {
  ::swarmflow::inspection::DefectFinderParams params;
  params.mm_per_px = 0.1;
  int found = 0;
  for (const auto& condition : conditions()) {
    if (std::string(condition.name) != "plain" && std::string(condition.name) != "combined" &&
        std::string(condition.name) != "two_toned_scratches") {
      continue;
    }
    video::SyntheticPartsConfig c = camera_config(condition, 31, 0);
    c.glints = 0;
    const video::SyntheticParts camera(c);
    for (int i = 0; i < 6; ++i) {
      cv::Mat bgr(1080, 1920, CV_8UC3), grey;
      camera.render(static_cast<std::uint64_t>(i), bgr.data, bgr.step);
      cv::cvtColor(bgr, grey, cv::COLOR_BGR2GRAY);
      found += ::swarmflow::inspection::find_defects(grey, params).glints;
    }
  }
  EXPECT_EQ(found, 0);
}

// -- faint scratches, followed along their length --------------------------------------
// Under side light 0.6 the faintest scratches (contrast -20 to -28) in the
// dim half of the plate break into pieces below the thresholds: found pixel
// by pixel, seeds 41-43 and 81-83 missed these. Followed along their own
// direction, every one is found as one scratch. And the brushed texture,
// which a line filter also follows for several millimetres, gives none.

const Condition& condition_named(const std::string& name) {
  for (const auto& c : conditions()) {
    if (name == c.name) return c;
  }
  throw std::invalid_argument(name);
}

bool same_place(const cv::Rect2f& d, const video::DefectTruth& t) {
  const cv::Rect2f truth(t.x, t.y, t.width, t.height);
  const float inter = (d & truth).area(), uni = d.area() + truth.area() - inter;
  if (uni > 0 && inter / uni >= 0.3F) return true;
  const cv::Point2f c(d.x + d.width / 2, d.y + d.height / 2);
  return c.x >= t.x - 4 && c.x <= t.x + t.width + 4 && c.y >= t.y - 4 && c.y <= t.y + t.height + 4;
}

struct FrameTally {
  int scratches = 0, found = 0, false_scratches = 0;
};

/// Frames (seed, camera, index) of `condition`: how many true scratches,
/// how many found as scratches, and scratches found on no true one.
FrameTally scratches_in(const std::string& condition, const std::vector<std::array<int, 3>>& frames,
                        ::swarmflow::inspection::DefectFinderParams params = {}) {
  params.mm_per_px = 0.1;
  FrameTally tally;
  for (const auto& [seed, cam, index] : frames) {
    const video::SyntheticParts camera(camera_config(condition_named(condition), static_cast<std::uint64_t>(seed), cam));
    cv::Mat bgr(1080, 1920, CV_8UC3), grey;
    const video::PartTruth truth = camera.render(static_cast<std::uint64_t>(index), bgr.data, bgr.step);
    cv::cvtColor(bgr, grey, cv::COLOR_BGR2GRAY);
    const auto finding = ::swarmflow::inspection::find_defects(grey, params);
    EXPECT_TRUE(finding.cannot_inspect.empty()) << finding.cannot_inspect;
    std::vector<bool> taken(truth.defects.size(), false);
    for (const auto& d : finding.defects) {
      if (d.class_name != "scratch") continue;
      bool hit = false;
      for (std::size_t k = 0; k < truth.defects.size() && !hit; ++k) {
        if (taken[k] || truth.defects[k].class_name != "scratch" || !same_place(d.box, truth.defects[k])) continue;
        hit = taken[k] = true;
        ++tally.found;
      }
      if (!hit) {
        ++tally.false_scratches;
        std::printf("  %s seed %d camera %d frame %d: a scratch at %.0f,%.0f %.0fx%.0f on no true one\n",
                    condition.c_str(), seed, cam, index, d.box.x, d.box.y, d.box.width, d.box.height);
      }
    }
    for (std::size_t k = 0; k < truth.defects.size(); ++k) {
      if (truth.defects[k].class_name != "scratch") continue;
      ++tally.scratches;
      if (!taken[k]) {
        std::printf("  %s seed %d camera %d frame %d: scratch at %.0f,%.0f (contrast %.0f) missed\n", condition.c_str(),
                    seed, cam, index, truth.defects[k].x, truth.defects[k].y, truth.defects[k].contrast);
      }
    }
  }
  return tally;
}

TEST(OpticsFaintScratches, AreFollowedAlongTheirLengthUnderSideLight) {
  const FrameTally t = scratches_in("side_light", {{41, 0, 3}, {41, 1, 3}, {81, 1, 4}, {83, 0, 10}, {83, 1, 11}});
  std::printf("[optics] faint scratches under side light 0.6: %d of %d found, %d false\n", t.found, t.scratches,
              t.false_scratches);
  EXPECT_GE(t.scratches, 5);
  EXPECT_EQ(t.found, t.scratches);
  EXPECT_EQ(t.false_scratches, 0);
  // Found pixel by pixel only (no stroke followed passes), they are missed.
  ::swarmflow::inspection::DefectFinderParams untraced;
  untraced.min_trace_contrast = 100;
  const FrameTally before =
      scratches_in("side_light", {{41, 0, 3}, {41, 1, 3}, {81, 1, 4}, {83, 0, 10}, {83, 1, 11}}, untraced);
  EXPECT_LE(before.found, before.scratches - 5);
}

TEST(OpticsFaintScratches, BrushedTextureFollowedIsNoScratch) {
  // Frames where the metal's brushed streaks are followed for 5-10 mm
  // (ridge contrast 2.4-2.8 local sigmas, 3.6-4.9 % of the level), and one
  // under side light where a streak followed in the dim part came to 5.7 %.
  const std::vector<std::array<int, 3>> plain = {{41, 0, 0}, {41, 0, 6}, {41, 1, 11}, {42, 1, 11}};
  const std::vector<std::array<int, 3>> side = {{31, 1, 8}};
  FrameTally t = scratches_in("plain", plain);
  const FrameTally u = scratches_in("side_light", side);
  t.scratches += u.scratches;
  t.found += u.found;
  t.false_scratches += u.false_scratches;
  std::printf("[optics] brushed texture: %d of %d scratches found, %d false\n", t.found, t.scratches,
              t.false_scratches);
  EXPECT_EQ(t.false_scratches, 0);
  EXPECT_EQ(t.found, t.scratches);
  // With the contrast asked of a stroke followed down at the low
  // threshold's floor (3 %), the evidence measured against the surface
  // around still keeps the streaks out; without it they are scratches.
  ::swarmflow::inspection::DefectFinderParams floor;
  floor.min_trace_contrast = 3.0;
  EXPECT_EQ(scratches_in("plain", plain, floor).false_scratches, 0);
  ::swarmflow::inspection::DefectFinderParams credulous = floor;
  credulous.trace_evidence = 0;
  EXPECT_GE(scratches_in("plain", plain, credulous).false_scratches, 2);
}

// -- lens distortion at 1080p -------------------------------------------------------
// Each camera is calibrated on a short video of its own checkerboard (same
// lens), vision.undistort flattens its frames, and both stages take the
// scale from the calibration. The truth's boxes are where the lens shows the
// defects, so they are carried through the same undistortion before the
// detections are scored.

const Registry& vision_registry() {
  static const Registry registry = [] {
    Registry r;
    register_vision_stages(r);
    return r;
  }();
  return registry;
}

/// Calibrates camera `camera` of lens `k1` at 1080p on `frames` views of its
/// target and writes the file; returns its path.
std::string calibrated_lens(double k1, int camera, vision::Calibration* out) {
  video::SyntheticPartsConfig c;
  c.scene = video::SyntheticScene::checkerboard;
  c.seed = 17;
  c.camera = camera;
  c.width = 1920;
  c.height = 1080;
  c.mm_per_px = 0.1;
  c.k1 = k1;
  const video::SyntheticParts target(c);
  vision::CameraCalibrator calibrator(vision::CalibrationOptions{});
  cv::Mat bgr(c.height, c.width, CV_8UC3), grey;
  for (int i = 0; i < 12; ++i) {
    target.render(static_cast<std::uint64_t>(i), bgr.data, bgr.step[0]);
    cv::cvtColor(bgr, grey, cv::COLOR_BGR2GRAY);
    calibrator.add(grey, i);
  }
  std::string reason;
  EXPECT_TRUE(calibrator.calibrate(out, &reason)) << reason;
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("swarmflow_optics_lens_" + std::to_string(k1) + "_" + std::to_string(camera) + ".yaml"))
                               .string();
  EXPECT_TRUE(vision::write_calibration(path, *out, &reason)) << reason;
  std::printf("[optics] lens k1 %+.3f camera %d: calibrated corner distortion %+.5f, rms %.3f px, %d of %d views, "
              "mm_per_px %.5f\n",
              k1, camera, out->corner_distortion, out->rms_px, out->views_used, out->views_seen, out->mm_per_px);
  return path;
}

/// `truth` with its defect and glint boxes carried through the undistortion
/// of `calibration` (vision.undistort keeps the camera matrix).
video::PartTruth undistorted_truth(video::PartTruth truth, const vision::Calibration& calibration) {
  auto flat = [&](float& x, float& y, float& w, float& h) {
    std::vector<cv::Point2f> edge;
    for (int k = 0; k <= 8; ++k) {
      const float t = static_cast<float>(k) / 8;
      edge.emplace_back(x + t * w, y);
      edge.emplace_back(x + t * w, y + h);
      edge.emplace_back(x, y + t * h);
      edge.emplace_back(x + w, y + t * h);
    }
    std::vector<cv::Point2f> out;
    cv::undistortPoints(edge, out, calibration.camera_matrix, calibration.distortion, cv::noArray(),
                        calibration.camera_matrix);
    const cv::Rect2f box = cv::boundingRect(out);
    x = box.x;
    y = box.y;
    w = box.width;
    h = box.height;
  };
  for (auto& d : truth.defects) flat(d.x, d.y, d.width, d.height);
  for (auto& g : truth.glints) flat(g.x, g.y, g.width, g.height);
  return truth;
}

Outcome run_lens(double k1) {
  vision::Calibration calibration[2];
  const std::string paths[2] = {calibrated_lens(k1, 0, &calibration[0]), calibrated_lens(k1, 1, &calibration[1])};
  Outcome o;
  std::unique_ptr<StageRunner> flat[2], detect[2];
  for (int cam = 0; cam < 2; ++cam) {
    flat[cam] = std::make_unique<StageRunner>(vision_registry(), "vision.undistort", "flat");
    EXPECT_TRUE(flat[cam]->set("calibration", paths[cam]).ok());
    EXPECT_TRUE(flat[cam]->start().ok());
    detect[cam] = started("inspection.defects", calibration[cam].mm_per_px);
  }
  auto measure = std::make_unique<StageRunner>(inspection_registry(), "inspection.measure", "stage");
  EXPECT_TRUE(measure->set("calibration", paths[0]).ok());
  EXPECT_TRUE(measure->set("calibration_b", paths[1]).ok());
  const Status started_measure = measure->start();
  EXPECT_TRUE(started_measure.ok()) << started_measure.message();
  const Condition lens{"lens", [k1](video::SyntheticPartsConfig& c) { c.k1 = k1; }};
  constexpr std::uint64_t kSeed = 37;
  const video::SyntheticParts cameras[2] = {video::SyntheticParts(camera_config(lens, kSeed, 0)),
                                            video::SyntheticParts(camera_config(lens, kSeed, 1))};
  for (int i = 0; i < 8; ++i) {
    video::PartTruth truth[2];
    Envelope flattened[2];
    for (int cam = 0; cam < 2; ++cam) {
      const Envelope raw = render_frame(cameras[cam], static_cast<std::uint64_t>(i), true, &truth[cam]);
      EXPECT_TRUE(flat[cam]->feed("frames", raw).ok());
      flattened[cam] = flat[cam]->output("frames").back();
      if (const char* dump = std::getenv("SWARMFLOW_OPTICS_DUMP")) {
        const auto* f = flattened[cam].as<schema::Frame>();
        const cv::Mat bgr(static_cast<int>(f->height()), static_cast<int>(f->width()), CV_8UC3,
                          const_cast<std::uint8_t*>(f->pixels()->data()), f->stride());
        cv::imwrite(std::string(dump) + "/lens_" + std::to_string(k1) + "_f" + std::to_string(i) + "_c" +
                        std::to_string(cam) + ".png",
                    bgr);
      }
      EXPECT_TRUE(detect[cam]->feed("frames", flattened[cam]).ok());
      const auto* r = detect[cam]->output("results").back().as<schema::VisionResults>();
      ++o.frames;
      if (r->cannot_inspect() != nullptr && r->cannot_inspect()->size() > 0) ++o.frames_not_inspected;
      const video::PartTruth flat_truth = undistorted_truth(truth[cam], calibration[cam]);
      std::map<std::string, Tally> here;
      inspection_test::tally(*r, flat_truth, &here);
      for (const auto& [cls, t] : here) {
        if (t.false_positives == 0 && t.false_negatives == 0) continue;
        std::printf("  frame %d camera %d: %s %d false, %d missed; found:", i, cam, cls.c_str(), t.false_positives,
                    t.false_negatives);
        for (const auto* d : *r->defects()) {
          std::printf(" %s@%.0f,%.0f", d->class_name()->c_str(), d->box()->x(), d->box()->y());
        }
        std::printf("; truth:");
        for (const auto& d : flat_truth.defects) std::printf(" %s@%.0f,%.0f", d.class_name.c_str(), d.x, d.y);
        std::printf("\n");
      }
      inspection_test::tally(*r, flat_truth, &o.tallies);
    }
    Status s;
    const auto out = step_joined(*measure, &flattened[0], &flattened[1], false, &s);
    EXPECT_TRUE(s.ok()) << s.message();
    if (out.size() != 1) {
      ADD_FAILURE() << "no measurement";
      continue;
    }
    const auto* r = out[0].as<schema::VisionResults>();
    if (r->cannot_inspect() != nullptr && r->cannot_inspect()->size() > 0) {
      ++o.parts_not_inspected;
      continue;
    }
    judge_sizes(*r, truth[0], &o);
  }
  for (const auto& p : paths) std::filesystem::remove(p);
  return o;
}

void expect_lens_targets(double k1, const char* name) {
  const Outcome o = run_lens(k1);
  print(Condition{name, nullptr}, o);
  for (const char* cls : {"scratch", "pit", "crack", "missing_hole"}) {
    ASSERT_TRUE(o.tallies.count(cls)) << cls;
    const Tally& t = o.tallies.at(cls);
    EXPECT_GE(t.truths, 4) << cls;
    EXPECT_GE(t.precision(), 0.95) << cls;
    EXPECT_GE(t.recall(), 0.95) << cls;
  }
  EXPECT_EQ(o.frames_not_inspected, 0);
  EXPECT_EQ(o.parts_not_inspected, 0);
  EXPECT_GE(o.sizes, 50);
  EXPECT_LE(o.size_error_max, 0.1);
  EXPECT_EQ(o.wrong_verdicts, 0);
}

TEST(OpticsLens, TwoPercentBarrelCalibratedAndUndistortedMeetsTheTargets) {
  expect_lens_targets(-0.02, "lens_barrel_2pct");
}

TEST(OpticsLens, TwoPercentPincushionCalibratedAndUndistortedMeetsTheTargets) {
  expect_lens_targets(0.02, "lens_pincushion_2pct");
}

INSTANTIATE_TEST_SUITE_P(Inspection, OpticsCondition, ::testing::Range<std::size_t>(0, conditions().size()),
                         [](const ::testing::TestParamInfo<std::size_t>& info) {
                           return std::string(conditions()[info.param].name);
                         });

}  // namespace
}  // namespace swarmflow

namespace swarmflow {
namespace {

// Tuning aid: every region the finder measured in the frames of one
// condition, with its features and the true defect it lies on.
// --gtest_also_run_disabled_tests --gtest_filter='*DISABLED_Features*'
// SWARMFLOW_OPTICS_CONDITION=name selects the condition, and
// SWARMFLOW_OPTICS_FRAME=seed,camera,frame one frame of it;
// SWARMFLOW_OPTICS_ALL=1 also lists texture regions on no defect.
TEST(OpticsConditionTuning, DISABLED_Features) {
  const char* wanted = std::getenv("SWARMFLOW_OPTICS_CONDITION");
  const char* only = std::getenv("SWARMFLOW_OPTICS_FRAME");  // seed,camera,frame
  for (const Condition& c : conditions()) {
    if (wanted != nullptr && std::string(wanted) != c.name) continue;
    ::swarmflow::inspection::DefectFinderParams params;
    params.mm_per_px = 0.1;
    params.keep_rejected = true;
    for (const std::uint64_t seed : seeds()) {
      for (int cam = 0; cam < 2; ++cam) {
        const video::SyntheticParts camera(camera_config(c, seed, cam));
        for (int i = 0; i < kParts; ++i) {
          if (only != nullptr && (std::to_string(seed) + "," + std::to_string(cam) + "," + std::to_string(i)) != only) {
            continue;
          }
          cv::Mat bgr(1080, 1920, CV_8UC3), grey;
          const video::PartTruth truth = camera.render(static_cast<std::uint64_t>(i), bgr.data, bgr.step);
          cv::cvtColor(bgr, grey, cv::COLOR_BGR2GRAY);
          const auto finding = ::swarmflow::inspection::find_defects(grey, params);
          for (const auto& d : finding.defects) {
            std::string on = "-";
            for (const auto& t : truth.defects) {
              const float cx = d.box.x + d.box.width / 2;
              const float cy = d.box.y + d.box.height / 2;
              if (cx >= t.x - 4 && cx <= t.x + t.width + 4 && cy >= t.y - 4 && cy <= t.y + t.height + 4) on = t.class_name;
            }
            if (on == "-" && d.class_name.empty() && std::getenv("SWARMFLOW_OPTICS_ALL") == nullptr) continue;
            const auto& f = d.features;
            std::printf("%s s%llu c%d f%d %-8s <- %-8s len %.0f thick %.1f elong %.1f jag %.2f coh %.2f peak %.1f "
                        "mean %.1f %s forks %.0f%s box %.0f,%.0f\n",
                        c.name, static_cast<unsigned long long>(seed), cam, i,
                        d.class_name.empty() ? "(none)" : d.class_name.c_str(), on.c_str(), f.length_px,
                        f.thickness_px, f.elongation, f.jaggedness, f.coherence, f.peak_sigmas, f.mean_sigmas,
                        f.dark ? "dark" : "bright", f.forks_px, f.two_tone ? " two-tone" : "", d.box.x, d.box.y);
          }
          for (const auto& t : truth.defects) {
            bool seen = false;
            for (const auto& d : finding.defects) {
              const float cx = d.box.x + d.box.width / 2;
              const float cy = d.box.y + d.box.height / 2;
              seen = seen || (d.class_name == t.class_name && cx >= t.x - 4 && cx <= t.x + t.width + 4 &&
                              cy >= t.y - 4 && cy <= t.y + t.height + 4);
            }
            if (!seen) {
              std::printf("%s s%llu c%d f%d MISSED %s box %.0f,%.0f %.0fx%.0f contrast %.0f\n", c.name,
                          static_cast<unsigned long long>(seed), cam, i, t.class_name.c_str(), t.x, t.y, t.width,
                          t.height, t.contrast);
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace swarmflow

namespace swarmflow {
namespace {

// Tuning aid: the plate as segmented in SWARMFLOW_OPTICS_IMAGE (a PNG).
TEST(OpticsConditionTuning, DISABLED_Plate) {
  const char* path = std::getenv("SWARMFLOW_OPTICS_IMAGE");
  ASSERT_NE(path, nullptr);
  const cv::Mat grey = cv::imread(path, cv::IMREAD_GRAYSCALE);
  ASSERT_FALSE(grey.empty());
  const auto view = ::swarmflow::inspection::find_plate(grey, 40);
  std::printf("found %d centre %.1f,%.1f size %.1f x %.1f angle %.2f threshold %.1f ratio %.3f evenness %.3f holes %zu %s\n",
              view.found, view.centre.x, view.centre.y, view.width_px, view.height_px, view.angle_rad * 57.3,
              view.threshold, view.contrast_ratio, view.light_evenness, view.holes.size(), view.cannot_inspect.c_str());
  const auto gauge = ::swarmflow::inspection::gauge_plate(grey, view);
  std::printf("gauge %d %.2f x %.2f rms %.3f\n", gauge.ok, gauge.width_px, gauge.height_px, gauge.edge_rms_px);
  if (!view.threshold_map.empty()) {
    cv::Mat t8;
    view.threshold_map.convertTo(t8, CV_8U);
    cv::imwrite("/tmp/optics_threshold.png", t8);
    cv::resize(t8, t8, grey.size(), 0, 0, cv::INTER_LINEAR);
    cv::Mat binary;
    cv::compare(grey, t8, binary, cv::CMP_GT);
    cv::resize(binary, binary, cv::Size(960, 540), 0, 0, cv::INTER_AREA);
    cv::imwrite("/tmp/optics_binary.png", binary);
  }
}

}  // namespace
}  // namespace swarmflow
