#pragma once
/// \file defect_detector.hpp
/// inspection.defects — finds surface defects on machined plates with
/// classical image processing (OpenCV, no learned model).
///
/// Input `frames` (swarmflow.schema.Frame): BGR, RGB, BGRA, GRAY8 or NV12 (luma).
/// Output `results` (swarmflow.schema.VisionResults): one per frame, with
///   camera_id and frame_index of the frame, part_id (also set in the envelope
///   header when the frame's header had none and its ground truth names one),
///   station (from the part id, see below), one Defect per finding
///   {class_name: scratch | pit | crack | missing_hole, box in pixels, score
///   0..1}, no measurements, partial = false, and the frame's ground_truth
///   copied unchanged (for evaluation downstream; never used to decide).
///
/// Method (defect_finder.hpp has the details): plate segmentation under a
/// fitted lighting field (plate_geometry.hpp); glints (round saturated
/// patches) and their halos left out; illumination normalised by a masked
/// background mean over `background_mm` in two passes (the second without
/// the first's outliers); relative residual in local noise sigmas (per
/// `noise_tile_mm` tile) thresholded with hysteresis at k_low / k_high, dark
/// and bright apart; pieces within `join_mm` joined, strokes that continue
/// one another across gaps up to `bridge_mm` joined; dark and bright strokes
/// side by side (`pair_mm`) joined into one two-toned mark; faint strokes
/// followed along their own direction and judged on the evidence gathered
/// along them (`trace_evidence`, `min_trace_contrast`); regions
/// classified by features measured along their own centre line (arc length,
/// elongation, jaggedness about a 2 mm moving average, branches, stretch-wise
/// gradient coherence) and contrast; missing holes by placing the drawing's
/// holes (part_drawings.hpp, chosen by the plate's measured size) with the
/// plate's pose and checking for metal where a hole should be.
///
/// Parameters (name, default, range):
///   mm_per_px            0.1   [0.005, 10]  scale at the plate (calibration)
///   k_low                3.0   [1, 20]      hysteresis low threshold, noise sigmas
///   k_high               5.5   [1, 50]      hysteresis high threshold, noise sigmas
///   min_contrast         3.0   [0, 100]     floor of the low threshold, % of the local level
///   edge_margin_mm       1.5   [0, 50]      band along the plate's edges not inspected
///   hole_margin_mm       1.0   [0, 50]      ring around holes not inspected
///   background_mm        4.0   [0.5, 100]   window of the background estimate
///   join_mm              0.6   [0, 10]      pieces closer than this are one defect
///   bridge_mm            3.0   [0, 50]      collinear strokes across a gap up to this are one defect
///   min_pit_px           3.0   [1, 100]     smallest pit, px across
///   max_pit_mm           3.0   [0.1, 50]    largest pit, mm across
///   min_pit_sigmas       6.5   [1, 1000]    a pit's darkest point, local noise sigmas
///   min_scratch_mm       5.0   [0, 500]     shortest scratch
///   min_crack_mm         2.5   [0, 500]     shortest crack (end to end)
///   min_elongation       4.0   [1, 1000]    length over thickness of a scratch or crack
///   min_scratch_sigmas   4.3   [0, 1000]    a scratch's mean contrast, noise sigmas (15 % less
///                                           at twice min_scratch_mm and longer)
///   min_crack_sigmas     4.5   [0, 1000]    a crack's mean contrast, noise sigmas (likewise)
///   crack_coherence      0.65  [0, 1]       strokes whose gradient orientations agree less
///                                           (stretch by stretch) are cracks
///   crack_jaggedness     1.2   [0, 100]     strokes whose centre line strays more (px RMS) from
///                                           its own 2 mm moving average are cracks
///   coherence_mm         2.5   [0.1, 100]   stretch over which gradient coherence is measured
///   min_branch_mm        1.0   [0, 100]     two strands side by side this long: branched (crack)
///   pair_mm              0.5   [0, 10]      dark and bright strokes this close: one two-toned mark
///   trace_evidence       5.0   [0, 1000]    a faint stroke followed along its length is a scratch
///                                           when its ridge contrast stands this many robust spreads
///                                           above what the surface around gives along its direction
///   min_trace_contrast   5.0   [0, 100]     ...and is at least this, % of the local level
///   noise_tile_mm        8.0   [1, 200]     tile of the local noise estimate
///   saturation_level     250   [1, 255]     grey level of a saturated pixel (a glint's core)
///   min_glint_mm         0.4   (finder only) a glint's core is a round patch this wide or more
///   glint_margin_mm      1.0   [0, 50]      margin left out around a glint and its halo
///   min_light_evenness   0.15  [0, 1]       dimmest / brightest lighting over the plate; below:
///                                           cannot inspect
///   max_glare_fraction   0.15  [0, 1]       surface left out for glints; above: cannot inspect
///   check_holes          true               report drawn holes that were not drilled
///   drawing_tolerance_mm 3.0   [0, 100]     how far the plate's size may be from a drawing's
///   min_score            0.0   [0, 1]       drop findings less confident than this
///   fault_replica        -1   [-1, 1023]   the replica the faults below apply to (-1: none)
///   lie_every            0                 it reports the opposite verdict on every k-th frame
///                                          (a made-up scratch on a clean part, nothing on a
///                                          defective one) with confidence lie_confidence
///   lie_confidence       0.99 [0, 1]
///   slow_ms              0    [0, 60000]   it takes this much longer per frame
///   crash_after          0                 it answers nothing after this many frames (hung)
///
/// The header's `vote_key` is a digest of the verdict (the defect classes
/// found, as a multiset, and whether the frame could be inspected), and its
/// `confidence` that of the least sure finding: a voter (consensus.vote)
/// compares detector replicas by them.
/// Counters: `frames`, `defects`, `no_plate` (frames where no plate was
/// found), `bad_frames` (malformed frames, which fail the step),
/// `cannot_inspect` (frames given no verdict).
///
/// Cannot inspect: a frame whose plate is not found, whose metal/belt
/// reflectance ratio is below 1.25, whose lighting over the plate falls below
/// `min_light_evenness` of its brightest, or where glints leave more than
/// `max_glare_fraction` of the surface out, gets `cannot_inspect` set to the
/// reason and no defects. It is no verdict: inspection.batch_quality counts
/// it as not inspected, never as passed.
///
/// Assumptions: one bright, matte-to-brushed metal plate per frame on a darker
/// background (a conveyor belt, reflectance ratio >= 1.25), wholly in view,
/// long side within 45 degrees of the image's x axis; lighting smooth over
/// the plate apart from saturated glints (side light and vignetting down to
/// 15 % of the brightest are normalised away); the scale `mm_per_px` is known; defects lie at least
/// `edge_margin_mm` from the plate's edges and `hole_margin_mm` from holes;
/// the part is one of part_drawings() for missing holes to be found (other
/// parts are still inspected for surface defects). Defaults are tuned for the
/// synthetic camera at 0.1-0.2 mm/px (docs/inspection.md gives the figures).
/// Part ids follow the synthetic camera's convention (station + 1) *
/// 1'000'000 + index, from which the station is read; otherwise the ground
/// truth's `station`, otherwise -1.
///
/// ```yaml
/// stages:
///   - id: camera
///     type: video.source
///     params: {uri: "synthetic://parts?seed=7&station=0&camera=0", width: 1920, height: 1080, fps: 30}
///   - id: detect
///     type: inspection.defects
///     replicas: {min: 2, max: 8}
///     inputs: {frames: camera/frames}
///     queue: {capacity: 4, overflow: drop_oldest}
///     params: {mm_per_px: 0.1, k_high: 5.5}
/// ```

