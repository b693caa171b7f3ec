// video.sink writes a file that video.source reads back: count, size,
// format, order and content survive, through MJPEG in AVI, MKV and MP4 and
// through H.264 (x264enc) in MP4 and MKV; annotations are drawn on their frame.
// H.264 is written 4:2:0 in a profile every player decodes.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include <gst/app/gstappsink.h>
#include <gst/gst.h>
#include <opencv2/core.hpp>

#include "video/frame_overlay.hpp"
#include "video/gst_support.hpp"
#include "video_test_support.hpp"

namespace swarmflow {
namespace {

using testing::StageRunner;
using video_test::make_frame;
using video_test::make_results;
using video_test::pull_until;
using video_test::TempFile;
using video_test::video_registry;

constexpr int kWidth = 320;
constexpr int kHeight = 240;
constexpr int kFrames = 30;

/// Writes `count` generated frames to `uri` with video.sink.
void write_video(const std::string& uri, int count, const std::string& codec = "mjpeg") {
  StageRunner sink(video_registry(), "video.sink", "record");
  video_test::StopGuard stop_sink(sink);
  ASSERT_TRUE(sink.set("uri", uri).ok());
  ASSERT_TRUE(sink.set("codec", codec).ok());
  ASSERT_TRUE(sink.set("fps", 30.0).ok());
  ASSERT_TRUE(sink.set("quality", std::int64_t{90}).ok());
  Status s = sink.start();
  ASSERT_TRUE(s.ok()) << s.message();
  for (int i = 0; i < count; ++i) {
    s = sink.feed("frames", make_frame(static_cast<std::uint64_t>(i), kWidth, kHeight));
    ASSERT_TRUE(s.ok()) << s.message();
  }
  sink.stop();
  EXPECT_EQ(sink.counter_value("written"), count);
}

/// Reads every frame of `uri` with video.source.
std::vector<Envelope> read_video(const std::string& uri, const std::string& format = "BGR", int width = 0,
                                 int height = 0) {
  StageRunner source(video_registry(), "video.source", "replay");
  video_test::StopGuard stop_source(source);
  EXPECT_TRUE(source.set("uri", uri).ok());
  EXPECT_TRUE(source.set("format", format).ok());
  EXPECT_TRUE(source.set("width", std::int64_t{width}).ok());
  EXPECT_TRUE(source.set("height", std::int64_t{height}).ok());
  Status s = source.start();
  EXPECT_TRUE(s.ok()) << s.message();
  if (!s.ok()) return {};
  EXPECT_FALSE(source.live());
  bool all_ok = true;
  s = pull_until(
      source, [] { return false; }, std::chrono::seconds(60), &all_ok);
  EXPECT_TRUE(all_ok) << s.message();
  EXPECT_TRUE(s.is_end_of_stream()) << "the file did not end: " << s.message();
  source.stop();
  return source.output("frames");
}

/// Mean BGR of the frame's centre.
cv::Scalar centre_colour(const schema::Frame& frame) {
  const cv::Mat view = video::pixels_of(frame);
  return cv::mean(view(cv::Rect(view.cols / 4, view.rows / 4, view.cols / 2, view.rows / 2)));
}

/// True when the bytes of the file at `path` contain `marker` (a codec's id
/// in its container: "avc1" in MP4, "V_MPEG4/ISO/AVC" in Matroska, ...).
bool file_contains(const std::string& path, const std::string& marker) {
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return bytes.find(marker) != std::string::npos;
}

/// The H.264 stream of the file at `path`, as h264parse describes it.
struct H264Stream {
  std::string profile;        ///< "high", "main", "high-4:4:4", ...; empty when unreadable
  std::string chroma_format;  ///< "4:2:0", "4:4:4", ...
  std::string error;          ///< why the stream could not be read
};

/// Demuxes the file with `demuxer` (qtdemux, matroskademux) and reads the
/// profile and chroma format h264parse puts in the stream's caps.
H264Stream h264_stream_of(const std::string& path, const std::string& demuxer) {
  video::ensure_gst_initialised();
  H264Stream result;
  const std::string description = "filesrc name=file ! " + demuxer + " ! h264parse ! appsink name=out sync=false";
  GError* err = nullptr;
  GstElement* pipeline = gst_parse_launch(description.c_str(), &err);
  if (err != nullptr) {
    result.error = err->message;
    g_error_free(err);
    if (pipeline != nullptr) gst_object_unref(pipeline);
    return result;
  }
  GstElement* file = gst_bin_get_by_name(GST_BIN(pipeline), "file");
  g_object_set(file, "location", path.c_str(), nullptr);
  gst_object_unref(file);
  GstElement* out = gst_bin_get_by_name(GST_BIN(pipeline), "out");
  gst_element_set_state(pipeline, GST_STATE_PAUSED);
  GstSample* sample = gst_app_sink_try_pull_preroll(GST_APP_SINK(out), 30 * GST_SECOND);
  if (sample == nullptr) {
    result.error = "no preroll sample from " + path;
  } else {
    const GstStructure* s = gst_caps_get_structure(gst_sample_get_caps(sample), 0);
    if (const gchar* v = gst_structure_get_string(s, "profile")) result.profile = v;
    if (const gchar* v = gst_structure_get_string(s, "chroma-format")) result.chroma_format = v;
    gst_sample_unref(sample);
  }
  gst_element_set_state(pipeline, GST_STATE_NULL);
  gst_object_unref(out);
  gst_object_unref(pipeline);
  return result;
}

/// Checks that `frames` read back from `name` are the kFrames written, in
/// order, at their size, in BGR, numbered from 0 and captured in order.
void expect_written_frames(const std::vector<Envelope>& frames, const std::string& name) {
  ASSERT_EQ(frames.size(), static_cast<std::size_t>(kFrames)) << name;
  for (std::size_t i = 0; i < frames.size(); ++i) {
    const auto* f = frames[i].as<schema::Frame>();
    ASSERT_NE(f, nullptr) << name;
    EXPECT_EQ(f->width(), static_cast<std::uint32_t>(kWidth)) << name;
    EXPECT_EQ(f->height(), static_cast<std::uint32_t>(kHeight)) << name;
    EXPECT_EQ(f->format(), schema::PixelFormat::BGR) << name;
    EXPECT_GE(f->stride(), static_cast<std::uint32_t>(kWidth * 3)) << name;
    EXPECT_EQ(f->frame_index(), i) << name;
    EXPECT_EQ(frames[i].header().seq, i) << name;
    EXPECT_GT(f->capture_ns(), 0) << name;
    EXPECT_EQ(frames[i].header().capture_ns, f->capture_ns()) << name;
    if (i > 0) {
      EXPECT_GE(f->capture_ns(), frames[i - 1].as<schema::Frame>()->capture_ns()) << name << " frame " << i;
    }
    ASSERT_NE(f->camera_id(), nullptr) << name;
    EXPECT_EQ(f->camera_id()->str(), "replay-0") << name;
    // The content says which frame it is, so the order is the written one.
    const cv::Scalar c = centre_colour(*f);
    EXPECT_NEAR(c[0], video_test::level_of(i), 8.0) << name << " frame " << i;
    EXPECT_NEAR(c[2], 255 - video_test::level_of(i), 8.0) << name << " frame " << i;
  }
  // Every frame of one camera shares one stream id.
  EXPECT_EQ(frames.front().header().stream, frames.back().header().stream) << name;
}

TEST(VideoRoundTrip, MjpegAviKeepsCountSizeFormatAndOrder) {
  TempFile file("round_trip.avi");
  write_video(file.uri(), kFrames);
  ASSERT_TRUE(std::filesystem::exists(file.path()));
  ASSERT_GT(std::filesystem::file_size(file.path()), 1000U);
  EXPECT_TRUE(file_contains(file.path(), "MJPG"));
  expect_written_frames(read_video(file.uri()), "round_trip.avi");
}

TEST(VideoSource, AFileRestoredFromItsSnapshotGoesOnFromItsPosition) {
  // Read 12 frames, snapshot, then a new replica restores it: it sends the
  // frames from 12 on, numbered as the first would have, and ends at 30.
  TempFile file("position.avi");
  write_video(file.uri(), kFrames);
  StageRunner first(video_registry(), "video.source", "replay");
  ASSERT_TRUE(first.set("uri", file.uri()).ok());
  ASSERT_TRUE(first.start().ok());
  while (first.output("frames").size() < 12) {
    Status s = first.pull();
    ASSERT_FALSE(s.is_error()) << s.message();
    ASSERT_FALSE(s.is_end_of_stream());
  }
  std::string state;
  ASSERT_TRUE(first.stage().snapshot(state));
  first.stop();
  StageRunner second(video_registry(), "video.source", "replay");
  video_test::StopGuard stop_second(second);
  ASSERT_TRUE(second.set("uri", file.uri()).ok());
  ASSERT_TRUE(second.start().ok());
  ASSERT_TRUE(second.stage().restore(state).ok()) << state;
  Status s = pull_until(second, [] { return false; }, std::chrono::seconds(60));
  EXPECT_TRUE(s.is_end_of_stream()) << s.message();
  const auto frames = second.output("frames");
  ASSERT_EQ(frames.size(), static_cast<std::size_t>(kFrames - 12));
  for (std::size_t i = 0; i < frames.size(); ++i) EXPECT_EQ(frames[i].header().seq, 12 + i);
  // A snapshot of another kind of source is refused.
  EXPECT_FALSE(second.stage().restore("synthetic 3 3").ok());
}

TEST(VideoRoundTrip, H264Mp4AndMatroskaKeepCountSizeFormatAndOrder) {
  // The codec's id in each container proves the file holds H.264.
  struct Case {
    const char* name;
    const char* codec_id;
    const char* demuxer;
  };
  const Case cases[] = {{"round_trip_h264.mp4", "avc1", "qtdemux"},
                        {"round_trip_h264.mkv", "V_MPEG4/ISO/AVC", "matroskademux"}};
  for (const auto& [name, codec_id, demuxer] : cases) {
    TempFile file(name);
    write_video(file.uri(), kFrames, "h264");
    ASSERT_TRUE(std::filesystem::exists(file.path())) << name;
    ASSERT_GT(std::filesystem::file_size(file.path()), 1000U) << name;
    EXPECT_TRUE(file_contains(file.path(), codec_id)) << name << " holds no " << codec_id;
    // Browsers, QuickTime and hardware decoders play 4:2:0 in main or high,
    // not the High 4:4:4 profile x264enc picks for BGR input.
    const H264Stream stream = h264_stream_of(file.path(), demuxer);
    EXPECT_TRUE(stream.error.empty()) << name << ": " << stream.error;
    EXPECT_EQ(stream.chroma_format, "4:2:0") << name;
    EXPECT_TRUE(stream.profile == "high" || stream.profile == "main") << name << " has profile " << stream.profile;
    expect_written_frames(read_video(file.uri()), name);
  }
}

// The progress line's percentage and eta come from the `expected` counter.
TEST(VideoSource, TellsItsLengthOnlyWhenKnown) {
  TempFile avi("length.avi");
  write_video(avi.uri(), kFrames);
  TempFile mp4("length.mp4");
  write_video(mp4.uri(), kFrames, "h264");
  for (const std::int64_t count : {std::int64_t{0}, std::int64_t{10}, std::int64_t{100}}) {
    const std::string uri = count == 100 ? mp4.uri() : avi.uri();
    StageRunner source(video_registry(), "video.source", "replay");
    video_test::StopGuard stop_source(source);
    ASSERT_TRUE(source.set("uri", uri).ok());
    ASSERT_TRUE(source.set("count", count).ok());
    ASSERT_TRUE(source.start().ok());
    bool all_ok = true;
    const Status s = pull_until(
        source, [] { return false; }, std::chrono::seconds(60), &all_ok);
    EXPECT_TRUE(all_ok) << s.message();
    EXPECT_TRUE(s.is_end_of_stream()) << s.message();
    // The file's length, or the count when that is shorter.
    const std::int64_t frames = count > 0 ? std::min<std::int64_t>(count, kFrames) : kFrames;
    EXPECT_EQ(source.counter_value("expected"), frames) << uri << ", count " << count;
    EXPECT_EQ(source.output("frames").size(), static_cast<std::size_t>(frames)) << uri << ", count " << count;
    source.stop();
  }
  // A live camera knows only its count.
  for (const std::int64_t count : {std::int64_t{0}, std::int64_t{5}}) {
    StageRunner camera(video_registry(), "video.source", "camera");
    video_test::StopGuard stop_camera(camera);
    ASSERT_TRUE(camera.set("uri", std::string("test://smpte")).ok());
    ASSERT_TRUE(camera.set("count", count).ok());
    ASSERT_TRUE(camera.start().ok());
    EXPECT_EQ(camera.counter_value("expected"), count);
    camera.stop();
  }
}

TEST(VideoSink, AutoCodecIsH264InMkvAndMp4AndMjpegInAvi) {
  const std::pair<const char*, const char*> cases[] = {
      {"auto.mkv", "V_MPEG4/ISO/AVC"}, {"auto.mp4", "avc1"}, {"auto.avi", "MJPG"}};
  for (const auto& [name, codec_id] : cases) {
    TempFile file(name);
    write_video(file.uri(), 3, "auto");
    EXPECT_TRUE(file_contains(file.path(), codec_id)) << name << " holds no " << codec_id;
    EXPECT_EQ(read_video(file.uri()).size(), 3U) << name;
  }
}

TEST(VideoRoundTrip, MatroskaAndMp4Containers) {
  for (const char* name : {"round_trip.mkv", "round_trip.mp4"}) {
    TempFile file(name);
    write_video(file.uri(), 10);
    const std::vector<Envelope> frames = read_video(file.uri());
    ASSERT_EQ(frames.size(), 10U) << name;
    for (std::size_t i = 0; i < frames.size(); ++i) {
      EXPECT_EQ(frames[i].as<schema::Frame>()->frame_index(), i) << name;
    }
  }
}

TEST(VideoRoundTrip, SourceConvertsFormatAndSize) {
  TempFile file("formats.avi");
  write_video(file.uri(), 5);

  const std::vector<Envelope> gray = read_video(file.uri(), "GRAY8", 160, 120);
  ASSERT_EQ(gray.size(), 5U);
  const auto* g = gray[0].as<schema::Frame>();
  EXPECT_EQ(g->format(), schema::PixelFormat::GRAY8);
  EXPECT_EQ(g->width(), 160U);
  EXPECT_EQ(g->height(), 120U);
  EXPECT_GE(g->pixels()->size(), static_cast<std::size_t>(g->stride()) * 120);

  const std::vector<Envelope> nv12 = read_video(file.uri(), "NV12");
  ASSERT_EQ(nv12.size(), 5U);
  const auto* n = nv12[0].as<schema::Frame>();
  EXPECT_EQ(n->format(), schema::PixelFormat::NV12);
  EXPECT_EQ(n->width(), static_cast<std::uint32_t>(kWidth));
  EXPECT_EQ(n->pixels()->size(), static_cast<std::size_t>(n->stride()) * kHeight * 3 / 2);
}

TEST(VideoSink, DrawsTheAnnotationsOfTheSameFrame) {
  TempFile file("annotated.avi");
  {
    StageRunner sink(video_registry(), "video.sink", "record");
    video_test::StopGuard stop_sink(sink);
    ASSERT_TRUE(sink.set("uri", file.uri()).ok());
    ASSERT_TRUE(sink.set("codec", std::string("mjpeg")).ok());
    ASSERT_TRUE(sink.start().ok());
    // Annotations arrive after their frame, as they do behind a detector.
    auto frame = [&](std::uint64_t i) { ASSERT_TRUE(sink.feed("frames", make_frame(i, kWidth, kHeight)).ok()); };
    auto results = [&](std::uint64_t i) {
      ASSERT_TRUE(sink.feed("annotations", make_results(i, "cam", 100, 60, 120, 100)).ok());
    };
    frame(0);    // written at once: no annotations seen yet
    results(0);  // too late for frame 0
    frame(1);
    frame(2);    // both wait for theirs
    results(1);  // frame 1 goes, drawn
    results(2);  // frame 2 goes, drawn
    frame(3);
    frame(4);
    results(4);  // frame 3 is superseded and goes bare; frame 4 goes, drawn
    frame(5);    // never gets its annotations; flushed at stop
    sink.stop();
    EXPECT_EQ(sink.counter_value("written"), 6);
    EXPECT_EQ(sink.counter_value("annotations"), 4);
    EXPECT_EQ(sink.counter_value("annotated"), 3);
  }
  const std::vector<Envelope> frames = read_video(file.uri());
  ASSERT_EQ(frames.size(), 6U);
  // The box edge at x = 100 differs from the flat background on annotated
  // frames only.
  auto edge_differs = [](const schema::Frame& f) {
    const cv::Mat view = video::pixels_of(f);
    const cv::Scalar edge = cv::mean(view(cv::Rect(98, 80, 6, 60)));
    const cv::Scalar flat = cv::mean(view(cv::Rect(10, 180, 60, 40)));
    return cv::norm(edge - flat) > 25.0;
  };
  const bool drawn[] = {false, true, true, false, true, false};
  for (std::size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(edge_differs(*frames[i].as<schema::Frame>()), drawn[i]) << "frame " << i;
  }
}

TEST(VideoSink, NullUriCountsAndDiscards) {
  StageRunner sink(video_registry(), "video.sink", "drop");
  video_test::StopGuard stop_sink(sink);
  ASSERT_TRUE(sink.set("uri", std::string("null://")).ok());
  ASSERT_TRUE(sink.start().ok());
  for (std::uint64_t i = 0; i < 4; ++i) ASSERT_TRUE(sink.feed("frames", make_frame(i, 64, 48)).ok());
  sink.stop();
  EXPECT_EQ(sink.counter_value("frames"), 4);
  EXPECT_EQ(sink.counter_value("discarded"), 4);
  EXPECT_EQ(sink.counter_value("written"), 0);
}

// A missing x264enc is reported by choose_codec (VideoUri.SinkUrisAndCodecs).
TEST(VideoSink, RejectsBadUris) {
  {
    StageRunner sink(video_registry(), "video.sink");
    video_test::StopGuard stop_sink(sink);
    ASSERT_TRUE(sink.set("uri", std::string("file:///tmp/out.webm")).ok());
    EXPECT_FALSE(sink.start().ok());
  }
  {
    StageRunner sink(video_registry(), "video.sink");
    video_test::StopGuard stop_sink(sink);
    ASSERT_TRUE(sink.set("uri", std::string("file:///no/such/dir/out.avi")).ok());
    EXPECT_FALSE(sink.start().ok());
  }
}

}  // namespace
}  // namespace swarmflow
