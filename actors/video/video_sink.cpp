#include "video/video_sink.hpp"

#include <filesystem>
#include <utility>

#include <opencv2/core.hpp>

#include "video/frame_overlay.hpp"
#include "video/gst_support.hpp"

namespace swarmflow::video {
namespace {

/// How many recent annotation envelopes the sink remembers for matching.
constexpr std::size_t kRecentAnnotations = 64;
/// How long stop() waits for the muxer to finish the file.
constexpr std::int64_t kFinishTimeoutNs = 10'000'000'000;

}  // namespace

void VideoSink::setup(StageSpec& s) {
  frames_ = s.input<schema::Frame>("frames", "frames to write");
  annotations_ = s.optional_input<schema::VisionResults>(
      "annotations", "vision results drawn on the frame with the same camera_id and frame_index");
  s.param(uri_text_, "uri", "file://PATH.avi|.mkv|.mp4 to write, or null:// to count and discard", "null://");
  s.param(fps_, "fps", "frame rate written into the file", 30.0, {0.1, 1000.0});
  s.param(codec_text_, "codec", "auto (H.264 if x264enc is installed and not AVI, else MJPEG), mjpeg or h264", "auto",
          {"auto", "mjpeg", "h264"});
  s.param(quality_, "quality", "encoding quality, 1..100", 85, {1.0, 100.0});
  s.param(hold_frames_, "hold_frames", "frames that may wait for their annotations once any have arrived", 8,
          {0.0, 256.0});
}

Status VideoSink::start(StageContext& ctx) {
  recorder_.reset();
  pending_.clear();
  recent_annotations_.clear();
  annotations_seen_ = false;
  std::string error;
  if (!parse_sink_uri(uri_text_, &uri_, &error)) return Status::error(error, StatusCode::invalid_argument);
  if (!uri_.discard) {
    const std::filesystem::path dir = std::filesystem::path(uri_.path).parent_path();
    if (!dir.empty() && !std::filesystem::is_directory(dir)) {
      return Status::error("video.sink: directory " + dir.string() + " does not exist", StatusCode::not_found);
    }
    const bool have_x264 = gst_element_available("x264enc");
    if (!choose_codec(codec_text_, uri_.container, have_x264, &codec_, &error)) {
      return Status::error(error, StatusCode::invalid_argument);
    }
  }
  log_ = std::make_unique<RateLimitedLog>(ctx.stage_id() + "[" + std::to_string(ctx.replica()) + "]");
  frames_counter_ = &ctx.counter("frames");
  annotations_counter_ = &ctx.counter("annotations");
  written_ = &ctx.counter("written");
  annotated_ = &ctx.counter("annotated");
  resized_ = &ctx.counter("resized");
  discarded_ = &ctx.counter("discarded");
  malformed_ = &ctx.counter("malformed");
  return {};
}

Status VideoSink::process(Inputs& in, Outputs& /*out*/, StageContext& /*ctx*/) {
  if (const Envelope* a = in.envelope(annotations_); a != nullptr && a->payload()) {
    annotations_counter_->fetch_add(1, std::memory_order_relaxed);
    if (!uri_.discard) {
      recent_annotations_.push_back(*a);
      if (recent_annotations_.size() > kRecentAnnotations) recent_annotations_.pop_front();
      annotations_seen_ = true;
    }
  }
  if (const Envelope* f = in.envelope(frames_); f != nullptr && f->payload()) {
    frames_counter_->fetch_add(1, std::memory_order_relaxed);
    if (uri_.discard) {
      discarded_->fetch_add(1, std::memory_order_relaxed);
    } else {
      pending_.push_back(*f);
    }
  }
  return release(false);
}

const schema::VisionResults* VideoSink::annotations_for(const schema::Frame& frame, bool* superseded) const {
  *superseded = false;
  const std::string_view camera = frame.camera_id() != nullptr ? frame.camera_id()->string_view() : "";
  for (auto it = recent_annotations_.rbegin(); it != recent_annotations_.rend(); ++it) {
    const auto* r = it->as<schema::VisionResults>();
    if (r == nullptr) continue;
    const std::string_view r_camera = r->camera_id() != nullptr ? r->camera_id()->string_view() : "";
    if (!r_camera.empty() && r_camera != camera) continue;
    if (r->frame_index() == frame.frame_index()) return r;
    if (r->frame_index() > frame.frame_index()) *superseded = true;
  }
  return nullptr;
}

Status VideoSink::release(bool all) {
  while (!pending_.empty()) {
    const Envelope frame = pending_.front();
    const auto* f = frame.as<schema::Frame>();
    bool superseded = false;
    const schema::VisionResults* annotations = f != nullptr ? annotations_for(*f, &superseded) : nullptr;
    const bool ready = all || annotations != nullptr || superseded || !annotations_seen_ ||
                       pending_.size() > static_cast<std::size_t>(hold_frames_);
    if (!ready) break;
    pending_.pop_front();
    if (Status s = write(frame, annotations); !s.ok()) return s;
  }
  return {};
}

Status VideoSink::write(const Envelope& envelope, const schema::VisionResults* annotations) {
  const auto* frame = envelope.as<schema::Frame>();
  if (frame == nullptr || pixels_of(*frame).empty()) {
    malformed_->fetch_add(1, std::memory_order_relaxed);
    log_->log("skipped a frame whose pixels do not match its size or format");
    return {};
  }
  if (!recorder_) {
    RecorderConfig config;
    config.path = uri_.path;
    config.container = uri_.container;
    config.codec = codec_;
    config.quality = static_cast<int>(quality_);
    config.fps = fps_;
    config.width = static_cast<int>(frame->width());
    config.height = static_cast<int>(frame->height());
    auto recorder = std::make_unique<GstRecorder>(config);
    if (Status s = recorder->start(); !s.ok()) return s;
    recorder_ = std::move(recorder);
    width_ = config.width;
    height_ = config.height;
  }
  const bool same_size = static_cast<int>(frame->width()) == width_ && static_cast<int>(frame->height()) == height_;
  if (!same_size) resized_->fetch_add(1, std::memory_order_relaxed);

  Status s;
  if (annotations == nullptr && same_size && frame->format() == schema::PixelFormat::BGR &&
      frame->stride() == recorder_->stride() && frame->pixels()->size() >= recorder_->frame_size()) {
    // Nothing to draw and the encoder's layout: the encoder reads the payload.
    s = recorder_->push_shared(frame->pixels()->data(), envelope.payload());
  } else {
    // The payload is shared and immutable, so drawing needs a copy: made once,
    // straight into the encoder's buffer.
    s = recorder_->push_filled([&](std::uint8_t* bgr, std::size_t stride) {
      cv::Mat out(height_, width_, CV_8UC3, bgr, stride);
      copy_as_bgr(*frame, out);
      if (annotations != nullptr) {
        draw_annotations(out, *annotations, static_cast<double>(width_) / frame->width(),
                         static_cast<double>(height_) / frame->height());
      }
    });
  }
  if (!s.ok()) return s;
  written_->fetch_add(1, std::memory_order_relaxed);
  if (annotations != nullptr) annotated_->fetch_add(1, std::memory_order_relaxed);
  return {};
}

void VideoSink::stop(StageContext& /*ctx*/) {
  Status s = release(true);
  if (!s.ok() && log_) log_->log(s.message());
  if (recorder_) {
    Status f = recorder_->finish(kFinishTimeoutNs);
    if (!f.ok() && log_) log_->log(f.message());
    recorder_.reset();
  }
  pending_.clear();
  recent_annotations_.clear();
}

}  // namespace swarmflow::video
