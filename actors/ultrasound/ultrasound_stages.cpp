#include "ultrasound/ultrasound_stages.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include <opencv2/imgproc.hpp>

#include "vision/frame_mat.hpp"

namespace swarmflow::ultrasound {

namespace {

/// The frame as one grey plane: a view for GRAY8 and NV12 (its luma), a
/// conversion into `scratch` for colour. Empty, with `*error`, when malformed.
cv::Mat grey_of(const schema::Frame& frame, cv::Mat& scratch, std::string* error) {
  const cv::Mat view = vision::view_of(frame);
  if (view.empty()) {
    *error = "a frame with fewer pixel bytes than its size needs";
    return {};
  }
  switch (frame.format()) {
    case schema::PixelFormat::GRAY8:
    case schema::PixelFormat::NV12:
      return view;
    case schema::PixelFormat::BGR:
      cv::cvtColor(view, scratch, cv::COLOR_BGR2GRAY);
      return scratch;
    case schema::PixelFormat::RGB:
      cv::cvtColor(view, scratch, cv::COLOR_RGB2GRAY);
      return scratch;
    case schema::PixelFormat::BGRA:
      cv::cvtColor(view, scratch, cv::COLOR_BGRA2GRAY);
      return scratch;
  }
  *error = "a pixel format it does not read";
  return {};
}

}  // namespace

// -- ultrasound.enhance ----------------------------------------------------------

void Enhance::setup(StageSpec& s) {
  in_ = s.input<schema::Frame>("frames", "B-mode frames (BGR, RGB, BGRA, GRAY8 or NV12 luma)");
  out_ = s.output<schema::Frame>("frames", "the same frames, speckle reduced and contrast enhanced (GRAY8)");
  s.param(params_.mm_per_px, "mm_per_px", "pixel pitch of the frames, mm", 0.1, {0.01, 1.0});
  s.param(params_.guided_radius_mm, "guided_radius_mm", "window radius of the guided filter, mm", 0.8, {0.1, 10.0});
  s.param(params_.guided_eps, "guided_eps", "regularisation of the guided filter, grey levels squared", 400.0,
          {1.0, 1e5});
  s.param(params_.clahe_clip, "clahe_clip", "CLAHE clip limit, 0 = no CLAHE", 1.0, {0.0, 40.0});
  s.param(tiles_, "clahe_tiles", "CLAHE tiles across (and down)", 8, {1.0, 64.0});
}

Status Enhance::start(StageContext& ctx) {
  params_.clahe_tiles = static_cast<int>(tiles_);
  enhancer_ = std::make_unique<Enhancer>(params_);
  frames_ = &ctx.counter("frames");
  return {};
}

Status Enhance::process(Inputs& in, Outputs& out, StageContext&) {
  const schema::Frame* frame = in.get(in_);
  if (frame == nullptr) return {};
  std::string error;
  const cv::Mat grey = grey_of(*frame, grey_, &error);
  if (grey.empty()) return Status::error("ultrasound.enhance: " + error, StatusCode::invalid_argument);
  if (grey.cols < 16 || grey.rows < 16) return Status::error("ultrasound.enhance: a frame under 16x16 pixels");
  const std::size_t bytes = static_cast<std::size_t>(grey.cols) * static_cast<std::size_t>(grey.rows);
  const std::size_t truth = frame->ground_truth() != nullptr ? frame->ground_truth()->size() : 0;
  const std::size_t camera = frame->camera_id() != nullptr ? frame->camera_id()->size() : 0;
  // Room for everything, so the builder never grows (growing copies the pixels).
  flatbuffers::FlatBufferBuilder fbb(bytes + truth + camera + 256, &payload_allocator());
  const auto camera_s = fbb.CreateString(frame->camera_id() != nullptr ? frame->camera_id()->string_view() : "");
  const auto truth_s = fbb.CreateString(frame->ground_truth() != nullptr ? frame->ground_truth()->string_view() : "");
  std::uint8_t* pixels = nullptr;
  const auto data = fbb.CreateUninitializedVector(bytes, &pixels);
  cv::Mat target(grey.rows, grey.cols, CV_8U, pixels);
  enhancer_->apply(grey, target);  // written straight into the payload
  schema::FrameBuilder b(fbb);
  b.add_format(schema::PixelFormat::GRAY8);
  b.add_width(static_cast<std::uint32_t>(grey.cols));
  b.add_height(static_cast<std::uint32_t>(grey.rows));
  b.add_stride(static_cast<std::uint32_t>(grey.cols));
  b.add_capture_ns(frame->capture_ns());
  b.add_camera_id(camera_s);
  b.add_frame_index(frame->frame_index());
  b.add_pixels(data);
  b.add_ground_truth(truth_s);
  fbb.Finish(b.Finish(), schema::FrameIdentifier());
  out.emit(out_, Payload::from_builder(fbb));
  frames_->fetch_add(1, std::memory_order_relaxed);
  return {};
}

// -- ultrasound.segment ------------------------------------------------------------

void Segment::setup(StageSpec& s) {
  frames_ = s.input<schema::Frame>("frames", "raw B-mode frames (log compressed)");
  enhanced_ = s.input<schema::Frame>("enhanced", "the same frames from ultrasound.enhance");
  results_ = s.output<schema::UltrasoundResults>("results", "one per frame: the lesions found, with contours");
  s.require_join();
  SegmentParams& p = params_;
  s.param(p.mm_per_px, "mm_per_px", "pixel pitch of the frames, mm", 0.1, {0.01, 1.0});
  s.param(p.dynamic_range_db, "dynamic_range_db", "dB the probe's log compression maps onto 0-255", 60.0,
          {10.0, 120.0});
  s.param(p.min_size_mm, "min_size_mm", "smallest lesion reported (diameter of a disc of its area), mm", 3.0,
          {0.5, 100.0});
  s.param(p.background_mm, "background_mm", "window of the local background, mm", 16.0, {2.0, 200.0});
  s.param(p.detect_mm, "detect_mm", "smoothing of the echo level in which candidates are looked for, mm", 1.0,
          {0.1, 10.0});
  s.param(p.threshold_db, "threshold_db", "echo level against the local background that seeds a candidate, dB", 4.0,
          {0.5, 40.0});
  s.param(p.smooth_mm, "smooth_mm", "opening that smooths each outline, mm", 1.4, {0.0, 10.0});
  s.param(p.top_mm, "top_mm", "near field left out (the probe's face), mm", 2.0, {0.0, 50.0});
  s.param(p.posterior_db, "posterior_db", "echo change under a lesion that counts as enhancement or shadowing, dB",
          2.5, {0.1, 40.0});
  s.param(p.iso_db, "iso_db", "a candidate whose smoothed echo is within this of its surroundings is dropped, dB", 3.0,
          {0.1, 40.0});
  s.param(p.min_contrast_db, "min_contrast_db",
          "a lesion is reported when its echo differs from the tissue's by at least this, dB", 5.0, {0.1, 40.0});
  s.param(p.anechoic_db, "anechoic_db", "below this against the tissue a lesion is anechoic, dB", -20.0,
          {-80.0, -1.0});
  s.param(p.irregular_solidity, "irregular_solidity",
          "an outline that fills less of its convex hull than this has an irregular margin", 0.93, {0.0, 1.0});
}

Status Segment::start(StageContext& ctx) {
  frames_seen_ = &ctx.counter("frames");
  lesions_ = &ctx.counter("lesions");
  return {};
}

Status Segment::process(Inputs& in, Outputs& out, StageContext&) {
  const schema::Frame* raw = in.get(frames_);
  const schema::Frame* enh = in.get(enhanced_);
  if (raw == nullptr || enh == nullptr) return {};  // a set incomplete at its deadline: nothing to outline
  std::string error;
  const cv::Mat r = grey_of(*raw, raw_, &error);
  const cv::Mat e = r.empty() ? cv::Mat() : grey_of(*enh, enh_, &error);
  if (r.empty() || e.empty()) return Status::error("ultrasound.segment: " + error, StatusCode::invalid_argument);
  if (r.size() != e.size()) {
    return Status::error("ultrasound.segment: the raw and the enhanced frame differ in size",
                         StatusCode::invalid_argument);
  }
  const std::vector<LesionFinding> found = find_lesions(r, e, params_);
  frames_seen_->fetch_add(1, std::memory_order_relaxed);
  lesions_->fetch_add(static_cast<std::int64_t>(found.size()), std::memory_order_relaxed);

  flatbuffers::FlatBufferBuilder fbb(4096 + (raw->ground_truth() != nullptr ? raw->ground_truth()->size() : 0));
  std::vector<flatbuffers::Offset<schema::Lesion>> lesions;
  std::uint32_t id = 0;
  for (const LesionFinding& f : found) {
    std::vector<schema::ContourPoint> pts;
    pts.reserve(f.contour.size());
    for (const auto& q : f.contour) pts.emplace_back(q.x, q.y);
    const auto contour = fbb.CreateVectorOfStructs(pts);
    const auto echo = fbb.CreateString(f.echogenicity);
    const auto shape = fbb.CreateString(f.shape);
    const auto margin = fbb.CreateString(f.margin);
    const auto posterior = fbb.CreateString(f.posterior);
    schema::LesionBuilder b(fbb);
    b.add_id(++id);
    b.add_echogenicity(echo);
    b.add_contrast_db(static_cast<float>(f.contrast_db));
    b.add_contour(contour);
    b.add_centre_x(f.centre.x);
    b.add_centre_y(f.centre.y);
    b.add_size_mm(static_cast<float>(f.size_mm));
    b.add_width_mm(static_cast<float>(f.width_mm));
    b.add_area_mm2(static_cast<float>(f.area_mm2));
    b.add_shape(shape);
    b.add_margin(margin);
    b.add_posterior(posterior);
    b.add_posterior_db(static_cast<float>(f.posterior_db));
    b.add_depth_mm(static_cast<float>(f.depth_mm));
    lesions.push_back(b.Finish());
  }
  const auto lesion_v = fbb.CreateVector(lesions);
  const auto camera = fbb.CreateString(raw->camera_id() != nullptr ? raw->camera_id()->string_view() : "");
  flatbuffers::Offset<flatbuffers::String> truth;
  if (raw->ground_truth() != nullptr) truth = fbb.CreateString(raw->ground_truth()->string_view());
  schema::UltrasoundResultsBuilder b(fbb);
  b.add_camera_id(camera);
  b.add_frame_index(raw->frame_index());
  b.add_mm_per_px(static_cast<float>(params_.mm_per_px));
  b.add_width(static_cast<std::uint32_t>(r.cols));
  b.add_height(static_cast<std::uint32_t>(r.rows));
  b.add_lesions(lesion_v);
  if (!truth.IsNull()) b.add_ground_truth(truth);
  fbb.Finish(b.Finish(), schema::UltrasoundResultsIdentifier());
  out.emit(results_, Payload::from_builder(fbb));
  return {};
}

// -- ultrasound.flow ----------------------------------------------------------------

void Flow::setup(StageSpec& s) {
  frames_ = s.input<schema::Frame>("frames", "raw B-mode frames, in order per stream");
  results_ = s.output<schema::UltrasoundResults>("results", "one per frame: the vessels found and their flow");
  FlowParams& p = params_;
  s.param(p.mm_per_px, "mm_per_px", "pixel pitch of the frames, mm", 0.1, {0.01, 1.0});
  s.param(p.fps, "fps", "the probe's frame rate (time between two frames), frames per second", 30.0, {1.0, 1000.0});
  s.param(p.max_velocity_mm_s, "max_velocity_mm_s", "fastest flow looked for, mm/s (sets the search range)", 60.0,
          {1.0, 2000.0});
  s.param(p.min_length, "min_length", "a vessel crosses at least this fraction of the frame's width", 0.6,
          {0.1, 1.0});
  s.param(p.threshold, "threshold", "grey levels below the local background that make a lumen", 18.0, {1.0, 255.0});
}

Status Flow::start(StageContext& ctx) {
  frames_seen_ = &ctx.counter("frames");
  vessels_ = &ctx.counter("vessels");
  tracked_ = &ctx.counter("tracked");
  previous_.clear();
  return {};
}

Status Flow::process(Inputs& in, Outputs& out, StageContext&) {
  const schema::Frame* frame = in.get(frames_);
  const Envelope* envelope = in.envelope(frames_);
  if (frame == nullptr || envelope == nullptr) return {};
  std::string error;
  const cv::Mat grey = grey_of(*frame, grey_, &error);
  if (grey.empty()) return Status::error("ultrasound.flow: " + error, StatusCode::invalid_argument);
  frames_seen_->fetch_add(1, std::memory_order_relaxed);
  std::vector<VesselFinding> vessels = find_vessels(grey, params_);
  Previous& prev = previous_[envelope->header().stream];
  // Only consecutive frames: the velocity is the displacement over one frame interval.
  const bool follows = !prev.grey.empty() && prev.grey.size() == grey.size() && frame->frame_index() == prev.index + 1;
  for (VesselFinding& v : vessels) {
    if (follows && track_flow(prev.grey, grey, v, params_)) tracked_->fetch_add(1, std::memory_order_relaxed);
  }
  vessels_->fetch_add(static_cast<std::int64_t>(vessels.size()), std::memory_order_relaxed);
  prev.index = frame->frame_index();
  if (grey.data == grey_.data) {
    // Converted from colour into scratch, which the next frame overwrites.
    grey.copyTo(prev.owned);
    prev.grey = prev.owned;
    prev.payload.reset();
  } else {
    // A view into the payload: keep the payload (a reference), not a copy.
    prev.payload = envelope->payload();
    prev.grey = grey;
  }

  flatbuffers::FlatBufferBuilder fbb(1024);
  std::vector<flatbuffers::Offset<schema::Vessel>> list;
  std::uint32_t id = 0;
  for (const VesselFinding& v : vessels) {
    schema::VesselBuilder b(fbb);
    b.add_id(++id);
    b.add_axis_x(v.axis_point.x);
    b.add_axis_y(v.axis_point.y);
    b.add_angle_deg(static_cast<float>(v.angle_rad * 180.0 / 3.14159265358979323846));
    b.add_radius_mm(static_cast<float>(v.radius_px * params_.mm_per_px));
    b.add_velocity_mm_s(v.tracked ? static_cast<float>(v.velocity_mm_s) : std::nanf(""));
    b.add_mean_velocity_mm_s(v.tracked ? static_cast<float>(v.mean_velocity_mm_s) : std::nanf(""));
    b.add_direction(v.direction);
    b.add_quality(static_cast<float>(v.quality));
    list.push_back(b.Finish());
  }
  const auto vessel_v = fbb.CreateVector(list);
  const auto camera = fbb.CreateString(frame->camera_id() != nullptr ? frame->camera_id()->string_view() : "");
  schema::UltrasoundResultsBuilder b(fbb);
  b.add_camera_id(camera);
  b.add_frame_index(frame->frame_index());
  b.add_mm_per_px(static_cast<float>(params_.mm_per_px));
  b.add_width(static_cast<std::uint32_t>(grey.cols));
  b.add_height(static_cast<std::uint32_t>(grey.rows));
  b.add_vessels(vessel_v);
  fbb.Finish(b.Finish(), schema::UltrasoundResultsIdentifier());
  out.emit(results_, Payload::from_builder(fbb));
  return {};
}

// -- ultrasound.report --------------------------------------------------------------

namespace {

constexpr double kBucketMs = 0.1;
constexpr std::size_t kBuckets = 20'000;

std::vector<LesionFinding> lesions_of(const schema::UltrasoundResults* r) {
  std::vector<LesionFinding> out;
  if (r == nullptr || r->lesions() == nullptr) return out;
  for (const schema::Lesion* l : *r->lesions()) {
    LesionFinding f;
    if (l->contour() != nullptr) {
      for (const schema::ContourPoint* q : *l->contour()) f.contour.emplace_back(q->x(), q->y());
    }
    f.centre = cv::Point2f(l->centre_x(), l->centre_y());
    f.echogenicity = l->echogenicity() != nullptr ? l->echogenicity()->str() : "";
    f.contrast_db = l->contrast_db();
    f.size_mm = l->size_mm();
    f.width_mm = l->width_mm();
    f.area_mm2 = l->area_mm2();
    f.shape = l->shape() != nullptr ? l->shape()->str() : "";
    f.margin = l->margin() != nullptr ? l->margin()->str() : "";
    f.posterior = l->posterior() != nullptr ? l->posterior()->str() : "";
    f.posterior_db = l->posterior_db();
    f.depth_mm = l->depth_mm();
    out.push_back(std::move(f));
  }
  return out;
}

std::vector<VesselFinding> vessels_of(const schema::UltrasoundResults* r) {
  std::vector<VesselFinding> out;
  if (r == nullptr || r->vessels() == nullptr) return out;
  const double mm = r->mm_per_px() > 0 ? r->mm_per_px() : 0.1;
  for (const schema::Vessel* v : *r->vessels()) {
    VesselFinding f;
    f.axis_point = cv::Point2f(v->axis_x(), v->axis_y());
    f.angle_rad = v->angle_deg() * 3.14159265358979323846 / 180.0;
    f.radius_px = v->radius_mm() / mm;
    f.tracked = std::isfinite(v->velocity_mm_s());
    f.velocity_mm_s = f.tracked ? v->velocity_mm_s() : 0;
    f.mean_velocity_mm_s = f.tracked ? v->mean_velocity_mm_s() : 0;
    f.direction = v->direction();
    f.quality = v->quality();
    out.push_back(f);
  }
  return out;
}

}  // namespace

void Report::setup(StageSpec& s) {
  lesions_ = s.input<schema::UltrasoundResults>("lesions", "ultrasound.segment's results");
  vessels_ = s.input<schema::UltrasoundResults>("vessels", "ultrasound.flow's results");
  findings_ = s.output<schema::Tokens>("findings", "one finding per lesion, as a stream of word tokens");
  s.param(summary_, "summary", "print the scored summary when the stage stops", true);
}

Status Report::start(StageContext& ctx) {
  ctx_ = &ctx;
  latency_.assign(kBuckets, 0);
  return {};
}

void Report::emit_line(const ReportLine& line, Outputs& out) {
  // One envelope per word, as lm.generate sends one per token: position and
  // seq count the words, the last is final with finish_reason "stop".
  const std::vector<std::string> pieces = line_pieces(line.text);
  EnvelopeHeader h = out.base_header();
  h.stream = line.request;
  h.confidence = 1.0F;
  for (std::size_t k = 0; k < pieces.size(); ++k) {
    h.seq = k;
    h.vote_key = piece_key(pieces[k]);
    out.emit(findings_, word_token(pieces[k], k, k + 1 == pieces.size(), line.request), h);
  }
  tokens_sent_ += pieces.size();
  ++findings_sent_;
}

Status Report::process(Inputs& in, Outputs& out, StageContext& ctx) {
  const schema::UltrasoundResults* lr = in.get(lesions_);
  const schema::UltrasoundResults* vr = in.get(vessels_);
  if (lr == nullptr && vr == nullptr) return {};
  if (lr == nullptr || vr == nullptr) ++partial_;
  const std::uint64_t index = lr != nullptr ? lr->frame_index() : vr->frame_index();
  const std::vector<LesionFinding> lesions = lesions_of(lr);
  const std::vector<VesselFinding> vessels = vessels_of(vr);
  const std::vector<ReportLine> lines = report_lines(index, lesions, vessels, vr != nullptr);
  for (const ReportLine& line : lines) emit_line(line, out);
  ++frames_;
  // Capture to the report line's completion: its last token is out.
  const Envelope* e = in.envelope();
  if (e != nullptr && e->header().capture_ns > 0) {
    const double ms = static_cast<double>(ctx.now_ns() - e->header().capture_ns) / 1e6;
    const auto bucket = static_cast<std::size_t>(std::clamp(ms / kBucketMs, 0.0, static_cast<double>(kBuckets - 1)));
    ++latency_[bucket];
    ++latency_count_;
    latency_max_ms_ = std::max(latency_max_ms_, ms);
  }
  // Scored where the frame carries a synthetic probe's truth (and both halves arrived).
  const flatbuffers::String* truth_json = lr != nullptr ? lr->ground_truth() : nullptr;
  if (truth_json != nullptr && vr != nullptr && video::is_ultrasound_truth(truth_json->string_view())) {
    if (const auto truth = video::parse_ultrasound_truth(truth_json->string_view())) {
      std::vector<VesselFinding> measured = vessels;
      // The first frame of a stream has no flow yet: its vessels are left unscored.
      const bool any_tracked = std::any_of(measured.begin(), measured.end(), [](const auto& v) { return v.tracked; });
      video::UltrasoundTruth scored = *truth;
      if (!any_tracked) scored.vessels.clear();
      // The report's facts as its text states them (Dice from the outlines).
      int stated_count = -1;
      const std::vector<LesionFinding> stated = stated_lesions(lesions, lines, &stated_count);
      FrameScore score =
          score_frame(scored, stated, measured, static_cast<int>(lr->width()), static_cast<int>(lr->height()));
      score.count_right = stated_count >= 0 && static_cast<std::size_t>(stated_count) == truth->lesions.size();
      tally_.add(score);
    }
  }
  if (frames_ % 10 == 0) publish();
  return {};
}

void Report::publish() {
  if (ctx_ == nullptr) return;
  auto set = [&](const std::string& name, double v) {
    ctx_->counter(name).store(static_cast<std::int64_t>(std::llround(v)), std::memory_order_relaxed);
  };
  set("frames", static_cast<double>(frames_));
  set("findings", static_cast<double>(findings_sent_));
  set("tokens", static_cast<double>(tokens_sent_));
  set("partial", static_cast<double>(partial_));
  set("scored_frames", static_cast<double>(tally_.frames));
  set("lesions_truth", static_cast<double>(tally_.lesions()));
  set("dice_sum_ppm", tally_.dice_mean() * static_cast<double>(tally_.lesions()) * 1e6);
  set("facts", static_cast<double>(tally_.facts()));
  set("facts_right", static_cast<double>(tally_.facts_right()));
  set("count_right", static_cast<double>(tally_.count_right));
  std::uint64_t size_right = 0, class_right = 0;
  for (const auto& [name, c] : tally_.by_class) {
    size_right += c.size_right;
    class_right += c.class_right;
    set("lesions_truth." + name, static_cast<double>(c.lesions));
    set("dice_sum_ppm." + name, c.dice_sum * 1e6);
  }
  set("size_right", static_cast<double>(size_right));
  set("class_right", static_cast<double>(class_right));
  set("vessels_truth", static_cast<double>(tally_.vessels));
  set("flow_error_sum_ppm", tally_.flow_error_sum * 1e6);
  // Percentiles of the latency histogram (upper edge of the bucket).
  auto percentile = [&](double q) {
    if (latency_count_ == 0) return 0.0;
    const auto rank = static_cast<std::uint64_t>(std::ceil(q * static_cast<double>(latency_count_)));
    std::uint64_t seen = 0;
    for (std::size_t i = 0; i < latency_.size(); ++i) {
      seen += latency_[i];
      if (seen >= rank) return std::min(latency_max_ms_, (static_cast<double>(i) + 1) * kBucketMs);
    }
    return latency_max_ms_;
  };
  set("latency_p50_us", percentile(0.50) * 1000);
  set("latency_p99_us", percentile(0.99) * 1000);
  set("latency_max_us", latency_max_ms_ * 1000);
}

bool Report::snapshot(std::string& out) const {
  std::ostringstream o;
  o.precision(17);
  o << "ultrasound.report 2\n"
    << frames_ << ' ' << findings_sent_ << ' ' << tokens_sent_ << ' ' << partial_ << ' ' << latency_count_ << ' ' << latency_max_ms_ << '\n'
    << tally_.frames << ' ' << tally_.count_right << ' ' << tally_.false_lesions << ' ' << tally_.vessels << ' '
    << tally_.vessels_found << ' ' << tally_.flow_error_sum << ' ' << tally_.flow_error_max << '\n'
    << tally_.by_class.size() << '\n';
  for (const auto& [name, c] : tally_.by_class) {
    o << name << ' ' << c.lesions << ' ' << c.found << ' ' << c.size_right << ' ' << c.class_right << ' ' << c.dice_sum
      << '\n';
  }
  for (std::size_t i = 0; i < latency_.size(); ++i) {
    if (latency_[i] > 0) o << i << ' ' << latency_[i] << '\n';
  }
  out = o.str();
  return true;
}

Status Report::restore(const std::string& state) {
  std::istringstream in(state);
  std::string tag;
  int version = 0;
  ScoreTally t;
  std::uint64_t frames = 0, sent = 0, tokens = 0, partial = 0, count = 0;
  double max_ms = 0;
  std::size_t classes = 0;
  bool ok = static_cast<bool>(in >> tag >> version) && tag == "ultrasound.report" && version == 2;
  ok = ok && static_cast<bool>(in >> frames >> sent >> tokens >> partial >> count >> max_ms);
  ok = ok && static_cast<bool>(in >> t.frames >> t.count_right >> t.false_lesions >> t.vessels >> t.vessels_found >>
                               t.flow_error_sum >> t.flow_error_max >> classes);
  for (std::size_t i = 0; ok && i < classes; ++i) {
    std::string name;
    ScoreTally::PerClass c;
    ok = static_cast<bool>(in >> name >> c.lesions >> c.found >> c.size_right >> c.class_right >> c.dice_sum);
    if (ok) t.by_class[name] = c;
  }
  std::vector<std::uint64_t> latency(kBuckets, 0);
  std::size_t bucket = 0;
  std::uint64_t n = 0;
  while (ok && in >> bucket >> n) {
    if (bucket >= kBuckets) ok = false;
    else latency[bucket] = n;
  }
  if (!ok || !in.eof()) {
    return Status::error("ultrasound.report: a snapshot it cannot read", StatusCode::invalid_argument);
  }
  tally_ = std::move(t);
  frames_ = frames;
  findings_sent_ = sent;
  tokens_sent_ = tokens;
  partial_ = partial;
  latency_count_ = count;
  latency_max_ms_ = max_ms;
  latency_ = std::move(latency);
  publish();
  return {};
}

void Report::stop(StageContext& ctx) {
  ctx_ = &ctx;
  publish();
  if (summary_) print_summary();
}

void Report::print_summary() const {
  const auto p50 = ctx_ != nullptr ? ctx_->counter("latency_p50_us").load() : 0;
  const auto p99 = ctx_ != nullptr ? ctx_->counter("latency_p99_us").load() : 0;
  std::printf("\nultrasound: %llu frames reported, %llu findings streamed as %llu tokens",
              static_cast<unsigned long long>(frames_), static_cast<unsigned long long>(findings_sent_),
              static_cast<unsigned long long>(tokens_sent_));
  if (partial_ > 0) std::printf(" (%llu frames with lesions or flow missing)", static_cast<unsigned long long>(partial_));
  std::printf("\n");
  if (tally_.frames > 0) {
    std::printf("  scored against the probe's truth over %llu frames (not for clinical use):\n",
                static_cast<unsigned long long>(tally_.frames));
    std::printf("  %-12s %8s %8s %8s %12s %12s\n", "lesion type", "lesions", "found", "Dice", "size <=1mm", "class right");
    for (const auto& [name, c] : tally_.by_class) {
      const double n = static_cast<double>(std::max<std::uint64_t>(1, c.lesions));
      std::printf("  %-12s %8llu %8llu %8.3f %12.3f %12.3f\n", name.c_str(), static_cast<unsigned long long>(c.lesions),
                  static_cast<unsigned long long>(c.found), c.dice_sum / n, static_cast<double>(c.size_right) / n,
                  static_cast<double>(c.class_right) / n);
    }
    std::printf("  Dice mean %.3f; lesions reported that are not there: %llu\n", tally_.dice_mean(),
                static_cast<unsigned long long>(tally_.false_lesions));
    std::printf("  flow: %llu vessel measurements (%llu found), relative error mean %.1f%%, max %.1f%%\n",
                static_cast<unsigned long long>(tally_.vessels), static_cast<unsigned long long>(tally_.vessels_found),
                100 * tally_.flow_error_mean(), 100 * tally_.flow_error_max);
    std::printf("  report facts: %llu right, %llu wrong of %llu (%.1f%%): lesion count per frame, size within 1 mm, "
                "echogenicity\n",
                static_cast<unsigned long long>(tally_.facts_right()),
                static_cast<unsigned long long>(tally_.facts() - tally_.facts_right()),
                static_cast<unsigned long long>(tally_.facts()), 100 * tally_.facts_fraction());
  }
  std::printf("  latency frame capture -> report line: p50 %.1f ms, p99 %.1f ms, max %.1f ms\n",
              static_cast<double>(p50) / 1000, static_cast<double>(p99) / 1000, latency_max_ms_);
  std::fflush(stdout);
}

PayloadPtr word_token(const std::string& piece, std::size_t position, bool final, std::uint64_t request) {
  const int no_vocabulary = -1;
  const float certain = 1.0F, log_certain = 0.0F;
  flatbuffers::FlatBufferBuilder fbb(160 + piece.size(), &payload_allocator());
  const auto ids = fbb.CreateVector(&no_vocabulary, 1);
  const auto text = fbb.CreateString(piece);
  const auto pieces = fbb.CreateVector(&text, 1);
  const auto conf = fbb.CreateVector(&certain, 1);
  const auto lps = fbb.CreateVector(&log_certain, 1);
  const auto reason = final ? fbb.CreateString("stop") : flatbuffers::Offset<flatbuffers::String>();
  fbb.Finish(schema::CreateTokens(fbb, ids, pieces, position, conf, final, request, lps, reason),
             schema::TokensIdentifier());
  return Payload::from_builder(fbb);
}

}  // namespace swarmflow::ultrasound
