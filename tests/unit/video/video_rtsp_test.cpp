// video.source against a real RTSP camera: gst-rtsp-server in the test
// process, serving RTP/JPEG on loopback, over UDP (rtsp://, rtspsrc's first
// choice) and over TCP (rtspt://, RTP interleaved on the RTSP connection).
// Frames arrive decoded, in order and at the camera's size; when the camera
// is switched off and on again, the source reconnects, measures the gap and
// delivers frames again.

#include <gtest/gtest.h>

#include <gst/gst.h>
#include <gst/rtsp-server/rtsp-server.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <opencv2/core.hpp>

#include "video/frame_overlay.hpp"
#include "video/gst_support.hpp"
#include "video_test_support.hpp"

namespace swarmflow {
namespace {

using testing::StageRunner;
using video_test::pull_until;
using video_test::video_registry;

constexpr int kWidth = 320;
constexpr int kHeight = 240;
constexpr const char* kMount = "/test";
/// SMPTE bars (the first bar light grey, the second yellow), 30 frames a second.
constexpr const char* kLaunch =
    "( videotestsrc is-live=true pattern=smpte ! video/x-raw,format=I420,width=320,height=240,framerate=30/1 ! "
    "jpegenc quality=90 ! rtpjpegpay name=pay0 pt=96 )";

/// An RTSP camera on 127.0.0.1: gst-rtsp-server serving `kLaunch` at
/// rtsp://127.0.0.1:PORT/test from a main loop on its own thread. Destroying
/// it closes every client connection and the listening socket, as switching
/// a camera off does.
class RtspCamera {
 public:
  /// Listens on `port`; 0 = any free port (see `port()`).
  explicit RtspCamera(int port = 0) {
    video::ensure_gst_initialised();
    context_ = g_main_context_new();
    loop_ = g_main_loop_new(context_, FALSE);
    server_ = gst_rtsp_server_new();
    gst_rtsp_server_set_address(server_, "127.0.0.1");
    gst_rtsp_server_set_service(server_, std::to_string(port).c_str());
    GstRTSPMediaFactory* factory = gst_rtsp_media_factory_new();
    gst_rtsp_media_factory_set_launch(factory, kLaunch);
    GstRTSPMountPoints* mounts = gst_rtsp_server_get_mount_points(server_);
    gst_rtsp_mount_points_add_factory(mounts, kMount, factory);  // takes the factory
    g_object_unref(mounts);
    GError* err = nullptr;
    listener_ = gst_rtsp_server_create_source(server_, nullptr, &err);
    if (listener_ == nullptr) {
      error_ = err != nullptr ? err->message : "cannot listen";
      if (err != nullptr) g_error_free(err);
      return;
    }
    g_source_attach(listener_, context_);
    port_ = gst_rtsp_server_get_bound_port(server_);
    thread_ = std::thread([this] { g_main_loop_run(loop_); });
  }

  ~RtspCamera() {
    if (thread_.joinable()) {
      // Switched off on the loop's own thread, which then leaves the loop.
      GSource* off = g_idle_source_new();
      g_source_set_callback(off, &RtspCamera::switch_off, this, nullptr);
      g_source_attach(off, context_);
      g_source_unref(off);
      thread_.join();
    }
    if (listener_ != nullptr) g_source_unref(listener_);
    g_object_unref(server_);
    g_main_loop_unref(loop_);
    g_main_context_unref(context_);
  }

  RtspCamera(const RtspCamera&) = delete;
  RtspCamera& operator=(const RtspCamera&) = delete;

  bool listening() const { return port_ > 0; }
  const std::string& error() const { return error_; }
  int port() const { return port_; }
  /// The stream's URI with `scheme` (rtsp or rtspt).
  std::string uri(const std::string& scheme) const {
    return scheme + "://127.0.0.1:" + std::to_string(port_) + kMount;
  }

 private:
  static GstRTSPFilterResult drop_client(GstRTSPServer* /*server*/, GstRTSPClient* /*client*/, gpointer /*data*/) {
    return GST_RTSP_FILTER_REMOVE;
  }

  static gboolean switch_off(gpointer data) {
    auto* self = static_cast<RtspCamera*>(data);
    gst_rtsp_server_client_filter(self->server_, &RtspCamera::drop_client, nullptr);  // closes their connections
    g_source_destroy(self->listener_);
    g_main_loop_quit(self->loop_);
    return G_SOURCE_REMOVE;
  }

