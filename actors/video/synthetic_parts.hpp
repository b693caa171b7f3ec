#pragma once
/// \file synthetic_parts.hpp
/// A synthetic inspection camera with ground truth: machined plates with round
/// holes on a moving conveyor, with sensor noise, uneven lighting, surface
/// texture, slight motion blur and a pose varying within a few degrees, and
/// seeded defects of four classes (scratch, pit, crack, missing_hole). The
/// same seed gives the same frames. Used by `video.source` for
/// `synthetic://parts?...` and by the inspection tests. docs/inspection.md
/// describes what is rendered and the bounds on defect size and contrast.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <opencv2/core.hpp>

namespace swarmflow::video {

/// One defect as drawn, in pixels of the frame.
struct DefectTruth {
  std::string class_name;  ///< scratch | pit | crack | missing_hole
  float x = 0, y = 0, width = 0, height = 0;
  float contrast = 0;  ///< grey levels against the metal before lighting (negative = darker); 0 for missing_hole
};

/// One hole as machined (a missing hole has `missing` set and is not drilled).
struct HoleTruth {
  double x_mm = 0, y_mm = 0;  ///< centre, in the plate's own frame (origin: plate centre)
  double diameter_mm = 0;
  bool missing = false;
};

/// What frame `index` of a camera shows.
struct PartTruth {
  std::uint64_t part_id = 0;  ///< unique per station and part; both cameras of a station share it
  int station = 0;
  int camera = 0;
  std::uint64_t frame_index = 0;
  std::string variant;  ///< name of the part variant (see `synthetic_part_variants`)
  double mm_per_px = 0.1;
  double width_mm = 0, height_mm = 0;  ///< true outer size of the plate
  double angle_deg = 0;                ///< pose of the plate in the image
  double centre_x_px = 0, centre_y_px = 0;
  std::vector<HoleTruth> holes;  ///< in the order of the variant's drawing
  std::vector<DefectTruth> defects;
  /// The lens: radial distortion `k1` as defined in SyntheticPartsConfig,
  /// and the focal length of the ideal pinhole camera, in pixels.
  double k1 = 0;
  double focal_px = 0;
  /// Calibration target frames only (variant "checkerboard"): side of a
  /// square and the board's tilt against the working plane.
  double square_mm = 0;
  double tilt_deg = 0;
  /// Specular glints on the plate (`glints=`): boxes of each glint with its
  /// halo, in pixels. They are not defects; a detector must not report them.
  struct Glint {
    float x = 0, y = 0, width = 0, height = 0;
  };
  std::vector<Glint> glints;
};

/// The drawing of one part variant: nominal outer size and hole pattern, in mm,
/// in the plate's own frame (origin at the plate centre, x along the long side,
/// y downwards in the image when the part lies unrotated).
struct PartVariant {
  struct Hole {
    double x_mm, y_mm, diameter_mm;
  };
  std::string name;
  double width_mm, height_mm;
  std::vector<Hole> holes;
};

/// The variants the synthetic camera machines, each as likely as the others.
const std::vector<PartVariant>& synthetic_part_variants();

/// The part id a station gives its `index`-th part: (station + 1) * 1'000'000 + index.
std::uint64_t synthetic_part_id(int station, std::uint64_t index);

/// What a synthetic camera looks at.
enum class SyntheticScene {
  parts,         ///< `synthetic://parts?...`: plates on the conveyor
  checkerboard,  ///< `synthetic://checkerboard?...`: a calibration target at varied poses
};

/// The synthetic camera is an ideal pinhole camera this far above the
/// working plane (the conveyor), looking straight down; its focal length in
/// pixels is kWorkingDistanceMm / mm_per_px.
constexpr double kWorkingDistanceMm = 300.0;

/// Parameters of `synthetic://parts?seed=7&station=0&camera=0&...`. The
/// field of view is width x height x mm_per_px (192 x 108 mm by default);
/// the plates (up to 130 x 85 mm) need about 140 x 100 mm of it, so a smaller
/// frame needs a larger mm_per_px (960x540 at 0.2, 640x360 at 0.3).
struct SyntheticPartsConfig {
  std::uint64_t seed = 7;
  int width = 1920;
  int height = 1080;
  int station = 0;
  int camera = 0;
  double mm_per_px = 0.1;    ///< scale at the plate (the documented calibration)
  double defect_rate = 0.6;  ///< chance that a part has at least one defect
  double noise_sigma = 3.0;  ///< sensor noise, grey levels
  /// Radial lens distortion. A point of the ideal (pinhole) image at
  /// distance r from the image centre ((width - 1) / 2, (height - 1) / 2) is
  /// seen at r (1 + k1 (r / R)^2), R = half the image diagonal,
  /// hypot(width, height) / 2. So k1 is the relative displacement at the
  /// image corner: -0.01 is 1 % barrel, +0.01 1 % pincushion. It is OpenCV's
  /// k1 times (R / focal_px)^2. Supported: [-0.02, 0.02]; accepted up to
  /// [-0.1, 0.1].
  double k1 = 0.0;
  SyntheticScene scene = SyntheticScene::parts;
  /// Checkerboard only: inner corners across and down, side of a square,
  /// and the largest tilt of the board against the working plane. Frame 0
  /// lies flat on the working plane (the view that gives the scale).
  int board_cols = 9;
  int board_rows = 6;
  double square_mm = 10.0;
  double max_tilt_deg = 25.0;
  // -- defects and light as a real line shows them (all off by default) ----
  /// Largest sagitta of a scratch as a fraction of its length: each scratch
  /// is an arc or an S-shape with a sagitta uniform in [0, curved] x length.
  /// [0, 0.2]; 0 = straight.
  double curved = 0.0;
  /// Chance that a scratch shows a bright and a dark wall side by side (a
  /// groove under side light). [0, 1].
  double two_tone = 0.0;
  /// Chance that a crack has one or two branches. [0, 1].
  double branching = 0.0;
  /// Pits have an irregular, lobed outline instead of an ellipse with
  /// satellite blobs.
  bool irregular_pits = false;
  /// Specular glints per part, 0-`glints` (a saturated core with a halo). [0, 8].
  int glints = 0;
  /// Chance that a glint is a hot spot that does not saturate: its core
  /// reaches 200-232 grey levels, below clipping, whatever the light there
  /// (its halo as a saturating glint's). [0, 1].
  double soft_glints = 0.0;
  /// Extra directional light: the lighting changes by a factor exp(side_light)
  /// from the image centre to the end of the half diagonal, along a random
  /// direction. [0, 1.5].
  double side_light = 0.0;
  /// Extra vignetting: added to the vignette's k (lighting falls as
  /// exp(-k r^2), r in half diagonals). [0, 3].
  double vignette = 0.0;
  /// Grey level (reflectance) of the belt; 0 = the default dark belt (38-50). [0, 200].
  double belt_level = 0.0;
};

/// Where the lens of `config` shows a point of the ideal image (pixels).
void distort_point(const SyntheticPartsConfig& config, double x, double y, double* xd, double* yd);

/// Reads `synthetic://parts?key=value&...` or
/// `synthetic://checkerboard?key=value&...` into `config` (keys as above;
/// `board` is written WxH, e.g. 9x6 inner corners); false with `*error` set
/// for an unknown key or a bad value.
bool parse_synthetic_uri(const std::string& uri, SyntheticPartsConfig* config, std::string* error);

/// Renders frames of one synthetic camera. Construction precomputes the
/// camera's textures, lighting and noise (50-200 ms); `render` is then cheap
/// (a few milliseconds at 1080p) and only reads that state, so one instance
/// may render on several threads at once.
class SyntheticParts {
 public:
  explicit SyntheticParts(SyntheticPartsConfig config);
  ~SyntheticParts();
  SyntheticParts(SyntheticParts&&) noexcept;
  SyntheticParts& operator=(SyntheticParts&&) noexcept;
  SyntheticParts(const SyntheticParts&) = delete;
  SyntheticParts& operator=(const SyntheticParts&) = delete;

