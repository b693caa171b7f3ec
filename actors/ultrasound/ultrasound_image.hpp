#pragma once
/// \file ultrasound_image.hpp
/// The image processing of the ultrasound stages as plain functions over
/// cv::Mat, with no stage or runtime in sight, so that tests and benchmarks
/// call them directly: speckle reduction and contrast (enhance), lesion
/// masks and their description (segment), vessel velocity by speckle
/// tracking (flow). docs/ultrasound.md describes the methods.

#include <string>
#include <vector>

#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

namespace swarmflow::ultrasound {

// -- enhance -------------------------------------------------------------------

struct EnhanceParams {
  double mm_per_px = 0.1;
  double guided_radius_mm = 0.8;  ///< window radius of the guided filter
  double guided_eps = 400;        ///< its regularisation, grey levels squared
  double clahe_clip = 1.0;        ///< CLAHE clip limit; 0 = no CLAHE
  int clahe_tiles = 8;            ///< CLAHE tiles across
};

/// Speckle reduction and contrast: at half resolution, a 5x5 median and a
/// self-guided filter; back to full size; then CLAHE. One instance per
/// replica (it keeps its CLAHE object).
class Enhancer {
 public:
  explicit Enhancer(EnhanceParams params);
  /// `grey` CV_8UC1 in, `out` CV_8UC1 of the same size (written in place
  /// when it is that size already).
  void apply(const cv::Mat& grey, cv::Mat& out);

 private:
  EnhanceParams params_;
  cv::Ptr<cv::CLAHE> clahe_;
  cv::Mat half_, median_, f_, mean_i_, mean_ii_, a_, b_, q_;
};

// -- segment -------------------------------------------------------------------

struct SegmentParams {
  double mm_per_px = 0.1;
  double dynamic_range_db = 60;   ///< of the log compression that made the raw frames
  double min_size_mm = 3.0;       ///< smallest lesion reported (diameter of a disc of its area)
  double background_mm = 16.0;    ///< window of the local background
  double detect_mm = 1.0;         ///< smoothing (Gaussian sigma) of the echo level candidates are looked for in
  double smooth_mm = 1.4;         ///< an opening of this diameter smooths each outline
  double threshold_db = 4.0;      ///< echo level against the local background that seeds a candidate
  double irregular_solidity = 0.93;  ///< an outline filling less of its convex hull has an irregular margin
  double top_mm = 2.0;            ///< near field left out (the probe's face)
  double posterior_db = 2.5;      ///< echo change below a lesion that counts as enhancement or shadowing
  double iso_db = 3.0;            ///< a candidate whose smoothed echo is within this of its surroundings is dropped; classes: isoechoic
  double min_contrast_db = 5.0;   ///< a lesion is reported when its echo differs from the tissue's by this
  double anechoic_db = -20.0;     ///< below this it is anechoic
};

/// One lesion as found.
struct LesionFinding {
  std::vector<cv::Point2f> contour;  ///< frame pixels, closed
  cv::Point2f centre;
  std::string echogenicity;  ///< anechoic | hypoechoic | isoechoic | hyperechoic
  double contrast_db = 0;
  double size_mm = 0, width_mm = 0, area_mm2 = 0;
  std::string shape;      ///< round | oval | irregular
  std::string margin;     ///< circumscribed | irregular
  std::string posterior;  ///< enhancement | shadowing | none
  double posterior_db = 0;
  double depth_mm = 0;
};

/// Lesions in one frame: masks from `enhanced` (ultrasound.enhance's
/// output), echo levels in dB from `raw` (the log-compressed B-mode frame).
/// Both CV_8UC1 of one size. Sorted left to right.
std::vector<LesionFinding> find_lesions(const cv::Mat& raw, const cv::Mat& enhanced, const SegmentParams& params);

// -- flow ----------------------------------------------------------------------

struct FlowParams {
  double mm_per_px = 0.1;
  double fps = 30;                  ///< frame rate of the probe (the time between the two frames)
  double max_velocity_mm_s = 60;    ///< fastest speed looked for (sets the search range)
  double min_length = 0.6;          ///< a vessel crosses at least this fraction of the frame's width
  double threshold = 18;            ///< grey levels below the background that make a lumen
};

/// One vessel: its axis and, once tracked, its flow.
struct VesselFinding {
  cv::Point2f axis_point;  ///< on the axis, at the frame's middle column when the axis crosses it
  double angle_rad = 0;    ///< axis direction (cos >= 0)
  double radius_px = 0;
  bool tracked = false;
  double velocity_mm_s = 0;       ///< peak, against the tissue
  double mean_velocity_mm_s = 0;  ///< over the lumen
  int direction = 1;
  double quality = 0;
};

/// Vessels in a raw B-mode frame (CV_8UC1): dark tubes across the field.
std::vector<VesselFinding> find_vessels(const cv::Mat& raw, const FlowParams& params);

/// Speckle tracking between `previous` and `current` (CV_8UC1 raw frames):
/// displacement along the axis of 3-pixel bands across the lumen and in the
/// tissue beside it, by normalised cross-correlation; the blood's against
/// the tissue's, as mm/s, fitted with a parabola across the lumen. False
/// when too few bands correlate.
bool track_flow(const cv::Mat& previous, const cv::Mat& current, VesselFinding& vessel, const FlowParams& params);

// -- geometry ------------------------------------------------------------------

/// Longest diameter of a polygon and its extent perpendicular to it, in the
/// polygon's units.
void feret_diameters(const std::vector<cv::Point2f>& polygon, double* longest, double* across);

/// Dice coefficient of two polygons rasterised on a width x height grid.
double dice(const std::vector<cv::Point2f>& a, const std::vector<cv::Point2f>& b, int width, int height);

}  // namespace swarmflow::ultrasound
