#pragma once
/// \file synthetic_ultrasound.hpp
/// A synthetic B-mode ultrasound probe with ground truth: a linear array
/// sliding slowly over soft tissue with lesions of four kinds (hypoechoic
/// solid, hyperechoic, anechoic cyst with posterior enhancement, irregular
/// margins) and a vessel whose blood flows with a parabolic profile. Frames
/// are made from a physical model: scatterers convolved with a point-spread
/// function, envelope detection, log compression, depth attenuation with
/// gain compensation, fully developed speckle. The same seed gives the same
/// frames. Used by `video.source` for `synthetic://ultrasound?...` and by
/// the ultrasound tests. docs/ultrasound.md describes the model, its
/// parameters and their ranges.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <opencv2/core.hpp>

namespace swarmflow::video {

/// One lesion as seen in one frame.
struct LesionTruth {
  int id = 0;                ///< stable within a scene
  std::string echogenicity;  ///< anechoic | hypoechoic | hyperechoic
  std::string margin;        ///< circumscribed | irregular
  std::string shape;         ///< round | oval | irregular
  std::string posterior;     ///< enhancement | none
  double contrast_db = 0;    ///< echo level against the tissue around it (anechoic: -inf, written as -60)
  double size_mm = 0;        ///< longest diameter (maximum Feret diameter of the outline)
  double width_mm = 0;       ///< extent perpendicular to the longest diameter
  double area_mm2 = 0;
  double centre_x_px = 0, centre_y_px = 0;
  std::vector<cv::Point2f> contour;  ///< the outline in frame pixels (closed polygon, 96 vertices)
};

/// One vessel as seen in one frame: a straight tube across the field.
struct VesselTruth {
  int id = 0;
  double axis_x_px = 0, axis_y_px = 0;  ///< a point of the axis (at the frame's middle column)
  double angle_deg = 0;                 ///< the axis against the horizontal, positive = down to the right
  double radius_mm = 0;
  /// Peak (centre-line) speed of the blood against the tissue, mm/s; the
  /// profile is parabolic, so the mean over the lumen is half of it.
  double velocity_mm_s = 0;
  /// +1: blood flows towards increasing x along the axis; -1: the other way.
  int direction = 1;
};

/// What frame `index` of the probe shows.
struct UltrasoundTruth {
  std::uint64_t frame_index = 0;
  std::uint64_t scene = 0;  ///< frame_index / scene_frames
  double mm_per_px = 0.1;
  double fps = 30;
  double dynamic_range_db = 60;
  double probe_x_mm = 0, probe_z_mm = 0;  ///< probe position against the scene (slow motion)
  std::vector<LesionTruth> lesions;
  std::vector<VesselTruth> vessels;
};

/// Parameters of `synthetic://ultrasound?seed=1&...` (docs/ultrasound.md).
struct SyntheticUltrasoundConfig {
  std::uint64_t seed = 1;
  int width = 640;
  int height = 480;
  double mm_per_px = 0.1;        ///< pixel pitch, laterally and in depth
  double fps = 30;               ///< the probe's frame rate: time between frames in the model
  int scene_frames = 90;         ///< frames per scene; each scene has new lesions and a new vessel
  int max_lesions = 3;           ///< 1-3 lesions a scene
  int vessels = 1;               ///< 0 or 1 vessel a scene
  double f0_mhz = 7.5;           ///< centre frequency
  double attenuation = 0.5;      ///< tissue attenuation, dB/(cm MHz)
  double dynamic_range_db = 60;  ///< log compression: this many dB onto 0-255
  double noise_db = -38;         ///< electronic noise power against the tissue's mean echo
  double motion_mm = 2.0;        ///< amplitude of the probe's lateral sliding
};

/// Reads `synthetic://ultrasound?key=value&...` into `config`; false with
/// `*error` set for an unknown key (naming the known ones) or a bad value.
bool parse_ultrasound_uri(const std::string& uri, SyntheticUltrasoundConfig* config, std::string* error);

/// Renders frames of one synthetic probe. Each scene (lesions, vessel,
/// scatterers) is built when first needed (about 10-20 ms at 640x480) and
/// kept; a frame then costs a few milliseconds. `render` may be called from
/// several threads at once.
class SyntheticUltrasound {
 public:
  explicit SyntheticUltrasound(SyntheticUltrasoundConfig config);
  ~SyntheticUltrasound();
  SyntheticUltrasound(const SyntheticUltrasound&) = delete;
  SyntheticUltrasound& operator=(const SyntheticUltrasound&) = delete;

  const SyntheticUltrasoundConfig& config() const { return config_; }
  /// Renders frame `index` as BGR with equal channels (3 bytes a pixel,
  /// rows `stride` bytes apart) and returns what it shows.
  UltrasoundTruth render(std::uint64_t index, std::uint8_t* bgr, std::size_t stride) const;
  /// Renders frame `index` as one grey plane (CV_8UC1, width x height); a
  /// `grey` of that size and type already (a view of a payload) is written
  /// in place.
  UltrasoundTruth render_grey(std::uint64_t index, cv::Mat& grey) const;
  /// What frame `index` shows, without rendering it.
  UltrasoundTruth truth(std::uint64_t index) const;

  struct Scene;

 private:
  std::shared_ptr<const Scene> scene(std::uint64_t s) const;
  SyntheticUltrasoundConfig config_;
  mutable std::mutex mutex_;
  mutable std::vector<std::shared_ptr<const Scene>> cache_;  ///< the scenes built last, newest last
  cv::Mat noise_;  ///< complex electronic noise, CV_32FC2, larger than a frame
};

/// The ground truth as one line of JSON, and back.
std::string to_json(const UltrasoundTruth& truth);
std::optional<UltrasoundTruth> parse_ultrasound_truth(std::string_view json);

/// Whether a frame's ground truth JSON is an ultrasound probe's.
bool is_ultrasound_truth(std::string_view json);

}  // namespace swarmflow::video
