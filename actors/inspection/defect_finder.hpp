#pragma once
/// \file defect_finder.hpp
/// Classical surface inspection of a machined plate: the plain functions behind
/// inspection.defects, kept apart from the stage so they can be tested and
/// tuned on images alone.
///
/// Method, on the grey image of one frame:
///  1. the plate and its holes are segmented (find_plate);
///  2. the surface to inspect is the plate shrunk by `edge_margin_mm`, less
///     every found hole grown by `hole_margin_mm`;
///  3. illumination is normalised: the background is the masked mean over a
///     window of `background_mm`, on a 4x reduced copy, in two passes (the
///     second leaves out what stood out in the first, so a dark defect does not
///     darken its surroundings' background); the residual is the grey level's
///     deviation from the background in percent of it;
///  4. the residual's noise sigma is estimated robustly (median absolute
///     deviation) and the residual is split by polarity into dark and bright
///     hysteresis masks: a piece grows where |residual| > k_low sigma and is
///     kept when it reaches k_high sigma somewhere;
///  5. kept pieces closer than `join_mm` form one region; strokes that
///     continue one another across a gap of up to `bridge_mm` (judged on the
///     directions of the two ends that face each other, so a curved stroke
///     broken on its bend joins too) are joined, including faint stroke-like
///     pieces that never reached k_high (a faint scratch breaks up where the
///     noise dips); a dark and a bright stroke side by side are one
///     two-toned mark;
///  6. each region is measured: length along its principal axis, mean
///     thickness, elongation, orientation coherence of its gradients (the
///     structure tensor's anisotropy), jaggedness of its centre line, peak
///     and mean contrast;
///  7. regions are classified: a dark region whose core (the part at least
///     half as dark as its darkest point) is small and compact -> pit; long,
///     thin, coherent and smooth however it bends -> scratch (either
///     polarity, or both); long, thin, dark and zig-zagging, branched or
///     clearly incoherent -> crack, with the dark strokes within
///     `crack_gap_mm` of it; anything else is texture or noise and is
///     dropped;
///  8. faint strokes: from each faint region that classification left out
///     (a clearer one was judged on its shape), and each faint stroke-like
///     piece, the stroke is followed along its own
///     direction in segments of 0.8 mm, each turned by up to 15 degrees and
///     moved by up to a pixel across, while a segment's ridge contrast (its
///     mean less that of parallel lines 0.3 mm to either side, the mark's
///     polarity on both counts) holds 2 local noise sigmas; one short
///     segment is bridged. A stroke so followed is a scratch when it is at
///     least `min_scratch_mm` long, smooth, at least `min_trace_contrast`
///     percent, and its mean ridge contrast stands `trace_evidence` robust
///     spreads above what segments of the surface within 4 mm of it give
///     along the same direction (so texture that runs one way, as brushed
///     metal does, is measured against itself), more in proportion where
///     that spread exceeds 1.2 times the spread across the stroke (texture
///     running along it strings its streaks together). Scratches already
///     found on it become one scratch over its extent;
///  9. missing holes: the plate's size identifies its drawing (part_drawings),
///     the drawing's holes are placed with the plate's pose, and a drawn hole
///     with no hole found near it, where the image shows metal, is a
///     missing_hole.
/// The score of a finding grows with its peak contrast above k_high (0.5 at
/// the threshold, towards 0.99); a missing hole's score is the fraction of
/// metal where the hole should be.
///
/// Specular glints, saturated or hot spots below clipping, are left out of
/// the surface with their halos (step 3).
///
/// Assumptions: a bright metal plate on a darker background, wholly in view;
/// lighting may vary smoothly (by tens of percent over the plate) but not
/// sharply; defects lie at least `edge_margin_mm` + their own size from the
/// plate's edges and at least `hole_margin_mm` from holes; the scale
/// `mm_per_px` is known (it converts the drawing and the size limits).

#include <string>
#include <vector>

#include <opencv2/core.hpp>

#include "inspection/plate_geometry.hpp"

