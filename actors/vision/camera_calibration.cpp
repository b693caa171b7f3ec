#include "vision/camera_calibration.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <utility>

#include <opencv2/calib3d.hpp>
#include <opencv2/imgproc.hpp>

namespace swarmflow::vision {

namespace {

constexpr double kPi = 3.14159265358979323846;
constexpr int kSearchWidth = 960;  ///< widest image the board is looked for in

std::string format_number(double v, const char* format) {
  char text[64];
  std::snprintf(text, sizeof text, format, v);
  return text;
}

}  // namespace

double corner_distortion(const cv::Mat& camera_matrix, const cv::Mat& distortion, cv::Size image_size) {
  const double fx = camera_matrix.at<double>(0, 0), fy = camera_matrix.at<double>(1, 1);
  const double cx = camera_matrix.at<double>(0, 2), cy = camera_matrix.at<double>(1, 2);
  // The farthest corner of the image, as an ideal point at the same radius.
  const double dx = std::max(cx, image_size.width - cx), dy = std::max(cy, image_size.height - cy);
  const double x = dx / fx, y = dy / fy;
  const double r2 = x * x + y * y;
  cv::Mat d = cv::Mat::zeros(1, 5, CV_64F);
  distortion.reshape(1, 1).colRange(0, std::min(5, static_cast<int>(distortion.total()))).copyTo(
      d.colRange(0, std::min(5, static_cast<int>(distortion.total()))));
  const double k1 = d.at<double>(0), k2 = d.at<double>(1), k3 = d.at<double>(4);
  return k1 * r2 + k2 * r2 * r2 + k3 * r2 * r2 * r2;
}

CameraCalibrator::CameraCalibrator(CalibrationOptions options) : options_(std::move(options)) {}

bool CameraCalibrator::add(const cv::Mat& grey, std::int64_t frame_index, std::string* error) {
  if (image_size_.empty()) {
    image_size_ = grey.size();
  } else if (grey.size() != image_size_) {
    if (error != nullptr) {
      *error = "frame " + std::to_string(frame_index) + " is " + std::to_string(grey.cols) + "x" +
               std::to_string(grey.rows) + ", the first was " + std::to_string(image_size_.width) + "x" +
               std::to_string(image_size_.height);
    }
    return false;
  }
  ++seen_;
  std::vector<cv::Point2f> corners;
  const int flags = cv::CALIB_CB_ADAPTIVE_THRESH | cv::CALIB_CB_NORMALIZE_IMAGE | cv::CALIB_CB_FAST_CHECK;
  // The board is looked for on a copy at most 960 px wide (the search costs
  // seconds on a 1080p frame and finds the corners to a pixel there as
  // well); cornerSubPix then refines them on the frame itself.
  const int reduce = (grey.cols + kSearchWidth - 1) / kSearchWidth;
  if (reduce > 1) {
    cv::Mat small;
    cv::resize(grey, small, cv::Size(grey.cols / reduce, grey.rows / reduce), 0, 0, cv::INTER_AREA);
    if (!cv::findChessboardCorners(small, options_.board, corners, flags)) return false;
    // resize maps pixel centres: x in `small` is reduce (x + 0.5) - 0.5 here.
    for (auto& c : corners) c = (c + cv::Point2f(0.5F, 0.5F)) * static_cast<float>(reduce) - cv::Point2f(0.5F, 0.5F);
  } else if (!cv::findChessboardCorners(grey, options_.board, corners, flags)) {
    return false;
  }
  cv::cornerSubPix(grey, corners, cv::Size(5, 5), cv::Size(-1, -1),
                   cv::TermCriteria(cv::TermCriteria::EPS + cv::TermCriteria::COUNT, 50, 0.001));
  corners_.push_back(std::move(corners));
  frames_.push_back(frame_index);
  return true;
}

bool CameraCalibrator::calibrate(Calibration* out, std::string* reason) const {
  const int found = views_found();
  if (found < options_.min_views) {
    *reason = "calibration refused: the " + std::to_string(options_.board.width) + "x" +
              std::to_string(options_.board.height) + " board was found in " + std::to_string(found) + " of " +
              std::to_string(seen_) + " frames, and at least " + std::to_string(options_.min_views) +
              " views are needed; show the board in more poses (or check --board, which counts inner corners)";
    return false;
  }
  std::vector<cv::Point3f> board;
  for (int y = 0; y < options_.board.height; ++y) {
    for (int x = 0; x < options_.board.width; ++x) {
      board.emplace_back(static_cast<float>(x * options_.square_mm), static_cast<float>(y * options_.square_mm), 0.0F);
    }
  }
  const std::vector<std::vector<cv::Point3f>> objects(corners_.size(), board);
  cv::Mat camera_matrix, distortion;
  std::vector<cv::Mat> rvecs, tvecs;
  // Radial k1 and k2; no tangential term and no k3, which a few views of a
  // flat board cannot tell apart from the rest.
  const int flags = cv::CALIB_ZERO_TANGENT_DIST | cv::CALIB_FIX_K3;
  const double rms = cv::calibrateCamera(objects, corners_, image_size_, camera_matrix, distortion, rvecs, tvecs, flags,
                                         cv::TermCriteria(cv::TermCriteria::COUNT + cv::TermCriteria::EPS, 100, 1e-9));
  if (!(rms <= options_.max_rms_px)) {
    *reason = "calibration refused: RMS reprojection error " + format_number(rms, "%.3f") + " px is above " +
              format_number(options_.max_rms_px, "%.3f") +
              " px; check --square-mm and --board, use sharper frames, or a flatter target";
    return false;
  }
  Calibration c;
  c.image_size = image_size_;
  c.camera_matrix = camera_matrix;
  c.distortion = cv::Mat::zeros(1, 5, CV_64F);
  distortion.reshape(1, 1).colRange(0, std::min(5, static_cast<int>(distortion.total()))).copyTo(
      c.distortion.colRange(0, std::min(5, static_cast<int>(distortion.total()))));
  c.rms_px = rms;
  c.views_used = found;
  c.views_seen = seen_;
  c.board = options_.board;
  c.square_mm = options_.square_mm;
  c.corner_distortion = corner_distortion(c.camera_matrix, c.distortion, image_size_);
  // The scale at the working plane: the depth of the plane of the flat view
  // along the optical axis over the focal length.
  const auto it = std::find(frames_.begin(), frames_.end(), options_.plane_frame);
  if (it != frames_.end()) {
    const auto i = static_cast<std::size_t>(it - frames_.begin());
    cv::Mat r;
    cv::Rodrigues(rvecs[i], r);
    const cv::Vec3d n(r.at<double>(0, 2), r.at<double>(1, 2), r.at<double>(2, 2));
    const cv::Vec3d t(tvecs[i].at<double>(0), tvecs[i].at<double>(1), tvecs[i].at<double>(2));
    const double tilt = std::acos(std::min(1.0, std::abs(n[2]))) * 180.0 / kPi;
    c.plane_frame = options_.plane_frame;
    c.plane_tilt_deg = tilt;
    if (tilt <= options_.max_plane_tilt_deg) {
      const double depth = n.dot(t) / n[2];
      const double f = (camera_matrix.at<double>(0, 0) + camera_matrix.at<double>(1, 1)) / 2;
      c.mm_per_px = std::abs(depth) / f;
    }
  }
  *out = std::move(c);
  return true;
}

bool write_calibration(const std::string& path, const Calibration& c, std::string* error) {
  try {
    cv::FileStorage fs(path, cv::FileStorage::WRITE);
    if (!fs.isOpened()) {
      *error = "cannot write the calibration file " + path;
      return false;
    }
    fs << "image_width" << c.image_size.width << "image_height" << c.image_size.height;
    fs << "camera_matrix" << c.camera_matrix << "distortion_coefficients" << c.distortion;
    fs << "rms_px" << c.rms_px << "views_used" << c.views_used << "views_seen" << c.views_seen;
    fs << "board_cols" << c.board.width << "board_rows" << c.board.height << "square_mm" << c.square_mm;
    fs << "corner_distortion" << c.corner_distortion;
    if (c.plane_frame >= 0) {
      fs << "plane_frame" << static_cast<int>(c.plane_frame) << "plane_tilt_deg" << c.plane_tilt_deg;
    }
    if (c.mm_per_px > 0) fs << "mm_per_px" << c.mm_per_px;
    fs.release();
  } catch (const cv::Exception& ex) {
    *error = "cannot write the calibration file " + path + ": " + ex.what();
    return false;
  }
  return true;
}

bool read_calibration(const std::string& path, Calibration* out, std::string* error) {
  if (!std::filesystem::is_regular_file(path)) {
    *error = "no calibration file " + path + " (make one with swarmflow calibrate)";
    return false;
  }
  try {
    cv::FileStorage fs(path, cv::FileStorage::READ);
    if (!fs.isOpened()) {
      *error = "cannot read the calibration file " + path;
      return false;
    }
    Calibration c;
    for (const char* key : {"image_width", "image_height", "camera_matrix", "distortion_coefficients"}) {
      if (fs[key].empty()) {
        *error = "calibration file " + path + " has no " + key;
        return false;
      }
    }
    fs["image_width"] >> c.image_size.width;
    fs["image_height"] >> c.image_size.height;
    fs["camera_matrix"] >> c.camera_matrix;
    fs["distortion_coefficients"] >> c.distortion;
    if (c.camera_matrix.rows != 3 || c.camera_matrix.cols != 3 || c.distortion.total() < 4 ||
        c.image_size.width <= 0 || c.image_size.height <= 0) {
      *error = "calibration file " + path + " has a malformed camera_matrix, distortion_coefficients or image size";
      return false;
    }
    c.camera_matrix.convertTo(c.camera_matrix, CV_64F);
    c.distortion.convertTo(c.distortion, CV_64F);
    fs["rms_px"] >> c.rms_px;
    fs["views_used"] >> c.views_used;
    fs["views_seen"] >> c.views_seen;
    fs["board_cols"] >> c.board.width;
    fs["board_rows"] >> c.board.height;
    fs["square_mm"] >> c.square_mm;
    fs["corner_distortion"] >> c.corner_distortion;
    if (!fs["plane_frame"].empty()) {
      int frame = -1;
      fs["plane_frame"] >> frame;
      c.plane_frame = frame;
      fs["plane_tilt_deg"] >> c.plane_tilt_deg;
    }
    if (!fs["mm_per_px"].empty()) fs["mm_per_px"] >> c.mm_per_px;
    *out = std::move(c);
  } catch (const cv::Exception& ex) {
    *error = "cannot read the calibration file " + path + ": " + ex.what();
    return false;
  }
  return true;
}

}  // namespace swarmflow::vision
