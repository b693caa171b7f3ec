#include "video/gst_recorder.hpp"

#include <chrono>
#include <thread>
#include <utility>

#include <gst/app/gstappsrc.h>
#include <gst/gst.h>
#include <gst/video/video.h>

#include "video/gst_support.hpp"

namespace swarmflow::video {
namespace {

/// Frames the appsrc may hold before a push waits for the encoder.
constexpr guint64 kMaxQueued = 4;
/// A push that waits this long for the encoder fails (the encoder is stuck).
constexpr std::int64_t kStallNs = 10'000'000'000;

std::string error_text(GstMessage* message) {
  GError* err = nullptr;
  gchar* debug = nullptr;
  gst_message_parse_error(message, &err, &debug);
  std::string text = GST_OBJECT_NAME(GST_MESSAGE_SRC(message));
  text += ": ";
  text += err != nullptr ? err->message : "unknown error";
  if (err != nullptr) g_error_free(err);
  g_free(debug);
  return text;
}

void unref_payload(gpointer owner) { delete static_cast<PayloadPtr*>(owner); }

}  // namespace

struct GstRecorder::Impl {
  explicit Impl(RecorderConfig c) : config(std::move(c)) {}

  ~Impl() { release(); }

  void release() {
    if (pipeline != nullptr) gst_element_set_state(pipeline, GST_STATE_NULL);
    if (bus != nullptr) gst_object_unref(bus);
    if (src != nullptr) gst_object_unref(src);
    if (pipeline != nullptr) gst_object_unref(pipeline);
    bus = nullptr;
    src = nullptr;
    pipeline = nullptr;
  }

  /// The first error the pipeline posted, if any; never waits.
  Status bus_error() {
    if (bus == nullptr) return {};
    if (GstMessage* m = gst_bus_pop_filtered(bus, GST_MESSAGE_ERROR)) {
      std::string text = error_text(m);
      gst_message_unref(m);
      return Status::error("recording " + config.path + " failed: " + text, StatusCode::unavailable);
    }
    return {};
  }

