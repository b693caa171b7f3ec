#pragma once
/// \file camera_calibration.hpp
/// Camera calibration from views of a checkerboard (OpenCV
/// findChessboardCorners, cornerSubPix, calibrateCamera), and the
/// calibration file that `swarmflow calibrate` writes and `vision.undistort`
/// and `inspection.measure` read. docs/inspection.md describes the method,
/// the file and the distortion it supports.
///
/// The file (cv::FileStorage YAML):
///   image_width, image_height   frames it applies to, pixels
///   camera_matrix               3x3
///   distortion_coefficients     1x5 (k1 k2 p1 p2 k3); p1 = p2 = k3 = 0 as fitted
///   rms_px                      RMS reprojection error over every corner used
///   views_used, views_seen      frames where the board was found, frames looked at
///   board_cols, board_rows      inner corners; square_mm
///   corner_distortion           relative radial displacement at the image corner
///                               (the synthetic camera's k1: -0.01 = 1 % barrel)
///   mm_per_px                   scale at the working plane after undistortion; present
///                               only when the working-plane view was used and lies flat
///   plane_frame, plane_tilt_deg the view that gave mm_per_px and its tilt

#include <cstdint>
#include <string>
#include <vector>

#include <opencv2/core.hpp>

namespace swarmflow::vision {

/// What a calibration must meet, and the board it looks for.
struct CalibrationOptions {
  cv::Size board{9, 6};    ///< inner corners across and down
  double square_mm = 10;   ///< side of a square
  int min_views = 8;       ///< fewer views with the board found: refused
  double max_rms_px = 0.5; ///< larger RMS reprojection error: refused
  std::int64_t plane_frame = 0;  ///< frame index of the view lying on the working plane (gives mm_per_px)
  double max_plane_tilt_deg = 2; ///< that view must lie this flat for mm_per_px to be written
};

/// A camera's calibration, as written to and read from the file.
struct Calibration {
  cv::Size image_size;
  cv::Mat camera_matrix;  ///< CV_64F 3x3
  cv::Mat distortion;     ///< CV_64F 1x5
  double rms_px = 0;
  int views_used = 0;
  int views_seen = 0;
  cv::Size board;
  double square_mm = 0;
  double corner_distortion = 0;
  double mm_per_px = 0;  ///< 0 = not derived
  std::int64_t plane_frame = -1;
  double plane_tilt_deg = 0;
};

/// The relative radial displacement at the corner of the image that
/// `camera_matrix` and `distortion` imply, measured from the principal point
/// to the farthest image corner.
double corner_distortion(const cv::Mat& camera_matrix, const cv::Mat& distortion, cv::Size image_size);

/// Collects views of the board, then calibrates.
class CameraCalibrator {
 public:
  explicit CameraCalibrator(CalibrationOptions options);
  /// Looks for the board in `grey` (CV_8U) of frame `frame_index`; true when
  /// found (its corners are kept). False with `*error` set when the image
  /// size differs from earlier frames' (the frame is not used).
  bool add(const cv::Mat& grey, std::int64_t frame_index, std::string* error = nullptr);
  int views_seen() const { return seen_; }
  int views_found() const { return static_cast<int>(corners_.size()); }
  /// Calibrates over the views found. False with `*reason` set when the
  /// calibration is refused (too few views, RMS too large), naming the
  /// figure, the limit and what to do.
  bool calibrate(Calibration* out, std::string* reason) const;

 private:
  CalibrationOptions options_;
  cv::Size image_size_;
  int seen_ = 0;
  std::vector<std::vector<cv::Point2f>> corners_;
  std::vector<std::int64_t> frames_;
};

/// Writes `calibration` to `path` with cv::FileStorage; false with `*error` set.
bool write_calibration(const std::string& path, const Calibration& calibration, std::string* error);
/// Reads a file written by write_calibration; false with `*error` set when it
/// is missing, unreadable or lacks a field.
bool read_calibration(const std::string& path, Calibration* calibration, std::string* error);

}  // namespace swarmflow::vision
