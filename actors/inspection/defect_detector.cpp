#include "inspection/defect_detector.hpp"

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "inspection/frame_image.hpp"

namespace swarmflow::inspection {

void DefectDetector::setup(StageSpec& s) {
  frames_ = s.input<schema::Frame>("frames", "camera frames of plates on the conveyor");
  results_ = s.output<schema::VisionResults>("results", "the defects found in each frame");
  DefectFinderParams& p = params_;
  const DefectFinderParams d;  // the defaults
  s.param(p.mm_per_px, "mm_per_px", "scale at the plate, mm per pixel (calibration)", 0.1, {0.005, 10.0});
  s.param(p.k_low, "k_low", "hysteresis low threshold, in robust noise sigmas", 3.0, {1.0, 20.0});
  s.param(p.k_high, "k_high", "hysteresis high threshold, in robust noise sigmas", 5.5, {1.0, 50.0});
  s.param(p.min_contrast, "min_contrast", "floor of the low threshold, percent of the local grey level", 3.0,
          {0.0, 100.0});
  s.param(p.edge_margin_mm, "edge_margin_mm", "band along the plate's edges that is not inspected, mm", 1.5,
          {0.0, 50.0});
  s.param(p.hole_margin_mm, "hole_margin_mm", "ring around holes that is not inspected, mm", 1.0, {0.0, 50.0});
  s.param(p.background_mm, "background_mm", "window of the illumination (background) estimate, mm", 4.0, {0.5, 100.0});
  s.param(p.join_mm, "join_mm", "pieces closer than this are one defect, mm", 0.6, {0.0, 10.0});
  s.param(p.bridge_mm, "bridge_mm", "strokes that continue one another across a gap up to this are one defect, mm", 3.0,
          {0.0, 50.0});
  s.param(p.min_pit_px, "min_pit_px", "smallest pit, pixels across", 3.0, {1.0, 100.0});
  s.param(p.max_pit_mm, "max_pit_mm", "largest pit, mm across", 3.0, {0.1, 50.0});
  s.param(p.min_pit_sigmas, "min_pit_sigmas", "contrast of a pit's darkest point, local noise sigmas",
          d.min_pit_sigmas, {1.0, 1000.0});
  s.param(p.min_scratch_mm, "min_scratch_mm", "shortest scratch, mm", 5.0, {0.0, 500.0});
  s.param(p.min_crack_mm, "min_crack_mm", "shortest crack end to end, mm", 2.5, {0.0, 500.0});
  s.param(p.min_elongation, "min_elongation", "length over thickness of a scratch or crack", 4.0, {1.0, 1000.0});
  s.param(p.min_scratch_sigmas, "min_scratch_sigmas", "mean contrast of a scratch, noise sigmas", 4.3, {0.0, 1000.0});
  s.param(p.min_crack_sigmas, "min_crack_sigmas", "mean contrast of a crack, noise sigmas", 4.5, {0.0, 1000.0});
  s.param(p.crack_coherence, "crack_coherence",
          "strokes whose gradient orientations agree less than this (0..1) are cracks, not scratches", 0.65,
          {0.0, 1.0});
  s.param(p.crack_jaggedness, "crack_jaggedness",
          "strokes whose centre line strays more than this from its own 2 mm moving average (px RMS) are cracks",
          d.crack_jaggedness, {0.0, 100.0});
  s.param(p.coherence_mm, "coherence_mm", "stretch of a stroke over which its gradient coherence is measured, mm",
          d.coherence_mm, {0.1, 100.0});
  s.param(p.min_branch_mm, "min_branch_mm", "a stroke that runs as two strands this long is branched (a crack), mm",
          d.min_branch_mm, {0.0, 100.0});
  s.param(p.pair_mm, "pair_mm", "dark and bright strokes this close side by side are one two-toned mark, mm",
          d.pair_mm, {0.0, 10.0});
  s.param(p.trace_evidence, "trace_evidence",
          "a faint stroke followed along its length is a scratch when its ridge contrast stands this many robust "
          "spreads above what the surface around it gives along the same direction",
          d.trace_evidence, {0.0, 1000.0});
  s.param(p.min_trace_contrast, "min_trace_contrast",
          "ridge contrast of a faint stroke followed along its length, at least, percent of the local grey level",
          d.min_trace_contrast, {0.0, 100.0});
  s.param(p.noise_tile_mm, "noise_tile_mm", "tile of the local noise estimate, mm", d.noise_tile_mm, {1.0, 200.0});
  s.param(p.saturation_level, "saturation_level", "grey level from which a pixel is saturated (a glint's core)",
          d.saturation_level, {1.0, 255.0});
  s.param(p.glint_margin_mm, "glint_margin_mm", "margin left out around a glint and its halo, mm",
          d.glint_margin_mm, {0.0, 50.0});
  s.param(p.min_light_evenness, "min_light_evenness",
          "lighting over the plate, dimmest over brightest, below which the frame cannot be inspected",
          d.min_light_evenness, {0.0, 1.0});
  s.param(p.max_glare_fraction, "max_glare_fraction",
          "more of the surface left out for glints than this and the frame cannot be inspected", d.max_glare_fraction,
          {0.0, 1.0});
  s.param(p.check_holes, "check_holes", "report holes of the part's drawing that were not drilled", true);
  s.param(p.drawing_tolerance_mm, "drawing_tolerance_mm",
          "how far the plate's measured size may be from a drawing's to be that part, mm", 3.0, {0.0, 100.0});
  s.param(min_score_, "min_score", "drop findings less confident than this", 0.0, {0.0, 1.0});
  s.param(fault_replica_, "fault_replica", "the replica the faults below apply to, -1 = none", -1, {-1.0, 1023.0});
  s.param(lie_every_, "lie_every", "the faulty replica reports the opposite verdict on every k-th frame, 0 = never",
          0, {0.0, {}});
  s.param(lie_confidence_, "lie_confidence", "the confidence the faulty replica claims when it lies", 0.99,
          {0.0, 1.0});
  s.param(slow_ms_, "slow_ms", "time the faulty replica adds per frame, ms", 0.0, {0.0, 60000.0});
  s.param(crash_after_, "crash_after", "the faulty replica answers nothing after this many frames, 0 = never", 0,
          {0.0, {}});
}

Status DefectDetector::start(StageContext& ctx) {
  if (params_.k_high < params_.k_low) {
    return Status::error("inspection.defects: k_high must not be below k_low", StatusCode::invalid_argument);
  }
  params_.keep_rejected = false;
  faulty_ = fault_replica_ >= 0 && fault_replica_ == ctx.replica();
  seen_ = 0;
  lies_ = &ctx.counter("lies");
  silenced_ = &ctx.counter("silenced");
  frames_seen_ = &ctx.counter("frames");
  defects_found_ = &ctx.counter("defects");
  no_plate_ = &ctx.counter("no_plate");
  bad_frames_ = &ctx.counter("bad_frames");
  cannot_inspect_ = &ctx.counter("cannot_inspect");
  return {};
}

namespace {

/// A digest of a verdict: the classes found, as a multiset, and whether the
/// frame could be inspected. Replicas that agree on a frame agree on it.
std::uint64_t verdict_key(std::vector<std::string> classes, bool inspected) {
  std::sort(classes.begin(), classes.end());
  std::uint64_t h = 1469598103934665603ULL;  // FNV-1a
  auto add = [&h](unsigned char c) {
    h ^= c;
    h *= 1099511628211ULL;
  };
  for (const auto& c : classes) {
    for (char ch : c) add(static_cast<unsigned char>(ch));
    add('|');
  }
  add(inspected ? 'i' : 'x');
  return h;
}

}  // namespace

Status DefectDetector::process(Inputs& in, Outputs& out, StageContext& ctx) {
  const schema::Frame* frame = in.get(frames_);
  const Envelope* envelope = in.envelope(frames_);
  if (frame == nullptr || envelope == nullptr) return {};
  ++seen_;
  if (faulty_ && slow_ms_ > 0) {
    const std::int64_t until = ctx.now_ns() + static_cast<std::int64_t>(slow_ms_ * 1e6);
    while (ctx.now_ns() < until) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  if (faulty_ && crash_after_ > 0 && seen_ > crash_after_) {
    silenced_->fetch_add(1, std::memory_order_relaxed);
    return {};
  }
  const bool lie = faulty_ && lie_every_ > 0 && seen_ % lie_every_ == 0;
  std::string error;
  const cv::Mat grey = grey_image(*frame, grey_, &error);
  if (grey.empty()) {
    bad_frames_->fetch_add(1, std::memory_order_relaxed);
    return Status::error("inspection.defects: " + error, StatusCode::invalid_argument);
  }
  frames_seen_->fetch_add(1, std::memory_order_relaxed);

  const DefectFinding finding = find_defects(grey, params_);
  std::string not_inspected = finding.cannot_inspect;
  if (!finding.plate.found) {
    // No plate is no verdict either: an empty belt, or a plate the belt
    // hides, must not pass as a part without defects.
    no_plate_->fetch_add(1, std::memory_order_relaxed);
    not_inspected = "no plate found (no part in view, or too little contrast against the belt)";
  }
  if (!not_inspected.empty()) cannot_inspect_->fetch_add(1, std::memory_order_relaxed);

  EnvelopeHeader header = envelope->header();
  int station = -1;
  std::uint64_t truth_part = 0;
  read_truth_ids(frame->ground_truth(), &station, &truth_part);
  if (header.part_id == 0) header.part_id = truth_part;
  if (station_of_part(header.part_id) >= 0) station = station_of_part(header.part_id);

  flatbuffers::FlatBufferBuilder fbb(1024);
  std::vector<flatbuffers::Offset<schema::Defect>> defects;
  float lowest = 1.0F;
  std::vector<std::string> classes;
  for (const auto& d : finding.defects) {
    if (d.score < min_score_) continue;
    const schema::Box box(d.box.x, d.box.y, d.box.width, d.box.height);
    defects.push_back(schema::CreateDefect(fbb, fbb.CreateString(d.class_name), &box, d.score));
    classes.push_back(d.class_name);
    lowest = std::min(lowest, d.score);
  }
  if (lie) {
    // The opposite verdict, confidently: nothing on a defective part, a
    // made-up scratch on a clean one.
    lies_->fetch_add(1, std::memory_order_relaxed);
    defects.clear();
    classes.clear();
    if (finding.defects.empty()) {
      const schema::Box box(0, 0, 40, 4);
      defects.push_back(schema::CreateDefect(fbb, fbb.CreateString("scratch"), &box,
                                             static_cast<float>(lie_confidence_)));
      classes.emplace_back("scratch");
    }
    lowest = static_cast<float>(lie_confidence_);
  }
  defects_found_->fetch_add(static_cast<std::int64_t>(defects.size()), std::memory_order_relaxed);
  flatbuffers::Offset<flatbuffers::String> camera, truth;
  if (frame->camera_id() != nullptr) camera = fbb.CreateString(frame->camera_id());
  if (frame->ground_truth() != nullptr) truth = fbb.CreateString(frame->ground_truth());
  flatbuffers::Offset<flatbuffers::String> reason;
  if (!not_inspected.empty()) reason = fbb.CreateString(not_inspected);
  const auto defect_vector = fbb.CreateVector(defects);
  schema::VisionResultsBuilder b(fbb);
  if (!camera.IsNull()) b.add_camera_id(camera);
  b.add_frame_index(frame->frame_index());
  b.add_part_id(header.part_id);
  b.add_defects(defect_vector);
  b.add_partial(false);
  b.add_station(station);
  if (!truth.IsNull()) b.add_ground_truth(truth);
  if (!reason.IsNull()) b.add_cannot_inspect(reason);
  fbb.Finish(b.Finish(), schema::VisionResultsIdentifier());
  // The confidence of a verdict "defective" is that of its least sure finding.
  header.confidence = defects.empty() && !lie ? 1.0F : lowest;
  header.vote_key = verdict_key(std::move(classes), not_inspected.empty());
  out.emit(results_, Payload::from_builder(fbb), header);
  return {};
}

}  // namespace swarmflow::inspection