  /// Waits while the appsrc holds kMaxQueued frames (backpressure from the
  /// encoder), watching for errors so a failed pipeline never blocks us.
  Status wait_for_room() {
    const std::int64_t deadline = steady_now_ns() + kStallNs;
    while (gst_app_src_get_current_level_buffers(src) >= kMaxQueued) {
      if (Status s = bus_error(); !s.ok()) return s;
      if (steady_now_ns() > deadline) return Status::error("recording " + config.path + ": the encoder is stuck");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return bus_error();
  }

  Status push(GstBuffer* buffer) {
    GST_BUFFER_PTS(buffer) =
        gst_util_uint64_scale(pushed, GST_SECOND * static_cast<guint64>(info.fps_d), static_cast<guint64>(info.fps_n));
    GST_BUFFER_DURATION(buffer) =
        gst_util_uint64_scale(GST_SECOND, static_cast<guint64>(info.fps_d), static_cast<guint64>(info.fps_n));
    const GstFlowReturn r = gst_app_src_push_buffer(src, buffer);
    if (r != GST_FLOW_OK) {
      if (Status s = bus_error(); !s.ok()) return s;
      return Status::error(std::string("recording ") + config.path + ": push failed (" + gst_flow_get_name(r) + ")");
    }
    ++pushed;
    return {};
  }

  RecorderConfig config;
  GstElement* pipeline = nullptr;
  GstAppSrc* src = nullptr;
  GstBus* bus = nullptr;
  GstVideoInfo info{};
  std::uint64_t pushed = 0;
};

GstRecorder::GstRecorder(RecorderConfig config) : impl_(std::make_unique<Impl>(std::move(config))) {}

GstRecorder::~GstRecorder() {
  if (impl_->pipeline != nullptr) finish(2'000'000'000);
}

Status GstRecorder::start() {
  ensure_gst_initialised();
  Impl& m = *impl_;
  const RecorderConfig& c = m.config;
  if (c.width <= 0 || c.height <= 0) return Status::error("recording needs a frame size", StatusCode::invalid_argument);
  const std::string description = record_pipeline(c.container, c.codec, c.quality);
  GError* err = nullptr;
  GstElement* p = gst_parse_launch(description.c_str(), &err);
  if (err != nullptr) {
    std::string text = "cannot build '" + description + "': " + err->message;
    g_error_free(err);
    if (p != nullptr) gst_object_unref(p);
    return Status::error(text, StatusCode::failed_precondition);
  }
  m.pipeline = p;
  GstElement* file = gst_bin_get_by_name(GST_BIN(p), "file");
  GstElement* src = gst_bin_get_by_name(GST_BIN(p), "src");
  if (file == nullptr || src == nullptr) {
    if (file != nullptr) gst_object_unref(file);
    if (src != nullptr) gst_object_unref(src);
    m.release();
    return Status::error("recording pipeline lacks its src or file element");
  }
  g_object_set(file, "location", c.path.c_str(), nullptr);
  gst_object_unref(file);
  m.src = GST_APP_SRC(src);
  m.bus = gst_element_get_bus(p);

  gst_video_info_set_format(&m.info, GST_VIDEO_FORMAT_BGR, static_cast<guint>(c.width), static_cast<guint>(c.height));
  gint fps_n = 30;
  gint fps_d = 1;
  gst_util_double_to_fraction(c.fps, &fps_n, &fps_d);
  if (fps_n <= 0 || fps_d <= 0) {
    fps_n = 30;
    fps_d = 1;
  }
  m.info.fps_n = fps_n;
  m.info.fps_d = fps_d;
  GstCaps* caps = gst_video_info_to_caps(&m.info);
  g_object_set(src, "caps", caps, "format", GST_FORMAT_TIME, "block", FALSE, "max-bytes", static_cast<guint64>(0),
               nullptr);
  gst_caps_unref(caps);

  if (gst_element_set_state(p, GST_STATE_PLAYING) == GST_STATE_CHANGE_FAILURE) {
    Status s = m.bus_error();
    m.release();
    return s.ok() ? Status::error("cannot start recording " + c.path) : s;
  }
  return m.bus_error();
}

std::size_t GstRecorder::stride() const {
  return static_cast<std::size_t>(GST_VIDEO_INFO_PLANE_STRIDE(&impl_->info, 0));
}

std::size_t GstRecorder::frame_size() const { return GST_VIDEO_INFO_SIZE(&impl_->info); }

Status GstRecorder::push_filled(const std::function<void(std::uint8_t* bgr, std::size_t stride)>& fill) {
  Impl& m = *impl_;
  if (m.pipeline == nullptr) return Status::error("recording is not running", StatusCode::failed_precondition);
  if (Status s = m.wait_for_room(); !s.ok()) return s;
  GstBuffer* buffer = gst_buffer_new_allocate(nullptr, frame_size(), nullptr);
  if (buffer == nullptr) return Status::error("cannot allocate a frame buffer");
  GstMapInfo map;
  if (gst_buffer_map(buffer, &map, GST_MAP_WRITE) == FALSE) {
    gst_buffer_unref(buffer);
    return Status::error("cannot map a frame buffer");
  }
  fill(map.data, stride());
  gst_buffer_unmap(buffer, &map);
  return m.push(buffer);
}

Status GstRecorder::push_shared(const std::uint8_t* bgr, PayloadPtr owner) {
  Impl& m = *impl_;
  if (m.pipeline == nullptr) return Status::error("recording is not running", StatusCode::failed_precondition);
  if (Status s = m.wait_for_room(); !s.ok()) return s;
  const std::size_t size = frame_size();
  GstBuffer* buffer = gst_buffer_new_wrapped_full(GST_MEMORY_FLAG_READONLY, const_cast<std::uint8_t*>(bgr), size, 0,
                                                  size, new PayloadPtr(std::move(owner)), unref_payload);
  return m.push(buffer);
}

Status GstRecorder::finish(std::int64_t timeout_ns) {
  Impl& m = *impl_;
  if (m.pipeline == nullptr) return {};
  Status result = m.bus_error();
  if (result.ok()) {
    gst_app_src_end_of_stream(m.src);
    GstMessage* msg = gst_bus_timed_pop_filtered(m.bus, static_cast<GstClockTime>(timeout_ns),
                                                 static_cast<GstMessageType>(GST_MESSAGE_EOS | GST_MESSAGE_ERROR));
    if (msg == nullptr) {
      result = Status::error("recording " + m.config.path + " was not finished within " +
                             std::to_string(timeout_ns / 1'000'000) + " ms");
    } else {
      if (GST_MESSAGE_TYPE(msg) == GST_MESSAGE_ERROR) {
        result = Status::error("recording " + m.config.path + " failed: " + error_text(msg), StatusCode::unavailable);
      }
      gst_message_unref(msg);
    }
  }
  m.release();
  return result;
}

}  // namespace swarmflow::video
