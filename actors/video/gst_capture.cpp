#include "video/gst_capture.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>

#include <gst/app/gstappsink.h>
#include <gst/gst.h>
#include <gst/video/video.h>

#include <swarmflow/envelope.hpp>
#include <swarmflow/schema/frame_generated.h>

#include "video/gst_support.hpp"
#include "video/reconnect_watchdog.hpp"

namespace swarmflow::video {
namespace {

/// How long the capture thread waits for a sample before it looks at the bus.
constexpr GstClockTime kPullTimeout = 20 * GST_MSECOND;

bool to_schema_format(GstVideoFormat format, schema::PixelFormat* out) {
  switch (format) {
    case GST_VIDEO_FORMAT_BGR:
      *out = schema::PixelFormat::BGR;
      return true;
    case GST_VIDEO_FORMAT_RGB:
      *out = schema::PixelFormat::RGB;
      return true;
    case GST_VIDEO_FORMAT_GRAY8:
      *out = schema::PixelFormat::GRAY8;
      return true;
    case GST_VIDEO_FORMAT_NV12:
      *out = schema::PixelFormat::NV12;
      return true;
    case GST_VIDEO_FORMAT_BGRA:
      *out = schema::PixelFormat::BGRA;
      return true;
    default:
      return false;
  }
}

/// A multipart (MJPEG over HTTP) demuxer never says it has no more streams,
/// so decodebin would hold the first frames back until its queue overruns
/// (seconds); a camera sends one stream, so the demuxer may say so at once.
void on_element_added(GstBin* /*bin*/, GstBin* /*sub_bin*/, GstElement* element, gpointer /*data*/) {
  GstElementFactory* factory = gst_element_get_factory(element);
  if (factory != nullptr && g_strcmp0(GST_OBJECT_NAME(factory), "multipartdemux") == 0) {
    g_object_set(element, "single-stream", TRUE, nullptr);
  }
}

/// rtspsrc buffers 2 s by default to smooth network jitter; an inspection
/// camera on a LAN wants its frames sooner.
constexpr guint kRtspLatencyMs = 200;

void on_source_setup(GstElement* /*uridecodebin*/, GstElement* source, gpointer /*data*/) {
  if (g_object_class_find_property(G_OBJECT_GET_CLASS(source), "latency") != nullptr) {
    g_object_set(source, "latency", kRtspLatencyMs, nullptr);
  }
}

/// The text of an ERROR or WARNING message, with the element that posted it.
std::string message_text(GstMessage* message) {
  GError* err = nullptr;
  gchar* debug = nullptr;
  if (GST_MESSAGE_TYPE(message) == GST_MESSAGE_ERROR) {
    gst_message_parse_error(message, &err, &debug);
  } else {
    gst_message_parse_warning(message, &err, &debug);
  }
  std::string text = GST_OBJECT_NAME(GST_MESSAGE_SRC(message));
  text += ": ";
  text += err != nullptr ? err->message : "unknown error";
  if (err != nullptr) g_error_free(err);
  g_free(debug);
  return text;
}

}  // namespace

struct GstCapture::Impl {
  /// How one run of a pipeline ended.
  enum class Run { stopped, ended, failed };

  Impl(CaptureConfig c, CaptureCounters k)
      : config(std::move(c)),
        counters(k),
        live(is_live(config.uri.kind)),
        queue(config.queue_frames),
        watchdog(config.reconnect_ns, config.reconnect_max_ns, config.max_reconnects),
        log(config.log_name),
        next_index(config.first_index) {}

  // -- pipeline -------------------------------------------------------------

  Status build() {
    const std::string description = capture_pipeline(config.uri, config.format, config.queue_frames);
    GError* err = nullptr;
    GstElement* p = gst_parse_launch(description.c_str(), &err);
    if (err != nullptr) {
      std::string text = "cannot build '" + description + "': " + err->message;
      g_error_free(err);
      if (p != nullptr) gst_object_unref(p);
      return Status::error(text, StatusCode::failed_precondition);
    }
    GstElement* src = gst_bin_get_by_name(GST_BIN(p), "src");
    GstElement* app = gst_bin_get_by_name(GST_BIN(p), "sink");
    if (src == nullptr || app == nullptr) {
      if (src != nullptr) gst_object_unref(src);
      if (app != nullptr) gst_object_unref(app);
      gst_object_unref(p);
      return Status::error("capture pipeline lacks its src or sink element");
    }
    switch (config.uri.kind) {
      case SourceKind::file: {
        gchar* uri = gst_filename_to_uri(config.uri.location.c_str(), nullptr);
        g_object_set(src, "uri", uri, nullptr);
        g_free(uri);
        break;
      }
      case SourceKind::rtsp:
        g_object_set(src, "uri", config.uri.uri.c_str(), nullptr);
        g_signal_connect(src, "source-setup", G_CALLBACK(on_source_setup), nullptr);
        break;
      case SourceKind::http:
        g_object_set(src, "location", config.uri.uri.c_str(), nullptr);
        break;
      case SourceKind::v4l2:
        g_object_set(src, "device", config.uri.location.c_str(), nullptr);
        break;
      case SourceKind::test:
        gst_util_set_object_arg(G_OBJECT(src), "pattern", config.uri.location.c_str());
        break;
      case SourceKind::synthetic:
        break;
    }
    gst_object_unref(src);
    g_signal_connect(p, "deep-element-added", G_CALLBACK(on_element_added), nullptr);
    pipeline = p;
    sink = GST_APP_SINK(app);
    return {};
  }

