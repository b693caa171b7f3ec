#pragma once
/// \file dimension_gauge.hpp
/// inspection.measure — gauges a plate's outer size and hole diameters in
/// millimetres from the two cameras of a station, to a fraction of a pixel.
///
/// Inputs `a` and `b` (swarmflow.schema.Frame): the two cameras of one station,
///   joined by part id in the pipeline (`join: {key: part_id}`) so that one
///   step sees both frames of a part. Either may be missing when the set is
///   partial; an unjoined envelope on one port is measured alone. Formats as
///   for inspection.defects (BGR, RGB, BGRA, GRAY8, NV12 luma).
/// Output `results` (swarmflow.schema.VisionResults): camera_id "station-N",
///   frame_index and ground_truth of the first frame present, part_id (also in
///   the envelope header), station N, partial = the set was incomplete (or
///   only one camera had a plate), and measurements:
///   - `width`, `height`: outer size (long side, short side);
///   - `hole_<k>_diameter` for each hole k of the part's drawing, in the
///     drawing's order (a drawn hole that neither camera found reports 0 and is
///     out of tolerance);
///   each {value, unit "mm", nominal (from the drawing), tolerance,
///   in_tolerance = |value - nominal| <= tolerance}. A part that matches no
///   drawing reports width, height and its holes in the order found
///   (`hole_<i>_diameter`) with nominal 0 and in_tolerance false.
///
/// Method: per camera, the plate and its holes are segmented (Otsu, contours)
/// and gauged to sub-pixel precision (plate_geometry.hpp): profiles across
/// each side, sampled bilinearly every half pixel, give the crossing of the
/// level halfway between metal and belt; a line is fitted to each side's
/// crossings and the width and height are the distances between opposite
/// lines; each hole is fitted with a least-squares circle through the
/// crossings of radial profiles. Pixels become millimetres through
/// `mm_per_px`. The two cameras' estimates are averaged (one camera alone is
/// used as it is); holes are matched between cameras by their position in the
/// plate's frame.
///
/// Parameters (name, default, range):
///   mm_per_px            0.1   [0.005, 10]  scale at the plate (calibration), camera a (and b
///                                           unless it has its own)
///   calibration          ""                 calibration file (swarmflow calibrate) whose mm_per_px
///                                           replaces mm_per_px; fails at start if it has none
///   mm_per_px_b          0     [0, 10]      camera b's own scale; 0 = camera a's
///   calibration_b        ""                 camera b's own calibration file (its mm_per_px);
///                                           "" = mm_per_px_b, or camera a's scale
///   tolerance_mm         0.2   [0, 100]     allowed deviation of width and height
///   hole_tolerance_mm    0.1   [0, 100]     allowed deviation of a hole's diameter
///   variant              auto               the part's drawing, or `auto` (nearest by size)
///   drawing_tolerance_mm 3.0   [0, 100]     how far the size may be from a drawing's for `auto`
///   station              -1    [-1, 1e6]    the station reported; -1 = from the part id
/// Counters: `sets`, `partial_sets`, `no_plate` (frames without a plate),
/// `bad_frames` (malformed frames, which fail the step), `cannot_inspect`
/// (parts with no verdict, below).
///
/// Cannot inspect: a camera whose plate has too little contrast against the
/// belt (plate_geometry.hpp, kMinContrastRatio) is left out of the set; when
/// no camera is left (or none found a plate), the result has no measurements
/// and `cannot_inspect` says why, per camera. It is never given a verdict.
///
/// Assumptions: as inspection.defects (one bright plate on a darker
/// background, wholly in view, long side within 45 degrees of x); the
/// cameras look straight down with square pixels and a known, uniform scale
/// `mm_per_px` (a telecentric or calibrated and rectified view: no lens
/// distortion or perspective is corrected here; put vision.undistort in
/// front and take the scale from its calibration file); holes are through-holes that
/// show the background. Accuracy measured on the synthetic camera is in
/// docs/inspection.md. Part ids follow the synthetic camera's convention
/// (station + 1) * 1'000'000 + index unless `station` is set.
///
/// ```yaml
/// stages:
///   - {id: cam0, type: video.source, params: {uri: "synthetic://parts?seed=7&station=0&camera=0"}}
///   - {id: cam1, type: video.source, params: {uri: "synthetic://parts?seed=7&station=0&camera=1"}}
///   - id: measure
///     type: inspection.measure
///     inputs: {a: cam0/frames, b: cam1/frames}
///     join: {key: part_id}
///     params: {mm_per_px: 0.1, tolerance_mm: 0.2, hole_tolerance_mm: 0.1}
/// ```

#include <atomic>
#include <string>

#include <opencv2/core.hpp>

#include <swarmflow/schema/frame_generated.h>
#include <swarmflow/schema/vision_generated.h>
#include <swarmflow/stage.hpp>

namespace swarmflow::inspection {

class DimensionGauge final : public Stage {
 public:
  void setup(StageSpec& s) override;
  Status start(StageContext& ctx) override;
  Status process(Inputs& in, Outputs& out, StageContext& ctx) override;

 private:
  InputPort<schema::Frame> a_;
  InputPort<schema::Frame> b_;
  OutputPort<schema::VisionResults> results_;
  double mm_per_px_ = 0.1;
  std::string calibration_;
  double mm_per_px_b_ = 0;
  std::string calibration_b_;
  double scale_[2] = {0.1, 0.1};  ///< mm per px of camera a and b, as started
  double tolerance_mm_ = 0.2;
  double hole_tolerance_mm_ = 0.1;
  std::string variant_;
  double drawing_tolerance_mm_ = 3.0;
  std::int64_t station_ = -1;
  cv::Mat grey_;  ///< reused conversion buffer
  std::atomic<std::int64_t>* sets_ = nullptr;
  std::atomic<std::int64_t>* partial_sets_ = nullptr;
  std::atomic<std::int64_t>* no_plate_ = nullptr;
  std::atomic<std::int64_t>* bad_frames_ = nullptr;
  std::atomic<std::int64_t>* cannot_inspect_ = nullptr;
};

}  // namespace swarmflow::inspection