namespace swarmflow::inspection {

/// Tuning of find_defects; the defaults suit the documented camera (see
/// docs/inspection.md).
struct DefectFinderParams {
  double mm_per_px = 0.1;             ///< scale at the plate
  double k_low = 3.0;                 ///< hysteresis: grow regions above k_low noise sigmas
  double k_high = 5.5;                ///< hysteresis: keep regions that reach k_high sigmas
  double min_contrast = 3.0;          ///< floor of the low threshold, percent of the local level
  double edge_margin_mm = 1.5;        ///< band along the plate's edges left out
  double hole_margin_mm = 1.0;        ///< ring around holes left out
  double background_mm = 4.0;         ///< window of the background estimate
  double join_mm = 0.6;               ///< pieces of a region closer than this are joined
  double bridge_mm = 3.0;             ///< collinear strokes with a gap up to this are joined
  double min_pit_px = 3.0;            ///< smallest pit, px across
  double max_pit_mm = 3.0;            ///< largest pit, mm across
  double min_pit_sigmas = 6.5;        ///< a pit's darkest point, local noise sigmas
  double min_scratch_mm = 5.0;        ///< shortest scratch, mm
  double min_crack_mm = 2.5;          ///< shortest crack, mm (end to end)
  double min_elongation = 4.0;        ///< length over thickness of a scratch or crack
  double min_scratch_sigmas = 4.3;    ///< a scratch's mean contrast, noise sigmas
  double min_crack_sigmas = 4.5;      ///< a crack's mean contrast, noise sigmas
  double crack_coherence = 0.65;      ///< strokes whose gradients agree less than this (stretch by stretch) are cracks
  double crack_jaggedness = 1.2;      ///< strokes whose centre line strays more than this (px RMS) about its 2 mm mean are cracks
  double min_zigzag_mm = 0.1;         ///< a crack's centre line strays at least this much (RMS) about its 2 mm mean,
                                      ///< or it branches, or its gradients agree less than max_crack_coherence
  double max_crack_coherence = 0.5;   ///< see min_zigzag_mm
  double coherence_mm = 2.5;          ///< stretch of a stroke over which gradient coherence is measured
  double min_branch_mm = 1.0;         ///< a stroke that runs as two strands for this long is branched (a crack)
  double pair_mm = 0.5;               ///< dark and bright strokes this close side by side are one two-toned mark
  double crack_gap_mm = 1.0;          ///< dark strokes this close to a crack are pieces of it
  double trace_evidence = 5.0;        ///< a faint stroke followed along its length is a scratch when its mean ridge
                                      ///< contrast stands this many robust spreads above what the surface around
                                      ///< it gives along the same direction...
  double min_trace_contrast = 5.0;    ///< ...and is at least this much, percent of the local level
  double noise_tile_mm = 8.0;         ///< tile of the local noise estimate
  double saturation_level = 250;      ///< grey level from which a pixel is saturated (a glint's core)
  double min_glint_mm = 0.4;          ///< a glint's saturated core is a round patch at least this wide
  double min_hot_spot = 15.0;         ///< a hot spot that does not saturate is this much brighter (percent) than its background...
  double min_hot_spot_mm = 1.0;       ///< ...over a round patch at least this wide; it is left out as a glint is
  double glint_margin_mm = 1.0;       ///< margin around a glint and its halo left out
  double min_light_evenness = 0.15;   ///< lighting over the plate, dimmest / brightest, below which: cannot inspect
  double max_glare_fraction = 0.15;   ///< more of the surface left out for glints than this: cannot inspect
  bool check_holes = true;            ///< look for missing holes (needs a known drawing)
  double drawing_tolerance_mm = 3.0;  ///< how far the plate's size may be from a drawing's
  bool keep_rejected = false;         ///< also report regions classified as texture (empty class), for tuning
};

/// What classification saw in a region (zero for missing_hole).
struct RegionFeatures {
  double length_px = 0;     ///< extent along the principal axis
  double thickness_px = 0;  ///< area over length
  double elongation = 0;    ///< length over thickness
  double jaggedness = 0;    ///< RMS of the stroke's centre line about a straight line, px
  double coherence = 0;     ///< agreement of the gradients' orientation over the region, 0..1
  double peak_sigmas = 0;   ///< largest |residual|, in noise sigmas
  double mean_sigmas = 0;   ///< mean |residual|, in noise sigmas
  bool dark = true;
  double forks_px = 0;    ///< length along the axis where the region runs as two strands or more
  bool two_tone = false;  ///< dark and bright walls of one mark, joined
};

/// One defect found, in pixels of the frame.
struct FoundDefect {
  std::string class_name;  ///< scratch | pit | crack | missing_hole; empty for a rejected region
  cv::Rect2f box;
  float score = 0;  ///< confidence, 0..1
  RegionFeatures features;
};

/// Everything one frame yields.
struct DefectFinding {
  PlateView plate;
  std::vector<FoundDefect> defects;
  double noise_sigma = 0;  ///< robust sigma of the residual, percent
  int glints = 0;              ///< specular glints found and left out
  double glare_fraction = 0;   ///< of the surface left out for glints
  /// Why the frame was not inspected (empty = it was): its defects are then
  /// no verdict.
  std::string cannot_inspect;
};

/// Finds the defects of the plate in `grey` (CV_8U).
DefectFinding find_defects(const cv::Mat& grey, const DefectFinderParams& params);

}  // namespace swarmflow::inspection
