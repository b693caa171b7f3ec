// Camera calibration on the synthetic camera's checkerboard: the lens
// distortion and scale it recovers against the truth, the calibrations it
// refuses, the calibration file, and vision.undistort's errors.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <opencv2/imgproc.hpp>

#include <swarmflow/registry.hpp>

#include "support/stage_runner.hpp"
#include "video/synthetic_parts.hpp"
#include "vision/camera_calibration.hpp"
#include "vision/frame_mat.hpp"
#include "vision/vision.hpp"

namespace swarmflow {
namespace {

using testing::StageRunner;

/// How close the recovered distortion at the image corner must be to the
/// truth (both as the relative radial displacement there), and the scale.
constexpr double kCornerDistortionBound = 0.001;
constexpr double kScaleBound = 0.003;  ///< relative

video::SyntheticPartsConfig target_config(double k1, int width = 640, int height = 360, double mm_per_px = 0.3) {
  video::SyntheticPartsConfig c;
  c.scene = video::SyntheticScene::checkerboard;
  c.seed = 5;
  c.width = width;
  c.height = height;
  c.mm_per_px = mm_per_px;
  c.k1 = k1;
  c.board_cols = 9;
  c.board_rows = 6;
  c.square_mm = 10;
  return c;
}

cv::Mat render_grey(const video::SyntheticParts& camera, std::uint64_t index) {
  const auto& c = camera.config();
  cv::Mat bgr(c.height, c.width, CV_8UC3);
  camera.render(index, bgr.data, bgr.step[0]);
  cv::Mat grey;
  cv::cvtColor(bgr, grey, cv::COLOR_BGR2GRAY);
  return grey;
}

/// Calibrates on `frames` frames of the target; false with `*reason` when refused.
bool calibrate(const video::SyntheticPartsConfig& config, int frames, vision::CalibrationOptions options,
               vision::Calibration* out, std::string* reason) {
  const video::SyntheticParts camera(config);
  options.board = cv::Size(config.board_cols, config.board_rows);
  options.square_mm = config.square_mm;
  vision::CameraCalibrator calibrator(options);
  for (int i = 0; i < frames; ++i) calibrator.add(render_grey(camera, static_cast<std::uint64_t>(i)), i);
  return calibrator.calibrate(out, reason);
}

void expect_recovered(double k1) {
  vision::Calibration c;
  std::string reason;
  ASSERT_TRUE(calibrate(target_config(k1), 16, {}, &c, &reason)) << reason;
  std::printf("[calibration] k1 %+.4f: recovered corner distortion %+.5f (error %.5f), rms %.3f px, %d/%d views, "
              "mm_per_px %.5f (truth 0.3, error %.3f %%)\n",
              k1, c.corner_distortion, std::abs(c.corner_distortion - k1), c.rms_px, c.views_used, c.views_seen,
              c.mm_per_px, 100 * std::abs(c.mm_per_px - 0.3) / 0.3);
  EXPECT_NEAR(c.corner_distortion, k1, kCornerDistortionBound);
  EXPECT_LT(c.rms_px, vision::CalibrationOptions{}.max_rms_px);
  EXPECT_GE(c.views_used, 8);
  EXPECT_EQ(c.plane_frame, 0);
  EXPECT_NEAR(c.mm_per_px, 0.3, 0.3 * kScaleBound);
}

TEST(Calibration, RecoversBarrelDistortion) { expect_recovered(-0.01); }
TEST(Calibration, RecoversPincushionDistortion) { expect_recovered(0.01); }
TEST(Calibration, RecoversNoDistortion) { expect_recovered(0.0); }

TEST(Calibration, RefusesTooFewViews) {
  vision::Calibration c;
  std::string reason;
  EXPECT_FALSE(calibrate(target_config(-0.01), 4, {}, &c, &reason));
  EXPECT_NE(reason.find("at least 8 views"), std::string::npos) << reason;
}

TEST(Calibration, RefusesTheWrongBoard) {
  // Counting squares instead of inner corners: the board is never found.
  video::SyntheticPartsConfig config = target_config(-0.01);
  const video::SyntheticParts camera(config);
  vision::CalibrationOptions options;
  options.board = cv::Size(10, 7);
  vision::CameraCalibrator calibrator(options);
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(calibrator.add(render_grey(camera, static_cast<std::uint64_t>(i)), i));
  vision::Calibration c;
  std::string reason;
  EXPECT_FALSE(calibrator.calibrate(&c, &reason));
  EXPECT_NE(reason.find("found in 0 of 5 frames"), std::string::npos) << reason;
}

TEST(Calibration, RefusesALargeReprojectionError) {
  vision::CalibrationOptions options;
  options.max_rms_px = 0.001;
  vision::Calibration c;
  std::string reason;
  EXPECT_FALSE(calibrate(target_config(-0.01), 10, options, &c, &reason));
  EXPECT_NE(reason.find("RMS reprojection error"), std::string::npos) << reason;
}

TEST(Calibration, FileRoundTrip) {
  vision::Calibration c;
  std::string reason;
  ASSERT_TRUE(calibrate(target_config(0.01), 10, {}, &c, &reason)) << reason;
  const std::string path = (std::filesystem::temp_directory_path() / "swarmflow_calibration_round_trip.yaml").string();
  std::string error;
  ASSERT_TRUE(vision::write_calibration(path, c, &error)) << error;
  vision::Calibration back;
  ASSERT_TRUE(vision::read_calibration(path, &back, &error)) << error;
  EXPECT_EQ(back.image_size, c.image_size);
  EXPECT_DOUBLE_EQ(back.rms_px, c.rms_px);
  EXPECT_DOUBLE_EQ(back.mm_per_px, c.mm_per_px);
  EXPECT_DOUBLE_EQ(back.corner_distortion, c.corner_distortion);
  EXPECT_EQ(back.views_used, c.views_used);
  EXPECT_EQ(cv::norm(back.camera_matrix, c.camera_matrix), 0.0);
  EXPECT_EQ(cv::norm(back.distortion, c.distortion), 0.0);
  std::filesystem::remove(path);
}

TEST(Calibration, TargetTruthAndUri) {
  video::SyntheticPartsConfig c;
  std::string error;
  ASSERT_TRUE(video::parse_synthetic_uri(
      "synthetic://checkerboard?width=640&height=360&mm_per_px=0.3&k1=-0.015&board=7x5&square_mm=12", &c, &error))
      << error;
  EXPECT_EQ(c.scene, video::SyntheticScene::checkerboard);
  EXPECT_EQ(c.board_cols, 7);
  EXPECT_EQ(c.board_rows, 5);
  EXPECT_DOUBLE_EQ(c.square_mm, 12);
  EXPECT_DOUBLE_EQ(c.k1, -0.015);
  EXPECT_FALSE(video::parse_synthetic_uri("synthetic://parts?k1=0.2", &c, &error));
  EXPECT_FALSE(video::parse_synthetic_uri("synthetic://checkerboard?board=9", &c, &error));
  ASSERT_TRUE(video::parse_synthetic_uri("synthetic://parts?k1=0.01", &c, &error)) << error;
  EXPECT_EQ(c.scene, video::SyntheticScene::parts);

  const video::SyntheticParts camera(target_config(-0.01));
  const video::PartTruth flat = camera.truth(0);
  EXPECT_EQ(flat.variant, "checkerboard");
  EXPECT_DOUBLE_EQ(flat.tilt_deg, 0.0);
  EXPECT_DOUBLE_EQ(flat.k1, -0.01);
  EXPECT_DOUBLE_EQ(flat.focal_px, video::kWorkingDistanceMm / 0.3);
  EXPECT_DOUBLE_EQ(flat.square_mm, 10);
  const auto back = video::parse_truth(video::to_json(camera.truth(3)));
  ASSERT_TRUE(back.has_value());
  EXPECT_GT(back->tilt_deg, 0.0);
  EXPECT_DOUBLE_EQ(back->k1, -0.01);

  // The lens's definition: a point at the image corner moves by k1 of its
  // distance from the centre.
  video::SyntheticPartsConfig lens = target_config(-0.02);
  double x = 0, y = 0;
  distort_point(lens, lens.width - 0.5, lens.height - 0.5, &x, &y);
  const double cx = (lens.width - 1) / 2.0, cy = (lens.height - 1) / 2.0;
  EXPECT_NEAR(std::hypot(x - cx, y - cy) / std::hypot(lens.width / 2.0, lens.height / 2.0), 0.98, 1e-12);
}

// -- vision.undistort -----------------------------------------------------------

Registry vision_registry() {
  Registry r;
  register_vision_stages(r);
  return r;
}

Envelope grey_frame(int w, int h) {
  vision::FrameWriter writer(w, h, schema::PixelFormat::GRAY8);
  writer.pixels().setTo(cv::Scalar(128));
  flatbuffers::FlatBufferBuilder fbb;
  auto cam = fbb.CreateString("cam0");
  fbb.Finish(schema::CreateFrame(fbb, schema::PixelFormat::GRAY8, 0, 0, 0, 0, cam), schema::FrameIdentifier());
  const auto like = Payload::from_builder(fbb);
  return Envelope(EnvelopeHeader{}, writer.finish(*flatbuffers::GetRoot<schema::Frame>(like->data())));
}

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = (std::filesystem::temp_directory_path() / name).string();
  std::ofstream(path) << text;
  return path;
}

TEST(VisionUndistort, NeedsACalibrationFile) {
  StageRunner r(vision_registry(), "vision.undistort");
  Status s = r.start();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("set calibration"), std::string::npos) << s.message();

