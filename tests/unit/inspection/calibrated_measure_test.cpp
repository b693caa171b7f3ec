// inspection.measure under lens distortion: the synthetic camera with 1 %
// barrel or pincushion distortion, calibrated on its checkerboard,
// vision.undistort in front and the scale taken from the calibration file,
// against the same frames gauged without undistortion.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>

#include <opencv2/imgproc.hpp>

#include "inspection_test_support.hpp"
#include "vision/camera_calibration.hpp"
#include "vision/vision.hpp"

namespace swarmflow {
namespace {

using inspection_test::find_measurement;
using inspection_test::inspection_registry;
using inspection_test::render_frame;
using testing::StageRunner;

constexpr int kWidth = 960, kHeight = 540;
constexpr double kMmPerPx = 0.2;

const Registry& vision_registry() {
  static const Registry registry = [] {
    Registry r;
    register_vision_stages(r);
    return r;
  }();
  return registry;
}

/// Calibrates the camera of lens `k1` on 14 frames of its checkerboard and
/// writes the file; returns its path.
std::string calibration_file(double k1, const std::string& name, vision::CalibrationOptions options = {}) {
  video::SyntheticPartsConfig c;
  c.scene = video::SyntheticScene::checkerboard;
  c.seed = 11;
  c.width = kWidth;
  c.height = kHeight;
  c.mm_per_px = kMmPerPx;
  c.k1 = k1;
  const video::SyntheticParts target(c);
  vision::CameraCalibrator calibrator(options);
  cv::Mat bgr(kHeight, kWidth, CV_8UC3), grey;
  for (int i = 0; i < 14; ++i) {
    target.render(static_cast<std::uint64_t>(i), bgr.data, bgr.step[0]);
    cv::cvtColor(bgr, grey, cv::COLOR_BGR2GRAY);
    calibrator.add(grey, i);
  }
  vision::Calibration calibration;
  std::string reason;
  EXPECT_TRUE(calibrator.calibrate(&calibration, &reason)) << reason;
  const std::string path = (std::filesystem::temp_directory_path() / name).string();
  EXPECT_TRUE(vision::write_calibration(path, calibration, &reason)) << reason;
  std::printf("[calibration] %dx%d k1 %+.3f: corner distortion %+.5f, rms %.3f px, %d/%d views, mm_per_px %.5f\n",
              kWidth, kHeight, k1, calibration.corner_distortion, calibration.rms_px, calibration.views_used,
              calibration.views_seen, calibration.mm_per_px);
  return path;
}

/// The largest error of any size of `r` against `truth`, in mm.
double largest_error(const schema::VisionResults& r, const video::PartTruth& truth) {
  double worst = 0;
  const auto* width = find_measurement(r, "width");
  const auto* height = find_measurement(r, "height");
  EXPECT_NE(width, nullptr);
  EXPECT_NE(height, nullptr);
  if (width == nullptr || height == nullptr) return 1e9;
  worst = std::max({worst, std::abs(width->value() - truth.width_mm), std::abs(height->value() - truth.height_mm)});
  for (std::size_t k = 0; k < truth.holes.size(); ++k) {
    if (truth.holes[k].missing) continue;
    const auto* m = find_measurement(r, "hole_" + std::to_string(k) + "_diameter");
    EXPECT_NE(m, nullptr);
    if (m == nullptr) return 1e9;
    worst = std::max(worst, std::abs(m->value() - truth.holes[k].diameter_mm));
  }
  return worst;
}

struct Errors {
  double undistorted = 0, raw = 0;
};

Errors measure_parts(double k1, const std::string& calibration) {
  StageRunner undistort(vision_registry(), "vision.undistort", "flat");
  EXPECT_TRUE(undistort.set("calibration", calibration).ok());
  Status s = undistort.start();
  EXPECT_TRUE(s.ok()) << s.message();
  StageRunner calibrated(inspection_registry(), "inspection.measure", "measure");
  EXPECT_TRUE(calibrated.set("calibration", calibration).ok());
  s = calibrated.start();
  EXPECT_TRUE(s.ok()) << s.message();
  StageRunner raw(inspection_registry(), "inspection.measure", "raw");
  EXPECT_TRUE(raw.set("mm_per_px", kMmPerPx).ok());
  EXPECT_TRUE(raw.start().ok());

  video::SyntheticPartsConfig c;
  c.seed = 99;
  c.width = kWidth;
  c.height = kHeight;
  c.mm_per_px = kMmPerPx;
  c.k1 = k1;
  const video::SyntheticParts camera(c);
  Errors errors;
  constexpr int kParts = 8;
  for (int i = 0; i < kParts; ++i) {
    video::PartTruth truth;
    const Envelope frame = render_frame(camera, static_cast<std::uint64_t>(i), true, &truth);
    EXPECT_TRUE(undistort.feed("frames", frame).ok());
    EXPECT_TRUE(calibrated.feed("a", undistort.output("frames").back()).ok());
    EXPECT_TRUE(raw.feed("a", frame).ok());
    errors.undistorted = std::max(
        errors.undistorted, largest_error(*calibrated.output("results").back().as<schema::VisionResults>(), truth));
    errors.raw = std::max(errors.raw, largest_error(*raw.output("results").back().as<schema::VisionResults>(), truth));
  }
  std::printf("[inspection.measure] %dx%d at %.1f mm/px, k1 %+.3f, %d parts: largest error %.4f mm undistorted with "
              "the calibration, %.4f mm without\n",
              kWidth, kHeight, kMmPerPx, k1, kParts, errors.undistorted, errors.raw);
  return errors;
}

TEST(CalibratedMeasure, BarrelDistortionUndistortedMeetsATenthOfAMillimetre) {
  const std::string path = calibration_file(-0.01, "swarmflow_measure_barrel.yaml");
  const Errors e = measure_parts(-0.01, path);
  EXPECT_LE(e.undistorted, 0.1);
  // Without undistortion the same frames are gauged far worse: the test
  // above fails if the undistortion or the scale is left out.
  EXPECT_GT(e.raw, 0.3);
  EXPECT_GT(e.raw, 4 * e.undistorted);
  std::filesystem::remove(path);
}

TEST(CalibratedMeasure, PincushionDistortionUndistortedMeetsATenthOfAMillimetre) {
  const std::string path = calibration_file(0.01, "swarmflow_measure_pincushion.yaml");
  const Errors e = measure_parts(0.01, path);
  EXPECT_LE(e.undistorted, 0.1);
  EXPECT_GT(e.raw, 0.3);
  EXPECT_GT(e.raw, 4 * e.undistorted);
  std::filesystem::remove(path);
}

TEST(CalibratedMeasure, RefusesACalibrationWithoutScale) {
  vision::CalibrationOptions options;
  options.plane_frame = 1000;  // no flat view: no mm_per_px in the file
  const std::string path = calibration_file(-0.01, "swarmflow_measure_no_scale.yaml", options);
  StageRunner measure(inspection_registry(), "inspection.measure", "measure");
  ASSERT_TRUE(measure.set("calibration", path).ok());
  const Status s = measure.start();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("has no mm_per_px"), std::string::npos) << s.message();

  StageRunner missing(inspection_registry(), "inspection.measure", "measure");
  ASSERT_TRUE(missing.set("calibration", std::string("/nonexistent/calib.yaml")).ok());
  EXPECT_FALSE(missing.start().ok());
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace swarmflow
