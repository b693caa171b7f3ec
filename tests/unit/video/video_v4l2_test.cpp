// video.source on `v4l2://` without a camera: this machine has no
// /dev/video* device and its kernel cannot load v4l2loopback or vivid, so no
// frame is ever captured here. What is tested: the URI, the pipeline
// description (parsed by GStreamer into the intended elements and caps), that
// the device path reaches v4l2src as its `device` property (v4l2src names it
// in its errors), and the watchdog on a device that is missing, then a
// regular file, then /dev/null: the source starts, stays live, logs and
// counts its reconnects with a growing backoff and never emits a frame.

#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <gst/gst.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "video/gst_support.hpp"
#include "video/video_uri.hpp"
#include "video_test_support.hpp"

namespace swarmflow {
namespace {

using testing::StageRunner;
using video_test::pull_until;
using video_test::video_registry;

/// A fresh directory in the temporary directory, unique to this process and
/// `name`; removed with its contents on destruction.
class TempDir {
 public:
  explicit TempDir(const std::string& name)
      : path_(std::filesystem::temp_directory_path() / ("swarmflow_v4l2_" + std::to_string(::getpid()) + "_" + name)) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::filesystem::path path() const { return path_; }

 private:
  std::filesystem::path path_;
};

/// Sends the process's stderr (where the capture logs) to `path` while it
/// lives, so a test can read the log lines.
class StderrCapture {
 public:
  explicit StderrCapture(std::string path) : path_(std::move(path)) {
    std::fflush(stderr);
    const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) return;
    saved_ = ::dup(STDERR_FILENO);
    if (saved_ >= 0) ::dup2(fd, STDERR_FILENO);
    ::close(fd);
  }
  ~StderrCapture() {
    std::fflush(stderr);
    if (saved_ < 0) return;
    ::dup2(saved_, STDERR_FILENO);
    ::close(saved_);
  }
  StderrCapture(const StderrCapture&) = delete;
  StderrCapture& operator=(const StderrCapture&) = delete;

  bool active() const { return saved_ >= 0; }
  /// Everything written to stderr so far.
  std::string text() const {
    std::ifstream in(path_);
    std::stringstream all;
    all << in.rdbuf();
    return all.str();
  }