  void teardown() {
    if (pipeline == nullptr) return;
    gst_element_set_state(pipeline, GST_STATE_NULL);
    gst_object_unref(sink);
    gst_object_unref(pipeline);
    sink = nullptr;
    pipeline = nullptr;
  }

  // -- the capture thread ---------------------------------------------------

  void run() {
    Status built = Status::success();
    while (true) {
      std::string why;
      Run r = Run::failed;
      if (pipeline != nullptr) {
        r = pump(&why);
      } else {
        why = built.message();
      }
      teardown();
      if (r == Run::stopped || stop_flag.load()) {
        queue.close(FrameQueue::Outcome::stopped);
        return;
      }
      if (r == Run::ended && !live) {
        queue.close(FrameQueue::Outcome::ended);
        return;
      }
      if (r == Run::ended) why = "unexpected end of stream";
      if (!live) {
        queue.close(FrameQueue::Outcome::failed, why);
        return;
      }
      const std::int64_t now = steady_now_ns();
      const auto next = watchdog.on_failure(now);
      if (!next) {
        const std::string text = "gave up after " + std::to_string(config.max_reconnects) +
                                 " reconnects without a frame; last failure: " + why;
        log.log(text);
        queue.close(FrameQueue::Outcome::failed, text);
        return;
      }
      log.log("live source " + redact_credentials(config.uri.uri) + " failed (" + why + "); reconnecting in " +
              std::to_string((*next - now) / 1'000'000) + " ms");
      if (!sleep_until(*next)) {
        queue.close(FrameQueue::Outcome::stopped);
        return;
      }
      if (counters.reconnects != nullptr) counters.reconnects->fetch_add(1, std::memory_order_relaxed);
      built = build();
    }
  }

  /// Plays the pipeline until it ends, fails or the capture is stopped.
  Run pump(std::string* why) {
    GstBus* bus = gst_element_get_bus(pipeline);
    Run result = Run::stopped;
    if (gst_element_set_state(pipeline, GST_STATE_PLAYING) == GST_STATE_CHANGE_FAILURE) {
      *why = "cannot start the pipeline";
      if (GstMessage* m = gst_bus_pop_filtered(bus, GST_MESSAGE_ERROR)) {
        *why = message_text(m);
        gst_message_unref(m);
      }
      gst_object_unref(bus);
      return Run::failed;
    }
    std::int64_t last_activity = steady_now_ns();
    while (!stop_flag.load()) {
      if (GstSample* sample = gst_app_sink_try_pull_sample(sink, kPullTimeout)) {
        const bool taken = take(sample);
        gst_sample_unref(sample);
        if (!taken) break;
        last_activity = steady_now_ns();
      } else if (gst_app_sink_is_eos(sink) != FALSE) {
        result = Run::ended;
        break;
      }
      bool failed = false;
      while (GstMessage* m =
                 gst_bus_pop_filtered(bus, static_cast<GstMessageType>(GST_MESSAGE_ERROR | GST_MESSAGE_WARNING))) {
        if (GST_MESSAGE_TYPE(m) == GST_MESSAGE_ERROR) {
          *why = message_text(m);
          failed = true;
        } else {
          log.log("warning: " + message_text(m));
        }
        gst_message_unref(m);
        if (failed) break;
      }
      if (failed) {
        result = Run::failed;
        break;
      }
      if (live && config.stall_ns > 0 && steady_now_ns() - last_activity > config.stall_ns) {
        *why = "no frame for " + std::to_string(config.stall_ns / 1'000'000) + " ms";
        result = Run::failed;
        break;
      }
    }
    gst_object_unref(bus);
    return result;
  }

