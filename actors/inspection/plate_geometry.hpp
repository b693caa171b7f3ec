#pragma once
/// \file plate_geometry.hpp
/// Finding a machined plate in a grey image and gauging it. Plain functions
/// on OpenCV images, shared by inspection.defects and inspection.measure.
///
/// Assumptions: one bright metal plate per frame on a darker background
/// (a conveyor belt), wholly in view; its holes are through-holes that show
/// the background; the plate lies with its long side within 45 degrees of
/// the image's x axis (parts arrive on the conveyor in a fixture-defined
/// orientation, not flipped).

#include <string>
#include <vector>

#include <opencv2/core.hpp>

namespace swarmflow::inspection {

/// A hole as segmented: a dark, round region inside the plate.
struct HoleBlob {
  cv::Point2d centre;    ///< px
  double radius_px = 0;  ///< of the disc with the same area
};

/// The plate as segmented from one frame, to the pixel.
struct PlateView {
  bool found = false;
  cv::Point2d centre;                  ///< px
  double width_px = 0, height_px = 0;  ///< long side, short side of the minimum-area rectangle
  double angle_rad = 0;                ///< direction of the long side against the x axis, in [-pi/4, pi/4]
  double threshold = 0;  ///< grey level that separates the belt from the metal, mean over the plate
  /// The threshold at each point of the image, on a grid reduced
  /// `threshold_scale` times (CV_32F): halfway between the metal and the belt
  /// under the lighting fitted there.
  cv::Mat threshold_map;
  int threshold_scale = 1;
  /// Metal over belt reflectance, the lighting factored out (1 = no contrast).
  double contrast_ratio = 0;
  /// The fitted lighting over the plate's bounding box: dimmest over
  /// brightest (1 = even).
  double light_evenness = 1;
  /// Why the plate, though found, must not be judged (empty = it may be):
  /// too little contrast between metal and belt for a reliable outline.
  std::string cannot_inspect;
  cv::Rect bounds;                     ///< bounding box of the outline, in the image
  std::vector<HoleBlob> holes;

  /// A point of the plate's own frame (px, origin at the centre, u along the
  /// long side) in the image.
  cv::Point2d to_image(double u_px, double v_px) const;
  /// A point of the image in the plate's own frame (px).
  cv::Point2d to_plate(cv::Point2d image_px) const;
  /// The belt/metal threshold at a point of the image.
  double threshold_at(double x, double y) const;
};

/// Below this metal/belt reflectance ratio the outline is not trusted and the
/// plate is flagged "cannot inspect" (docs/inspection.md gives the figures).
constexpr double kMinContrastRatio = 1.25;

/// Segments the plate of `grey` (CV_8U). On a 4x reduced copy, Otsu's
/// threshold gives a first split into metal and belt; then the lighting is
/// fitted as one smooth field shared by both (the logarithm of the grey level
/// is a cubic polynomial of the position plus one constant for the metal and
/// one for the belt; least squares away from the edges, with saturated pixels
/// and outliers left out), and each pixel is split again at the level halfway
/// between metal and belt under the lighting there. Twice. Then the largest
/// outer contour, its minimum-area rectangle, and inner contours that are
/// round (circularity of the convex hull >= 0.75, area >= 85 % of the
/// hull's) and at least `min_hole_diameter_px` across as holes. `found` is false when the two sides of Otsu's threshold differ by
/// less than 30 grey levels, or the largest region covers less than 5 % or
/// more than 90 % of the image. `cannot_inspect` is set when the metal/belt
/// reflectance ratio is below kMinContrastRatio.
PlateView find_plate(const cv::Mat& grey, double min_hole_diameter_px);

/// The plate gauged to a fraction of a pixel.
struct PlateGauge {
  bool ok = false;
  double width_px = 0, height_px = 0;  ///< between the fitted opposite edge lines
  double edge_rms_px = 0;              ///< spread of the edge points about their lines
  struct Hole {
    bool ok = false;
    cv::Point2d centre;
    double diameter_px = 0;
    double rms_px = 0;
  };
  std::vector<Hole> holes;  ///< one per PlateView::holes, same order
};

/// Gauges `view` on `grey`: each side is sampled by profiles across it (bilinear,
/// half-pixel steps, the middle 76 % of the side), each profile gives the
/// crossing of the level halfway between metal and belt to a fraction of a
/// pixel, and a line is fitted to the crossings of each side (outliers
/// dropped); each hole the same with radial profiles and a least-squares
/// circle, refined once about the fitted centre.
PlateGauge gauge_plate(const cv::Mat& grey, const PlateView& view);

}  // namespace swarmflow::inspection