  GMainContext* context_ = nullptr;
  GMainLoop* loop_ = nullptr;
  GstRTSPServer* server_ = nullptr;
  GSource* listener_ = nullptr;
  int port_ = 0;
  std::string error_;
  std::thread thread_;
};

/// Mean BGR around (x, y) of a BGR frame.
cv::Scalar colour_at(const schema::Frame& frame, int x, int y) {
  const cv::Mat view = video::pixels_of(frame);
  return cv::mean(view(cv::Rect(x - 4, y - 4, 8, 8)));
}

/// Checks what every frame of the camera must be: its size, BGR, the bars,
/// the camera id, and numbers and capture times that only grow.
void expect_camera_frames(const std::vector<Envelope>& frames) {
  for (std::size_t i = 0; i < frames.size(); ++i) {
    const auto* f = frames[i].as<schema::Frame>();
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(f->width(), static_cast<std::uint32_t>(kWidth));
    EXPECT_EQ(f->height(), static_cast<std::uint32_t>(kHeight));
    EXPECT_EQ(f->format(), schema::PixelFormat::BGR);
    EXPECT_GE(f->stride(), static_cast<std::uint32_t>(kWidth * 3));
    ASSERT_NE(f->camera_id(), nullptr);
    EXPECT_EQ(f->camera_id()->str(), "door-0");
    EXPECT_EQ(frames[i].header().seq, f->frame_index());
    EXPECT_EQ(frames[i].header().capture_ns, f->capture_ns());
    // The pixels were decoded: a light grey bar, then a yellow one.
    const cv::Scalar grey = colour_at(*f, kWidth / 14, kHeight / 3);
    const cv::Scalar yellow = colour_at(*f, 3 * kWidth / 14, kHeight / 3);
    EXPECT_GT(grey[0], 150) << "frame " << i;
    EXPECT_NEAR(grey[1], grey[0], 20) << "frame " << i;
    EXPECT_NEAR(grey[2], grey[0], 20) << "frame " << i;
    EXPECT_LT(yellow[0], 70) << "frame " << i;
    EXPECT_GT(yellow[1], 150) << "frame " << i;
    EXPECT_GT(yellow[2], 150) << "frame " << i;
    if (i > 0) {
      const auto* prev = frames[i - 1].as<schema::Frame>();
      EXPECT_GT(f->frame_index(), prev->frame_index()) << "frame " << i;
      EXPECT_GE(f->capture_ns(), prev->capture_ns()) << "frame " << i;
    }
  }
  if (!frames.empty()) {
    EXPECT_EQ(frames.front().header().stream, frames.back().header().stream);
  }
}

/// Sets `source` to read `uri` and to reconnect fast.
void configure_source(StageRunner& source, const std::string& uri) {
  ASSERT_TRUE(source.set("uri", uri).ok());
  ASSERT_TRUE(source.set("reconnect_ms", std::int64_t{20}).ok());
  ASSERT_TRUE(source.set("reconnect_max_ms", std::int64_t{200}).ok());
}

/// The parameter is the URI scheme: rtsp (UDP) or rtspt (TCP).
class VideoRtsp : public ::testing::TestWithParam<std::string> {};

TEST_P(VideoRtsp, LiveCameraDeliversDecodedFramesInOrder) {
  RtspCamera camera;
  ASSERT_TRUE(camera.listening()) << camera.error();
  StageRunner source(video_registry(), "video.source", "door");
  video_test::StopGuard stop_source(source);
  configure_source(source, camera.uri(GetParam()));
  Status s = source.start();
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_TRUE(source.live());

  bool all_ok = true;
  s = pull_until(
      source, [&] { return source.output("frames").size() >= 20; }, std::chrono::seconds(30), &all_ok);
  EXPECT_TRUE(all_ok) << s.message();
  ASSERT_GE(source.output("frames").size(), 20U);
  expect_camera_frames(source.output("frames"));
  EXPECT_EQ(source.counter_value("reconnects"), 0);  // a healthy camera is never rebuilt
  source.stop();
}

TEST_P(VideoRtsp, SourceReconnectsWhenTheCameraComesBack) {
  auto camera = std::make_unique<RtspCamera>();
  ASSERT_TRUE(camera->listening()) << camera->error();
  const int port = camera->port();
  const std::string uri = camera->uri(GetParam());
  StageRunner source(video_registry(), "video.source", "door");
  video_test::StopGuard stop_source(source);
  configure_source(source, uri);
  Status s = source.start();
  ASSERT_TRUE(s.ok()) << s.message();

  bool all_ok = true;
  s = pull_until(
      source, [&] { return source.output("frames").size() >= 10; }, std::chrono::seconds(30), &all_ok);
  EXPECT_TRUE(all_ok) << s.message();
  ASSERT_GE(source.output("frames").size(), 10U);
  EXPECT_EQ(source.counter_value("reconnects"), 0);
  EXPECT_EQ(source.counter_value("gap_ms"), 0);

  // The camera is switched off: the source sees its connection close, keeps
  // returning ok and tries again (and again: nothing listens).
  camera.reset();
  s = pull_until(
      source, [&] { return source.counter_value("reconnects") >= 2; }, std::chrono::seconds(30), &all_ok);
  EXPECT_TRUE(all_ok) << s.message();
  ASSERT_GE(source.counter_value("reconnects"), 2);
  EXPECT_EQ(source.counter_value("gap_ms"), 0);  // no frame yet, so the outage has not ended
  const std::size_t before = source.output("frames").size();

  // The camera comes back on the same port: frames flow again.
  camera = std::make_unique<RtspCamera>(port);
  ASSERT_TRUE(camera->listening()) << camera->error();
  s = pull_until(
      source, [&] { return source.output("frames").size() >= before + 10; }, std::chrono::seconds(30), &all_ok);
  EXPECT_TRUE(all_ok) << s.message();
  ASSERT_GE(source.output("frames").size(), before + 10);
  EXPECT_GT(source.counter_value("gap_ms"), 0);  // the outage was measured
  // Numbering goes on across the outage: no frame number is used twice.
  expect_camera_frames(source.output("frames"));
  source.stop();
}

INSTANTIATE_TEST_SUITE_P(Transports, VideoRtsp, ::testing::Values("rtsp", "rtspt"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace swarmflow