 private:
  std::string path_;
  int saved_ = -1;
};

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

/// The waits of the "reconnecting in N ms" log lines, in order.
std::vector<long> logged_backoffs_ms(const std::string& log) {
  const std::string key = "reconnecting in ";
  std::vector<long> waits;
  for (std::size_t at = log.find(key); at != std::string::npos; at = log.find(key, at + 1)) {
    waits.push_back(std::strtol(log.c_str() + at + key.size(), nullptr, 10));
  }
  return waits;
}

/// Sets `source` to read `device` and to reconnect fast.
void configure_source(StageRunner& source, const std::filesystem::path& device) {
  ASSERT_TRUE(source.set("uri", "v4l2://" + device.string()).ok());
  ASSERT_TRUE(source.set("reconnect_ms", std::int64_t{20}).ok());
  ASSERT_TRUE(source.set("reconnect_max_ms", std::int64_t{200}).ok());
}

// -- the URI and the pipeline description ---------------------------------------

TEST(VideoV4l2, UriNamesTheDevice) {
  video::SourceUri u;
  std::string error;
  ASSERT_TRUE(video::parse_source_uri("v4l2:///dev/video2", &u, &error)) << error;
  EXPECT_EQ(u.kind, video::SourceKind::v4l2);
  EXPECT_EQ(u.location, "/dev/video2");
  EXPECT_EQ(u.uri, "v4l2:///dev/video2");
  ASSERT_TRUE(video::parse_source_uri("v4l2://", &u, &error)) << error;
  EXPECT_EQ(u.location, "/dev/video0");
  ASSERT_TRUE(video::parse_source_uri("v4l2:///dev/v4l/by-id/usb-Cam 1 ! x-video-index0", &u, &error)) << error;
  EXPECT_EQ(u.location, "/dev/v4l/by-id/usb-Cam 1 ! x-video-index0");  // verbatim, never parsed
  EXPECT_TRUE(video::is_live(video::SourceKind::v4l2));
}

TEST(VideoV4l2, PipelineDescriptionHasTheRequestedCaps) {
  const video::SourceUri uri{video::SourceKind::v4l2, "v4l2:///dev/video1", "/dev/video1"};
  video::CaptureFormat format;
  format.format = "NV12";
  format.width = 640;
  format.height = 480;
  format.fps = 15;
  EXPECT_EQ(video::capture_pipeline(uri, format, 3),
            "v4l2src name=src ! decodebin ! videoconvert ! videoscale ! videorate ! "
            "video/x-raw,format=NV12,width=640,height=480,framerate=15/1 ! "
            "appsink name=sink sync=false max-buffers=3 drop=true");
  // Nothing asked for: the camera's own size and rate, converted to BGR.
  EXPECT_EQ(video::capture_pipeline(uri, video::CaptureFormat{}, 4),
            "v4l2src name=src ! decodebin ! videoconvert ! videoscale ! video/x-raw,format=BGR ! "
            "appsink name=sink sync=false max-buffers=4 drop=true");
  // The device is set as a property of `src` afterwards, never written into
  // the description.
  EXPECT_FALSE(contains(video::capture_pipeline(uri, format, 3), "/dev/video1"));
}

/// The factory name of `element` (v4l2src, capsfilter, ...).
std::string factory_of(GstElement* element) {
  GstElementFactory* factory = gst_element_get_factory(element);
  return factory != nullptr ? GST_OBJECT_NAME(factory) : "";
}

/// The element linked to `pad_name` of `element`, or null; the caller unrefs it.
GstElement* peer_of(GstElement* element, const char* pad_name) {
  GstPad* pad = gst_element_get_static_pad(element, pad_name);
  if (pad == nullptr) return nullptr;
  GstPad* peer = gst_pad_get_peer(pad);
  gst_object_unref(pad);
  if (peer == nullptr) return nullptr;
  GstElement* other = gst_pad_get_parent_element(peer);
  gst_object_unref(peer);
  return other;
}

TEST(VideoV4l2, PipelineDescriptionParsesIntoTheIntendedElements) {
  video::ensure_gst_initialised();
  ASSERT_TRUE(video::gst_element_available("v4l2src")) << "v4l2src (gstreamer1.0-plugins-good) is not installed";
  const video::SourceUri uri{video::SourceKind::v4l2, "v4l2:///dev/video1", "/dev/video1"};
  video::CaptureFormat format;
  format.format = "GRAY8";
  format.width = 320;
  format.height = 240;
  format.fps = 7.5;
  const std::string description = video::capture_pipeline(uri, format, 2);
  GError* err = nullptr;
  GstElement* pipeline = gst_parse_launch(description.c_str(), &err);
  ASSERT_EQ(err, nullptr) << err->message;
  ASSERT_NE(pipeline, nullptr);

  // The camera, then a decoder for raw or MJPEG cameras.
  GstElement* src = gst_bin_get_by_name(GST_BIN(pipeline), "src");
  ASSERT_NE(src, nullptr);
  EXPECT_EQ(factory_of(src), "v4l2src");
  GstElement* decoder = peer_of(src, "src");
  ASSERT_NE(decoder, nullptr);
  EXPECT_EQ(factory_of(decoder), "decodebin");
  gst_object_unref(decoder);
  gst_object_unref(src);

  // From the appsink upstream up to the decoder's (dynamic, not yet linked) pad.
  GstElement* sink = gst_bin_get_by_name(GST_BIN(pipeline), "sink");
  ASSERT_NE(sink, nullptr);
  guint max_buffers = 0;
  gboolean drop = FALSE;
  gboolean sync = TRUE;
  g_object_get(sink, "max-buffers", &max_buffers, "drop", &drop, "sync", &sync, nullptr);
  EXPECT_EQ(max_buffers, 2U);
  EXPECT_TRUE(drop);  // live: the camera is never blocked
  EXPECT_FALSE(sync);
  std::vector<std::string> chain;
  GstCaps* caps = nullptr;
  for (GstElement* e = sink; e != nullptr;) {
    chain.push_back(factory_of(e));
    if (chain.back() == "capsfilter") g_object_get(e, "caps", &caps, nullptr);
    GstElement* up = peer_of(e, "sink");
    gst_object_unref(e);
    e = up;
  }
  EXPECT_EQ(chain, (std::vector<std::string>{"appsink", "capsfilter", "videorate", "videoscale", "videoconvert"}));

  ASSERT_NE(caps, nullptr);
  ASSERT_EQ(gst_caps_get_size(caps), 1U);
  const GstStructure* s = gst_caps_get_structure(caps, 0);
  EXPECT_STREQ(gst_structure_get_name(s), "video/x-raw");
  EXPECT_EQ(gst_structure_n_fields(s), 4);
  EXPECT_STREQ(gst_structure_get_string(s, "format"), "GRAY8");
  int width = 0;
  int height = 0;
  int num = 0;
  int den = 0;
  EXPECT_TRUE(gst_structure_get_int(s, "width", &width));
  EXPECT_TRUE(gst_structure_get_int(s, "height", &height));
  EXPECT_TRUE(gst_structure_get_fraction(s, "framerate", &num, &den));
  EXPECT_EQ(width, 320);
  EXPECT_EQ(height, 240);
  EXPECT_EQ(num, 15);
  EXPECT_EQ(den, 2);
  gst_caps_unref(caps);
  gst_object_unref(pipeline);
}

// -- no camera: the watchdog ----------------------------------------------------------

TEST(VideoV4l2, MissingOrNonV4l2DeviceKeepsTheSourceLiveAndRetrying) {
  const TempDir dir("retry");
  const std::filesystem::path device = dir.path() / "video0";
  const std::string quoted = "'" + device.string() + "'";
  StderrCapture log((dir.path() / "stderr.log").string());
  ASSERT_TRUE(log.active());
  StageRunner source(video_registry(), "video.source", "usb");
  video_test::StopGuard stop_source(source);
  configure_source(source, device);
  Status s = source.start();
  ASSERT_TRUE(s.ok()) << s.message();  // a live source starts without its camera
  EXPECT_TRUE(source.live());

  // Nothing at the path: every attempt fails, process() keeps returning ok,
  // and the wait grows from reconnect_ms to reconnect_max_ms.
  bool all_ok = true;
  s = pull_until(
      source,
      [&] {
        const std::vector<long> waits = logged_backoffs_ms(log.text());
        return source.counter_value("reconnects") >= 3 && std::find(waits.begin(), waits.end(), 200) != waits.end();
      },
      std::chrono::seconds(60), &all_ok);
  EXPECT_TRUE(all_ok) << s.message();
  std::string text = log.text();
  EXPECT_GE(source.counter_value("reconnects"), 3) << text;
  EXPECT_TRUE(contains(text, "usb[0]: live source v4l2://" + device.string() + " failed")) << text;
  EXPECT_TRUE(contains(text, "Cannot identify device " + quoted)) << text;
  const std::vector<long> waits = logged_backoffs_ms(text);
  ASSERT_FALSE(waits.empty()) << text;
  // The first failure waits reconnect_ms, later ones double up to the cap.
  EXPECT_EQ(waits.front(), 20) << text;
  EXPECT_NE(std::find(waits.begin(), waits.end(), 200), waits.end()) << text;
  EXPECT_LE(*std::max_element(waits.begin(), waits.end()), 200) << text;

  // The path appears as a regular file: v4l2src opens it, refuses it, and the
  // source goes on retrying.
  std::int64_t before = source.counter_value("reconnects");
  std::ofstream(device) << "not a camera\n";
  const std::string not_a_device = "This isn't a device " + quoted;
  s = pull_until(
      source, [&] { return source.counter_value("reconnects") >= before + 2 && contains(log.text(), not_a_device); },
      std::chrono::seconds(60), &all_ok);
  EXPECT_TRUE(all_ok) << s.message();
  text = log.text();
  EXPECT_TRUE(contains(text, not_a_device)) << text;
  EXPECT_GE(source.counter_value("reconnects"), before + 2);

  // Then as a character device that is no V4L2 driver (/dev/null).
  before = source.counter_value("reconnects");
  std::filesystem::remove(device);
  std::filesystem::create_symlink("/dev/null", device);
  const std::string not_v4l2 = "Error getting capabilities for device " + quoted + ": It isn't a v4l2 driver";
  s = pull_until(
      source, [&] { return source.counter_value("reconnects") >= before + 2 && contains(log.text(), not_v4l2); },
      std::chrono::seconds(60), &all_ok);
  EXPECT_TRUE(all_ok) << s.message();
  text = log.text();
  EXPECT_TRUE(contains(text, not_v4l2)) << text;
  EXPECT_GE(source.counter_value("reconnects"), before + 2);

  EXPECT_TRUE(source.output("frames").empty());
  EXPECT_EQ(source.counter_value("frames"), 0);
  EXPECT_EQ(source.counter_value("gap_ms"), 0);  // no frame, so the outage has not ended
  source.stop();
}

TEST(VideoV4l2, GivesUpNamingTheDeviceAndWhy) {
  const TempDir dir("give_up");
  struct Case {
    std::filesystem::path device;
    std::function<void(const std::filesystem::path&)> place;  ///< puts something at the device path
    std::string says;                                         ///< v4l2src's error, naming the device
  };
  const auto quoted = [](const std::filesystem::path& p) { return "'" + p.string() + "'"; };
  const std::filesystem::path missing = dir.path() / "video0";
  const std::filesystem::path file = dir.path() / "video1";
  const std::filesystem::path null = dir.path() / "video2";
  // Pipeline syntax in the path stays part of the device name.
  const std::filesystem::path odd = dir.path() / "cam ! fakesrc name=x ! fakesink";
  const std::vector<Case> cases = {
      {missing, [](const std::filesystem::path&) {}, "Cannot identify device " + quoted(missing)},
      {file, [](const std::filesystem::path& p) { std::ofstream(p) << "not a camera\n"; },
       "This isn't a device " + quoted(file)},
      {null, [](const std::filesystem::path& p) { std::filesystem::create_symlink("/dev/null", p); },
       "Error getting capabilities for device " + quoted(null) + ": It isn't a v4l2 driver"},
      {odd, [](const std::filesystem::path&) {}, "Cannot identify device " + quoted(odd)},
  };
  for (const Case& c : cases) {
    c.place(c.device);
    StageRunner source(video_registry(), "video.source", "usb");
    video_test::StopGuard stop_source(source);
    configure_source(source, c.device);
    ASSERT_TRUE(source.set("reconnect_ms", std::int64_t{10}).ok());
    ASSERT_TRUE(source.set("max_reconnects", std::int64_t{2}).ok());
    Status s = source.start();
    ASSERT_TRUE(s.ok()) << c.device << ": " << s.message();
    s = pull_until(
        source, [] { return false; }, std::chrono::seconds(60));
    EXPECT_TRUE(s.is_error()) << c.device;
    EXPECT_TRUE(contains(s.message(), "gave up after 2 reconnects without a frame; last failure: src: " + c.says))
        << s.message();
    EXPECT_EQ(source.counter_value("reconnects"), 2) << c.device;
    EXPECT_TRUE(source.output("frames").empty()) << c.device;
    source.stop();
  }
}

}  // namespace
}  // namespace swarmflow