#include <atomic>
#include <cstdint>

#include <opencv2/core.hpp>

#include <swarmflow/schema/frame_generated.h>
#include <swarmflow/schema/vision_generated.h>
#include <swarmflow/stage.hpp>

#include "inspection/defect_finder.hpp"

namespace swarmflow::inspection {

class DefectDetector final : public Stage {
 public:
  void setup(StageSpec& s) override;
  Status start(StageContext& ctx) override;
  Status process(Inputs& in, Outputs& out, StageContext& ctx) override;

 private:
  InputPort<schema::Frame> frames_;
  OutputPort<schema::VisionResults> results_;
  DefectFinderParams params_;
  double min_score_ = 0;
  // -- faults of one replica (fault_replica), for voting tests and benchmarks
  std::int64_t fault_replica_ = -1;
  std::int64_t lie_every_ = 0;
  double lie_confidence_ = 0.99;
  double slow_ms_ = 0;
  std::int64_t crash_after_ = 0;
  bool faulty_ = false;
  std::int64_t seen_ = 0;
  std::atomic<std::int64_t>* lies_ = nullptr;
  std::atomic<std::int64_t>* silenced_ = nullptr;
  cv::Mat grey_;  ///< reused conversion buffer
  std::atomic<std::int64_t>* frames_seen_ = nullptr;
  std::atomic<std::int64_t>* defects_found_ = nullptr;
  std::atomic<std::int64_t>* no_plate_ = nullptr;
  std::atomic<std::int64_t>* bad_frames_ = nullptr;
  std::atomic<std::int64_t>* cannot_inspect_ = nullptr;
};

}  // namespace swarmflow::inspection