  StageRunner missing(vision_registry(), "vision.undistort");
  ASSERT_TRUE(missing.set("calibration", std::string("/nonexistent/calib.yaml")).ok());
  s = missing.start();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("no calibration file /nonexistent/calib.yaml"), std::string::npos) << s.message();

  StageRunner malformed(vision_registry(), "vision.undistort");
  const std::string path = write_file("swarmflow_undistort_malformed.yaml", "%YAML:1.0\n---\nimage_width: 640\n");
  ASSERT_TRUE(malformed.set("calibration", path).ok());
  s = malformed.start();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("has no image_height"), std::string::npos) << s.message();
  std::filesystem::remove(path);
}

TEST(VisionUndistort, RefusesFramesOfAnotherSize) {
  vision::Calibration c;
  std::string reason;
  ASSERT_TRUE(calibrate(target_config(-0.01), 10, {}, &c, &reason)) << reason;
  const std::string path = (std::filesystem::temp_directory_path() / "swarmflow_undistort_size.yaml").string();
  ASSERT_TRUE(vision::write_calibration(path, c, &reason)) << reason;

  StageRunner r(vision_registry(), "vision.undistort");
  ASSERT_TRUE(r.set("calibration", path).ok());
  ASSERT_TRUE(r.start().ok());
  ASSERT_TRUE(r.feed("frames", grey_frame(640, 360)).ok());
  ASSERT_EQ(r.output("frames").size(), 1U);
  const auto* f = r.output("frames")[0].as<schema::Frame>();
  EXPECT_EQ(f->width(), 640U);
  EXPECT_EQ(f->format(), schema::PixelFormat::GRAY8);
  EXPECT_EQ(f->camera_id()->str(), "cam0");
  // The middle of a uniform frame stays as it was.
  EXPECT_EQ(vision::view_of(*f).at<std::uint8_t>(180, 320), 128);

  const Status s = r.feed("frames", grey_frame(320, 180));
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("calibrates 640x360 frames, but this frame is 320x180"), std::string::npos)
      << s.message();
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace swarmflow