  const SyntheticPartsConfig& config() const { return config_; }
  /// Renders frame `index` as BGR (3 bytes a pixel, rows `stride` bytes apart)
  /// into `bgr` and returns what it shows. Deterministic in (seed, station,
  /// camera, index); the two cameras of a station see the same part at the
  /// same index, each from its own pose and lighting.
  PartTruth render(std::uint64_t index, std::uint8_t* bgr, std::size_t stride) const;
  /// What frame `index` shows, without rendering it.
  PartTruth truth(std::uint64_t index) const;

 private:
  struct Precomputed;
  PartTruth render_target(std::uint64_t index, std::uint8_t* bgr, std::size_t stride) const;
  /// Blur along the belt, lighting, lens, sensor noise; then BGR into `bgr`.
  /// `glare` (CV_8U, optional) is added after the lighting: specular light,
  /// which saturates the sensor.
  void expose(cv::Mat& reflect, double blur_px, double gain, int noise_x, int noise_y, std::uint8_t* bgr,
              std::size_t stride, const cv::Mat* glare = nullptr) const;
  SyntheticPartsConfig config_;
  std::unique_ptr<Precomputed> pre_;
};

/// The ground truth as one line of JSON, and back.
std::string to_json(const PartTruth& truth);
std::optional<PartTruth> parse_truth(std::string_view json);

}  // namespace swarmflow::video
