#include "video/video_source.hpp"

#include <exception>
#include <filesystem>
#include <sstream>
#include <utility>

#include "video/gst_support.hpp"

namespace swarmflow::video {
namespace {

/// How soon process() looks again when the capture thread has no frame ready.
constexpr std::int64_t kPollNs = 3'000'000;
/// Room in a synthetic frame's builder for the ground truth JSON, so the
/// builder never grows (growing would copy the pixels again).
constexpr std::size_t kTruthRoom = 64 * 1024;

}  // namespace

void VideoSource::setup(StageSpec& s) {
  frames_ = s.output<schema::Frame>("frames", "video frames; pixels written once into the payload");
  s.param(uri_text_, "uri",
          "file://PATH, rtsp://..., http(s)://..., v4l2:///dev/videoN, test://PATTERN, synthetic://parts?... or "
          "synthetic://checkerboard?...",
          "test://smpte");
  s.param(width_, "width", "output width in pixels, 0 = as the source gives", 0, {0.0, 16384.0});
  s.param(height_, "height", "output height in pixels, 0 = as the source gives", 0, {0.0, 16384.0});
  s.frame_size(frames_, "width", "height");
  s.param(fps_, "fps", "output frames per second, 0 = as the source gives (synthetic: unpaced)", 0.0, {0.0, 1000.0});
  s.param(format_, "format", "pixel format of the frames", "BGR", {"BGR", "GRAY8", "NV12"});
  s.param(count_, "count", "frames to deliver per replica, 0 = until the source ends or forever", 0, {0.0, {}});
  s.param(camera_id_param_, "camera_id", "Frame.camera_id, empty = <stage id>-<replica>", "");
  s.param(queue_frames_, "queue_frames", "frames the capture thread may hold for process()", 4, {1.0, 64.0});
  s.param(reconnect_ms_, "reconnect_ms", "first wait before a failed live source is rebuilt, doubling after", 500,
          {1.0, 3'600'000.0});
  s.param(reconnect_max_ms_, "reconnect_max_ms", "longest wait between reconnect attempts", 10'000, {1.0, 3'600'000.0});
  s.param(max_reconnects_, "max_reconnects", "consecutive reconnects without a frame before failing, 0 = forever", 0,
          {0.0, {}});
  s.param(stall_ms_, "stall_ms", "rebuild a live source that gave no frame for this long, 0 = never", 10'000,
          {0.0, 3'600'000.0});
}

Status VideoSource::start(StageContext& ctx) {
  capture_.reset();
  synthetic_.reset();
  ultrasound_.reset();
  std::string error;
  if (!parse_source_uri(uri_text_, &uri_, &error)) return Status::error(error, StatusCode::invalid_argument);

  frames_counter_ = &ctx.counter("frames");
  // Its length, for the progress line: the count when there is one; a file
  // of known duration and rate lowers it (or sets it) at its first frame.
  expected_counter_ = &ctx.counter("expected");
  expected_counter_->store(count_, std::memory_order_relaxed);
  std::atomic<std::int64_t>& dropped = ctx.counter("dropped_frames");
  if (camera_id_param_.empty()) {
    camera_id_ = ctx.stage_id() + "-" + std::to_string(ctx.replica());
  } else {
    camera_id_ = ctx.replica_count() > 1 ? camera_id_param_ + "-" + std::to_string(ctx.replica()) : camera_id_param_;
  }

  // A restarted replica of a live or synthetic source resumes its numbering
  // (frames already taken, delivered or dropped), so downstream never sees a
  // sequence number twice; a file is read again from its first frame.
  if (uri_.kind == SourceKind::file) {
    first_index_ = 0;
    delivered_ = 0;
  } else {
    delivered_ = frames_counter_->load();
    first_index_ = static_cast<std::uint64_t>(delivered_ + dropped.load());
  }
  return uri_.kind == SourceKind::synthetic ? start_synthetic(ctx) : start_capture(ctx);
}

Status VideoSource::start_synthetic(StageContext& ctx) {
  std::string error;
  if (uri_.uri.compare(0, 22, "synthetic://ultrasound") == 0) {
    SyntheticUltrasoundConfig config;
    if (format_ != "BGR" && format_ != "GRAY8") {
      return Status::error("synthetic://ultrasound renders BGR or GRAY8; set format: BGR or GRAY8",
                           StatusCode::invalid_argument);
    }
    // As for the parts camera, width and height set the frame size; the
    // field in mm is the frame size times mm_per_px.
    if (width_ > 0) config.width = static_cast<int>(width_);
    if (height_ > 0) config.height = static_cast<int>(height_);
    if (!parse_ultrasound_uri(uri_.uri, &config, &error)) return Status::error(error, StatusCode::invalid_argument);
    config.seed += static_cast<std::uint64_t>(ctx.replica());
    ultrasound_ = std::make_unique<SyntheticUltrasound>(config);
    stream_ = static_cast<std::uint64_t>(ctx.replica());
    next_index_ = first_index_;
    start_ns_ = ctx.now_ns();
    ctx.set_live(fps_ > 0);
    return {};
  }
  SyntheticPartsConfig config;
  if (!parse_synthetic_uri(uri_.uri, &config, &error)) return Status::error(error, StatusCode::invalid_argument);
  if (format_ != "BGR") {
    return Status::error("synthetic:// renders BGR only; set format: BGR (convert downstream if needed)",
                         StatusCode::invalid_argument);
  }
  if (config.camera < 0 || config.camera > 1) {
    return Status::error("synthetic://parts has two cameras per station: camera must be 0 or 1",
                         StatusCode::invalid_argument);
  }
  config.station += ctx.replica();
  if (width_ > 0) config.width = static_cast<int>(width_);
  if (height_ > 0) config.height = static_cast<int>(height_);
  try {
    synthetic_ = std::make_unique<SyntheticParts>(config);
  } catch (const std::exception& ex) {
    return Status::error(std::string("synthetic camera: ") + ex.what(), StatusCode::invalid_argument);
  }
  stream_ = static_cast<std::uint64_t>(config.station) * 2 + static_cast<std::uint64_t>(config.camera);
  next_index_ = first_index_;
  start_ns_ = ctx.now_ns();
  ctx.set_live(fps_ > 0);
  return {};
}

Status VideoSource::start_capture(StageContext& ctx) {
  if (uri_.kind == SourceKind::file && !std::filesystem::is_regular_file(uri_.location)) {
    return Status::error("no such video file: " + uri_.location, StatusCode::not_found);
  }
  if (uri_.kind == SourceKind::test) {
    std::string known;
    if (!is_test_pattern(uri_.location, &known)) {
      return Status::error("unknown test pattern '" + uri_.location + "' (known: " + known + ")",
                           StatusCode::invalid_argument);
    }
  }
  CaptureConfig config;
  config.uri = uri_;
  config.format.format = format_;
  config.format.width = static_cast<int>(width_);
  config.format.height = static_cast<int>(height_);
  config.format.fps = fps_;
  config.camera_id = camera_id_;
  config.stream = stable_stream_id(camera_id_);
  config.first_index = first_index_;
  config.queue_frames = static_cast<std::size_t>(queue_frames_);
  config.reconnect_ns = reconnect_ms_ * 1'000'000;
  config.reconnect_max_ns = reconnect_max_ms_ * 1'000'000;
  config.max_reconnects = max_reconnects_;
  config.stall_ns = stall_ms_ * 1'000'000;
  config.log_name = ctx.stage_id() + "[" + std::to_string(ctx.replica()) + "]";
  CaptureCounters counters;
  counters.reconnects = &ctx.counter("reconnects");
  counters.gap_ms = &ctx.counter("gap_ms");
  counters.dropped_frames = &ctx.counter("dropped_frames");
  if (uri_.kind == SourceKind::file) {
    counters.expected = expected_counter_;
    config.frame_limit = count_;
  }
  stream_ = config.stream;

  capture_ = std::make_unique<GstCapture>(std::move(config), counters);
  Status s = capture_->start();
  if (!s.ok()) {
    capture_.reset();
    return s;
  }
  ctx.set_live(is_live(uri_.kind));
  return {};
}

Status VideoSource::process(Inputs& /*in*/, Outputs& out, StageContext& ctx) {
  if (ctx.stop_requested()) return Status::end_of_stream();
  if (count_ > 0 && delivered_ >= count_) {
    capture_.reset();  // frees the camera at once
    return Status::end_of_stream();
  }
  if (synthetic_ || ultrasound_) return produce_synthetic(out, ctx);
  if (capture_) return produce_captured(out, ctx);
  return Status::end_of_stream();
}

Status VideoSource::produce_captured(Outputs& out, StageContext& ctx) {
  CapturedFrame frame;
  std::string error;
  switch (capture_->try_pop(&frame, &error)) {
    case FrameQueue::Pop::frame:
      // Restored from a snapshot: the frames it had sent are read and skipped.
      if (frame.header.seq < skip_below_) return {};
      out.emit(frames_, std::move(frame.payload), frame.header);
      ++delivered_;
      frames_counter_->fetch_add(1, std::memory_order_relaxed);
      return {};
    case FrameQueue::Pop::empty:
      ctx.defer_until(ctx.now_ns() + kPollNs);
      return {};
    case FrameQueue::Pop::failed:
      return Status::error(error, StatusCode::unavailable);
    case FrameQueue::Pop::ended:
    case FrameQueue::Pop::stopped:
      break;
  }
  return Status::end_of_stream();
}

bool VideoSource::snapshot(std::string& out) const {
  if (synthetic_ || ultrasound_) {
    out = "synthetic " + std::to_string(next_index_) + " " + std::to_string(delivered_);
    return true;
  }
  // A file is read again from its start and the frames before the position
  // skipped; a live source has no position to go back to.
  if (uri_.kind == SourceKind::file) {
    out = "file " + std::to_string(delivered_) + " " + std::to_string(delivered_);
    return true;
  }
  return false;
}

Status VideoSource::restore(const std::string& state) {
  std::istringstream in(state);
  std::string kind;
  std::uint64_t next = 0;
  std::int64_t delivered = 0;
  const bool read = static_cast<bool>(in >> kind >> next >> delivered);
  if (read && kind == "synthetic" && (synthetic_ || ultrasound_)) {
    next_index_ = next;
    delivered_ = delivered;
    rebase_pacing_ = true;
    return {};
  }
  if (read && kind == "file" && uri_.kind == SourceKind::file) {
    skip_below_ = next;
    delivered_ = delivered;
    return {};
  }
  return Status::error("video.source: a snapshot it cannot read (" + state + ")", StatusCode::invalid_argument);
}

Status VideoSource::produce_synthetic(Outputs& out, StageContext& ctx) {
  if (rebase_pacing_) {
    rebase_pacing_ = false;
    first_index_ = next_index_;
    start_ns_ = ctx.now_ns();
  }
  if (fps_ > 0) {
    const auto due =
        start_ns_ + static_cast<std::int64_t>(static_cast<double>(next_index_ - first_index_) * 1e9 / fps_);
    if (due > ctx.now_ns()) {
      ctx.defer_until(due);
      return {};
    }
  }
  const auto width = static_cast<std::size_t>(synthetic_ ? synthetic_->config().width : ultrasound_->config().width);
  const auto height =
      static_cast<std::size_t>(synthetic_ ? synthetic_->config().height : ultrasound_->config().height);
  const bool grey = ultrasound_ && format_ == "GRAY8";
  const std::size_t stride = width * (grey ? 1 : 3);
  const std::size_t size = stride * height;
  const std::int64_t capture_ns = ctx.now_ns();

  flatbuffers::FlatBufferBuilder fbb(size + kTruthRoom + camera_id_.size(), &payload_allocator());
  const auto camera = fbb.CreateString(camera_id_);
  std::uint8_t* pixels = nullptr;
  const auto data = fbb.CreateUninitializedVector(size, &pixels);
  // Drawn straight into the payload.
  std::uint64_t part_id = 0;
  std::string truth_json;
  if (synthetic_) {
    const PartTruth truth = synthetic_->render(next_index_, pixels, stride);
    part_id = truth.part_id;
    truth_json = to_json(truth);
  } else if (grey) {
    cv::Mat plane(static_cast<int>(height), static_cast<int>(width), CV_8U, pixels);
    truth_json = to_json(ultrasound_->render_grey(next_index_, plane));
  } else {
    truth_json = to_json(ultrasound_->render(next_index_, pixels, stride));
  }
  const auto ground_truth = fbb.CreateString(truth_json);
  const auto frame = schema::CreateFrame(fbb, grey ? schema::PixelFormat::GRAY8 : schema::PixelFormat::BGR, static_cast<std::uint32_t>(width),
                                         static_cast<std::uint32_t>(height), static_cast<std::uint32_t>(stride),
                                         capture_ns, camera, next_index_, data, ground_truth);
  schema::FinishFrameBuffer(fbb, frame);

  EnvelopeHeader header;
  header.stream = stream_;
  header.seq = next_index_;
  header.capture_ns = capture_ns;
  header.part_id = part_id;
  out.emit(frames_, Payload::from_builder(fbb), header);
  ++next_index_;
  ++delivered_;
  frames_counter_->fetch_add(1, std::memory_order_relaxed);
  return {};
}

void VideoSource::stop(StageContext& /*ctx*/) {
  capture_.reset();
  synthetic_.reset();
  ultrasound_.reset();
}

}  // namespace swarmflow::video