  /// Writes the sample once into a Frame payload and queues it. False when
  /// the capture was stopped while a file source waited for room.
  bool take(GstSample* sample) {
    if (stop_flag.load()) return false;
    GstCaps* caps = gst_sample_get_caps(sample);
    GstBuffer* buffer = gst_sample_get_buffer(sample);
    GstVideoInfo info;
    schema::PixelFormat format = schema::PixelFormat::BGR;
    if (caps == nullptr || buffer == nullptr || gst_video_info_from_caps(&info, caps) == FALSE ||
        !to_schema_format(GST_VIDEO_INFO_FORMAT(&info), &format)) {
      log.log("skipped a sample without usable video caps");
      return true;
    }
    if (!length_known) {
      length_known = true;
      note_length(info);
    }
    GstMapInfo map;
    if (gst_buffer_map(buffer, &map, GST_MAP_READ) == FALSE) {
      log.log("skipped a sample that could not be mapped");
      return true;
    }
    const std::size_t size = GST_VIDEO_INFO_SIZE(&info);
    if (map.size < size) {
      gst_buffer_unmap(buffer, &map);
      log.log("skipped a sample smaller than its caps say");
      return true;
    }
    const std::int64_t capture_ns = steady_now_ns();
    const std::uint64_t index = next_index++;
    // Room for the pixels and the small fields, so the builder never grows
    // (growing would copy the pixels again).
    flatbuffers::FlatBufferBuilder fbb(size + 512 + config.camera_id.size(), &payload_allocator());
    const auto camera = fbb.CreateString(config.camera_id);
    std::uint8_t* pixels = nullptr;
    const auto data = fbb.CreateUninitializedVector(size, &pixels);
    std::memcpy(pixels, map.data, size);  // the one copy of these pixels
    gst_buffer_unmap(buffer, &map);
    const auto frame = schema::CreateFrame(fbb, format, static_cast<std::uint32_t>(GST_VIDEO_INFO_WIDTH(&info)),
                                           static_cast<std::uint32_t>(GST_VIDEO_INFO_HEIGHT(&info)),
                                           static_cast<std::uint32_t>(GST_VIDEO_INFO_PLANE_STRIDE(&info, 0)),
                                           capture_ns, camera, index, data);
    schema::FinishFrameBuffer(fbb, frame);

    CapturedFrame captured;
    captured.header.stream = config.stream;
    captured.header.seq = index;
    captured.header.capture_ns = capture_ns;
    captured.payload = Payload::from_builder(fbb);

    const std::int64_t gap_ns = watchdog.on_frame(capture_ns);
    if (gap_ns > 0 && counters.gap_ms != nullptr) {
      counters.gap_ms->fetch_add(gap_ns / 1'000'000, std::memory_order_relaxed);
    }
    if (!live) return queue.push_wait(std::move(captured));
    const std::size_t dropped = queue.push_drop_oldest(std::move(captured));
    if (dropped > 0 && counters.dropped_frames != nullptr) {
      counters.dropped_frames->fetch_add(static_cast<std::int64_t>(dropped), std::memory_order_relaxed);
    }
    return true;
  }

  /// Sets `expected` to a file's frame count at the output rate, from its
  /// duration; nothing when either is unknown (a variable frame rate).
  void note_length(const GstVideoInfo& info) {
    if (live || counters.expected == nullptr) return;
    gint64 duration = 0;
    if (info.fps_n <= 0 || info.fps_d <= 0 || gst_element_query_duration(pipeline, GST_FORMAT_TIME, &duration) == FALSE ||
        duration <= 0) {
      return;
    }
    auto frames = static_cast<std::int64_t>(
        gst_util_uint64_scale_round(static_cast<guint64>(duration), static_cast<guint64>(info.fps_n),
                                    static_cast<guint64>(info.fps_d) * GST_SECOND));
    if (config.frame_limit > 0) frames = std::min(frames, config.frame_limit);
    counters.expected->store(frames, std::memory_order_relaxed);
  }

  /// Waits until `t_ns` (steady clock); false when stopped meanwhile.
  bool sleep_until(std::int64_t t_ns) {
    std::unique_lock<std::mutex> lock(mutex);
    const auto deadline = std::chrono::steady_clock::time_point(std::chrono::nanoseconds(t_ns));
    wake.wait_until(lock, deadline, [this] { return stop_flag.load(); });
    return !stop_flag.load();
  }

  CaptureConfig config;
  CaptureCounters counters;
  const bool live;
  FrameQueue queue;
  ReconnectWatchdog watchdog;
  RateLimitedLog log;
  std::uint64_t next_index;
  bool length_known = false;  ///< the first frame was seen and the length looked up

  GstElement* pipeline = nullptr;
  GstAppSink* sink = nullptr;

  std::thread thread;
  std::mutex mutex;
  std::condition_variable wake;
  std::atomic<bool> stop_flag{false};
};

GstCapture::GstCapture(CaptureConfig config, CaptureCounters counters)
    : impl_(std::make_unique<Impl>(std::move(config), counters)) {}

GstCapture::~GstCapture() { stop(); }

Status GstCapture::start() {
  ensure_gst_initialised();
  Status s = impl_->build();
  if (!s.ok()) return s;
  impl_->thread = std::thread([impl = impl_.get()] { impl->run(); });
  return {};
}

FrameQueue::Pop GstCapture::try_pop(CapturedFrame* frame, std::string* error) {
  return impl_->queue.try_pop(frame, error);
}

void GstCapture::stop() {
  if (!impl_) return;
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->stop_flag.store(true);
  }
  impl_->wake.notify_all();
  impl_->queue.close(FrameQueue::Outcome::stopped);
  if (impl_->thread.joinable()) impl_->thread.join();
  impl_->teardown();
}

}  // namespace swarmflow::video
