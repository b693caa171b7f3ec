#pragma once
/// \file vision_stages.hpp
/// The `vision` pack: frame conversion, cropping and annotation with OpenCV.
///
/// vision.convert — input `frames`, output `frames` (swarmflow.schema.Frame).
///   width, height (integer, 0 = keep), format (BGR | RGB | GRAY8 | BGRA, "" = keep),
///   interpolation (area | linear | nearest). The output frame is written once,
///   straight into its payload.
///   ```yaml
///   - {id: small, type: vision.convert, inputs: {frames: camera/frames}, params: {width: 640, height: 360}}
///   ```
/// vision.crop — input `frames`, output `frames`.
///   x, y, width, height (integer, pixels; clamped to the frame; width/height 0 = to the edge).
///   ```yaml
///   - {id: roi, type: vision.crop, inputs: {frames: camera/frames}, params: {x: 100, y: 50, width: 800, height: 600}}
///   ```
/// vision.annotate — inputs `frames` (Frame) and `results` (swarmflow.schema.VisionResults),
///   output `frames`. Draws each defect's box with its class and score, and the
///   measurements as text, on a copy of the frame (the one copy annotation
///   needs). Join the two inputs, e.g. `join: {key: seq, timeout_ms: 500}`;
///   a frame without results passes through unannotated.
///   thickness (integer), font_scale (number), camera (string: only this
///   camera's frames go on, e.g. to record one camera of many; "" = all).
///   ```yaml
///   - id: overlay
///     type: vision.annotate
///     inputs: {frames: camera/frames, results: detect/results}
///     join: {key: seq, timeout_ms: 500}
///   ```
/// vision.undistort — input `frames`, output `frames`. Removes lens distortion
///   with a calibration file written by `swarmflow calibrate`: the maps are
///   computed once at start (initUndistortRectifyMap, keeping the file's camera
///   matrix, so the scale at the working plane is the file's mm_per_px) and
///   each frame is remapped (cv::remap) straight into its payload. Pixels that
///   fall outside the source are black. BGR, RGB, BGRA, GRAY8; not NV12.
///   calibration (string: path of the file; required), interpolation (linear | cubic).
///   Fails at start when the file is missing or malformed, and on the first
///   frame whose size is not the file's image size.
///   ```yaml
///   - {id: flat, type: vision.undistort, inputs: {frames: camera/frames}, params: {calibration: calib.yaml}}
///   ```

#include <string>

#include <opencv2/core.hpp>

#include <swarmflow/schema/frame_generated.h>
#include <swarmflow/schema/vision_generated.h>
#include <swarmflow/stage.hpp>

namespace swarmflow::vision {

class Convert final : public Stage {
 public:
  void setup(StageSpec& s) override;
  Status start(StageContext& ctx) override;
  Status process(Inputs& in, Outputs& out, StageContext& ctx) override;

 private:
  InputPort<schema::Frame> in_;
  OutputPort<schema::Frame> out_;
  std::int64_t width_ = 0;
  std::int64_t height_ = 0;
  std::string format_;
  std::string interpolation_;
};

class Crop final : public Stage {
 public:
  void setup(StageSpec& s) override;
  Status process(Inputs& in, Outputs& out, StageContext& ctx) override;

 private:
  InputPort<schema::Frame> in_;
  OutputPort<schema::Frame> out_;
  std::int64_t x_ = 0, y_ = 0, width_ = 0, height_ = 0;
};

class Annotate final : public Stage {
 public:
  void setup(StageSpec& s) override;
  Status process(Inputs& in, Outputs& out, StageContext& ctx) override;

 private:
  InputPort<schema::Frame> frames_;
  InputPort<schema::VisionResults> results_;
  OutputPort<schema::Frame> out_;
  std::int64_t thickness_ = 2;
  double font_scale_ = 0.6;
  std::string camera_;
};

class Undistort final : public Stage {
 public:
  void setup(StageSpec& s) override;
  Status start(StageContext& ctx) override;
  Status process(Inputs& in, Outputs& out, StageContext& ctx) override;

 private:
  InputPort<schema::Frame> in_;
  OutputPort<schema::Frame> out_;
  std::string calibration_;
  std::string interpolation_;
  cv::Size size_;
  cv::Mat map1_, map2_;  ///< from initUndistortRectifyMap, fixed point
};

/// Draws `results` (boxes, labels, measurements) onto `image` (BGR or GRAY8).
void draw_results(cv::Mat& image, const schema::VisionResults& results, int thickness, double font_scale);

}  // namespace swarmflow::vision
