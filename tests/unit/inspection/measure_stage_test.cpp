// inspection.measure on the synthetic camera: outer size and hole diameters
// fused from a station's two cameras against the true sizes, at 960x540
// (0.2 mm/px) and 1920x1080 (0.1 mm/px); partial and unjoined sets; frames
// without ground truth.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "inspection_test_support.hpp"

namespace swarmflow {
namespace {

using inspection_test::find_measurement;
using inspection_test::inspection_registry;
using inspection_test::render_frame;
using inspection_test::step_joined;
using testing::StageRunner;

constexpr std::uint64_t kSeed = 99;

video::SyntheticPartsConfig camera_config(int station, int camera, int width, int height, double mm_per_px) {
  video::SyntheticPartsConfig c;
  c.seed = kSeed;
  c.station = station;
  c.camera = camera;
  c.width = width;
  c.height = height;
  c.mm_per_px = mm_per_px;
  return c;
}

std::unique_ptr<StageRunner> measure_stage(double mm_per_px) {
  auto runner = std::make_unique<StageRunner>(inspection_registry(), "inspection.measure", "measure");
  EXPECT_TRUE(runner->set("mm_per_px", mm_per_px).ok());
  const Status s = runner->start();
  EXPECT_TRUE(s.ok()) << s.message();
  return runner;
}

/// The largest error of any size of `r` against `truth`, in mm; checks on
/// the way that every size is reported and tolerances are judged right.
struct Errors {
  double outer = 0, hole = 0;
  int sizes = 0;
  double ms_per_set = 0;
};

void compare(const schema::VisionResults& r, const video::PartTruth& truth, double tolerance, double hole_tolerance,
             Errors* errors) {
  const auto* width = find_measurement(r, "width");
  const auto* height = find_measurement(r, "height");
  ASSERT_NE(width, nullptr);
  ASSERT_NE(height, nullptr);
  EXPECT_EQ(width->unit()->str(), "mm");
  const auto judge = [](const schema::Measurement& m, double true_value, double tol) {
    // Where the true size is clearly in or out of tolerance, so must the verdict be.
    const double margin = std::abs(true_value - m.nominal()) - tol;
    if (std::abs(margin) > 0.1) {
      EXPECT_EQ(m.in_tolerance(), margin < 0) << m.name()->str();
    }
  };
  for (const auto& [m, true_value] : {std::pair{width, truth.width_mm}, std::pair{height, truth.height_mm}}) {
    errors->outer = std::max(errors->outer, std::abs(m->value() - true_value));
    EXPECT_DOUBLE_EQ(m->tolerance(), tolerance);
    judge(*m, true_value, tolerance);
    ++errors->sizes;
  }
  for (std::size_t k = 0; k < truth.holes.size(); ++k) {
    const auto* m = find_measurement(r, "hole_" + std::to_string(k) + "_diameter");
    ASSERT_NE(m, nullptr) << "hole " << k << " of " << truth.variant;
    if (truth.holes[k].missing) {
      EXPECT_EQ(m->value(), 0.0);
      EXPECT_FALSE(m->in_tolerance());
      continue;
    }
    errors->hole = std::max(errors->hole, std::abs(m->value() - truth.holes[k].diameter_mm));
    judge(*m, truth.holes[k].diameter_mm, hole_tolerance);
    ++errors->sizes;
  }
}

/// Measures `parts` parts of each of `stations` stations, both cameras joined.
Errors evaluate(int stations, int parts, int width, int height, double mm_per_px) {
  auto stage = measure_stage(mm_per_px);
  Errors errors;
  double ms = 0;
  for (int station = 0; station < stations; ++station) {
    const video::SyntheticParts cam0(camera_config(station, 0, width, height, mm_per_px));
    const video::SyntheticParts cam1(camera_config(station, 1, width, height, mm_per_px));
    for (int i = 0; i < parts; ++i) {
      video::PartTruth truth;
      const Envelope a = render_frame(cam0, static_cast<std::uint64_t>(i), true, &truth);
      const Envelope b = render_frame(cam1, static_cast<std::uint64_t>(i), true);
      Status s;
      const auto start = std::chrono::steady_clock::now();
      const auto out = step_joined(*stage, &a, &b, false, &s);
      ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      EXPECT_TRUE(s.ok()) << s.message();
      if (out.size() != 1) {
        ADD_FAILURE() << "expected one result";
        continue;
      }
      const auto* r = out[0].as<schema::VisionResults>();
      EXPECT_FALSE(r->partial());
      EXPECT_EQ(r->camera_id()->str(), "station-" + std::to_string(station));
      EXPECT_EQ(r->station(), station);
      EXPECT_EQ(r->part_id(), truth.part_id);
      EXPECT_EQ(out[0].header().part_id, truth.part_id);
      compare(*r, truth, 0.2, 0.1, &errors);
    }
  }
  stage->stop();
  errors.ms_per_set = ms / (stations * parts);
  return errors;
}

TEST(MeasureStage, FusedSizesWithinATenthOfAMillimetreAt960x540) {
  const Errors e = evaluate(4, 24, 960, 540, 0.2);
  std::printf(
      "[inspection.measure] 960x540 at 0.2 mm/px, 4 stations x 24 parts, both cameras fused: %d sizes, "
      "max |error| outer %.4f mm, holes %.4f mm; %.1f ms per set\n",
      e.sizes, e.outer, e.hole, e.ms_per_set);
  std::fflush(stdout);
  EXPECT_GT(e.sizes, 450);
  EXPECT_LE(e.outer, 0.1);
  EXPECT_LE(e.hole, 0.1);
}

TEST(MeasureStage, FusedSizesWithinATenthOfAMillimetreAt1080p) {
  const Errors e = evaluate(2, 6, 1920, 1080, 0.1);
  std::printf(
      "[inspection.measure] 1920x1080 at 0.1 mm/px, 2 stations x 6 parts, both cameras fused: %d sizes, "
      "max |error| outer %.4f mm, holes %.4f mm; %.1f ms per set\n",
      e.sizes, e.outer, e.hole, e.ms_per_set);
  std::fflush(stdout);
  EXPECT_GT(e.sizes, 60);
  EXPECT_LE(e.outer, 0.1);
  EXPECT_LE(e.hole, 0.1);
}

TEST(MeasureStage, PartialSetIsMeasuredFromTheCameraPresent) {
  auto stage = measure_stage(0.2);
  const video::SyntheticParts cam0(camera_config(1, 0, 960, 540, 0.2));
  const video::SyntheticParts cam1(camera_config(1, 1, 960, 540, 0.2));
  for (int missing = 0; missing < 2; ++missing) {
    video::PartTruth truth;
    const Envelope a = render_frame(cam0, 4, true, &truth);
    const Envelope b = render_frame(cam1, 4, true);
    Status s;
    const auto out = step_joined(*stage, missing == 0 ? nullptr : &a, missing == 1 ? nullptr : &b, true, &s);
    ASSERT_TRUE(s.ok()) << s.message();
    ASSERT_EQ(out.size(), 1U);
    const auto* r = out[0].as<schema::VisionResults>();
    EXPECT_TRUE(r->partial());
    EXPECT_EQ(r->part_id(), truth.part_id);
    EXPECT_EQ(r->station(), 1);
    Errors e;
    compare(*r, truth, 0.2, 0.1, &e);
    EXPECT_LE(e.outer, 0.1);
    EXPECT_LE(e.hole, 0.1);
  }
  EXPECT_EQ(stage->counter_value("partial_sets"), 2);
}

TEST(MeasureStage, UnjoinedEnvelopeIsMeasuredAlone) {
  auto stage = measure_stage(0.2);
  const video::SyntheticParts cam1(camera_config(3, 1, 960, 540, 0.2));
  video::PartTruth truth;
  ASSERT_TRUE(stage->feed("b", render_frame(cam1, 2, true, &truth)).ok());
  ASSERT_EQ(stage->output("results").size(), 1U);
  const auto* r = stage->output("results")[0].as<schema::VisionResults>();
  EXPECT_TRUE(r->partial());
  Errors e;
  compare(*r, truth, 0.2, 0.1, &e);
  EXPECT_LE(std::max(e.outer, e.hole), 0.1);
}

TEST(MeasureStage, EachCameraHasItsOwnScale) {
  // Camera b sits higher: 0.25 mm a pixel against camera a's 0.2.
  const video::SyntheticParts cam0(camera_config(1, 0, 960, 540, 0.2));
  const video::SyntheticParts cam1(camera_config(1, 1, 960, 540, 0.25));
  double error_own = 0, error_shared = 0;
  for (const bool own : {true, false}) {
    auto stage = std::make_unique<StageRunner>(inspection_registry(), "inspection.measure", "measure");
    ASSERT_TRUE(stage->set("mm_per_px", 0.2).ok());
    if (own) {
      ASSERT_TRUE(stage->set("mm_per_px_b", 0.25).ok());
    }
    ASSERT_TRUE(stage->start().ok());
    for (std::uint64_t i = 0; i < 6; ++i) {
      video::PartTruth truth;
      const Envelope a = render_frame(cam0, i, true, &truth);
      const Envelope b = render_frame(cam1, i, true);
      Status s;
      const auto out = step_joined(*stage, &a, &b, false, &s);
      ASSERT_TRUE(s.ok()) << s.message();
      ASSERT_EQ(out.size(), 1U);
      const auto* r = out[0].as<schema::VisionResults>();
      const auto* width = find_measurement(*r, "width");
      ASSERT_NE(width, nullptr);
      double& e = own ? error_own : error_shared;
      e = std::max(e, std::abs(width->value() - truth.width_mm));
    }
  }
  std::cout << "[inspection.measure] camera b at 0.25 mm/px: largest width error " << error_own
            << " mm with its own scale, " << error_shared << " mm with camera a's\n";
  EXPECT_LE(error_own, 0.1);
  EXPECT_GT(error_shared, 5.0);
}

TEST(MeasureStage, WorksWithoutGroundTruth) {
  auto stage = measure_stage(0.2);
  ASSERT_TRUE(stage->set("tolerance_mm", 0.25).ok());
  const video::SyntheticParts cam0(camera_config(2, 0, 960, 540, 0.2));
  const video::SyntheticParts cam1(camera_config(2, 1, 960, 540, 0.2));
  video::PartTruth truth;
  const Envelope a = render_frame(cam0, 7, false, &truth);
  const Envelope b = render_frame(cam1, 7, false);
  Status s;
  const auto out = step_joined(*stage, &a, &b, false, &s);
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_EQ(out.size(), 1U);
  const auto* r = out[0].as<schema::VisionResults>();
  EXPECT_EQ(r->ground_truth(), nullptr);
  EXPECT_EQ(r->station(), 2);
  EXPECT_EQ(r->part_id(), truth.part_id);
  Errors e;
  compare(*r, truth, 0.25, 0.1, &e);
  EXPECT_LE(std::max(e.outer, e.hole), 0.1);
}

TEST(MeasureStage, FixedVariantGivesItsNominals) {
  auto stage = measure_stage(0.2);
  ASSERT_TRUE(stage->set("variant", std::string("plate_130x85_5h")).ok());
  EXPECT_FALSE(stage->set("variant", std::string("plate_1x1")).ok());
  const video::SyntheticParts cam0(camera_config(0, 0, 960, 540, 0.2));
  ASSERT_TRUE(stage->feed("a", render_frame(cam0, 0, true)).ok());
  const auto* r = stage->output("results")[0].as<schema::VisionResults>();
  const auto* width = find_measurement(*r, "width");
  ASSERT_NE(width, nullptr);
  EXPECT_EQ(width->nominal(), 130.0);
  EXPECT_NE(find_measurement(*r, "hole_4_diameter"), nullptr);
}

TEST(InspectionPack, RegistersBothStagesWithTheirPorts) {
  const Registry& registry = inspection_registry();
  StageSpec defects, measure;
  ASSERT_TRUE(registry.describe("inspection.defects", defects).ok());
  ASSERT_TRUE(registry.describe("inspection.measure", measure).ok());
  ASSERT_EQ(defects.inputs().size(), 1U);
  EXPECT_EQ(defects.inputs()[0].name, "frames");
  EXPECT_EQ(defects.inputs()[0].type, "swarmflow.schema.Frame");
  ASSERT_EQ(defects.outputs().size(), 1U);
  EXPECT_EQ(defects.outputs()[0].type, "swarmflow.schema.VisionResults");
  ASSERT_EQ(measure.inputs().size(), 2U);
  EXPECT_EQ(measure.input_index("a"), 0);
  EXPECT_EQ(measure.input_index("b"), 1);
  EXPECT_NE(defects.find_param("mm_per_px"), nullptr);
  EXPECT_NE(measure.find_param("tolerance_mm"), nullptr);
  EXPECT_FALSE(defects.set("k_low", 0.5).ok());  // below its range
}

TEST(InspectionPack, InconsistentThresholdsFailToStart) {
  StageRunner runner(inspection_registry(), "inspection.defects");
  ASSERT_TRUE(runner.set("k_low", 6.0).ok());
  ASSERT_TRUE(runner.set("k_high", 4.0).ok());
  EXPECT_TRUE(runner.start().is_error());
}

}  // namespace
}  // namespace swarmflow
