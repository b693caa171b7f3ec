// video.source on test patterns and the synthetic camera, its URI handling,
// the watchdog's backoff and the capture hand-off queue.

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "video/frame_queue.hpp"
#include "video/reconnect_watchdog.hpp"
#include "video/synthetic_parts.hpp"
#include "video/video_uri.hpp"
#include "video_test_support.hpp"

namespace swarmflow {
namespace {

using testing::StageRunner;
using video_test::pull_until;
using video_test::video_registry;

constexpr std::int64_t kMs = 1'000'000;

// -- URIs and pipeline descriptions -----------------------------------------------

TEST(VideoUri, SourceSchemes) {
  video::SourceUri u;
  std::string error;
  ASSERT_TRUE(video::parse_source_uri("file:///data/a.avi", &u, &error));
  EXPECT_EQ(u.kind, video::SourceKind::file);
  EXPECT_EQ(u.location, "/data/a.avi");
  ASSERT_TRUE(video::parse_source_uri("file://relative/b.mkv", &u, &error));
  EXPECT_TRUE(std::filesystem::path(u.location).is_absolute());
  ASSERT_TRUE(video::parse_source_uri("rtsp://10.0.0.7/stream1", &u, &error));
  EXPECT_EQ(u.kind, video::SourceKind::rtsp);
  ASSERT_TRUE(video::parse_source_uri("https://cam.local/mjpeg", &u, &error));
  EXPECT_EQ(u.kind, video::SourceKind::http);
  ASSERT_TRUE(video::parse_source_uri("v4l2:///dev/video2", &u, &error));
  EXPECT_EQ(u.kind, video::SourceKind::v4l2);
  EXPECT_EQ(u.location, "/dev/video2");
  ASSERT_TRUE(video::parse_source_uri("test://ball", &u, &error));
  EXPECT_EQ(u.kind, video::SourceKind::test);
  EXPECT_EQ(u.location, "ball");
  ASSERT_TRUE(video::parse_source_uri("synthetic://parts?seed=3", &u, &error));
  EXPECT_EQ(u.kind, video::SourceKind::synthetic);
  EXPECT_FALSE(video::parse_source_uri("ftp://x/y.avi", &u, &error));
  EXPECT_NE(error.find("unsupported"), std::string::npos);

  EXPECT_EQ(video::redact_credentials("rtsp://admin:secret@10.0.0.7:554/s1"), "rtsp://***@10.0.0.7:554/s1");
  EXPECT_EQ(video::redact_credentials("http://cam.local/a@b"), "http://cam.local/a@b");
  EXPECT_TRUE(video::is_live(video::SourceKind::rtsp));
  EXPECT_TRUE(video::is_live(video::SourceKind::test));
  EXPECT_FALSE(video::is_live(video::SourceKind::file));
}

TEST(VideoUri, CapturePipelines) {
  video::SourceUri file{video::SourceKind::file, "file:///a.avi", "/a.avi"};
  video::CaptureFormat format;
  format.format = "GRAY8";
  format.width = 640;
  const std::string d = video::capture_pipeline(file, format, 4);
  EXPECT_NE(d.find("uridecodebin name=src"), std::string::npos) << d;
  EXPECT_NE(d.find("format=GRAY8,width=640"), std::string::npos) << d;
  EXPECT_EQ(d.find("height="), std::string::npos) << d;
  EXPECT_EQ(d.find("videorate"), std::string::npos) << d;
  EXPECT_NE(d.find("drop=false"), std::string::npos) << d;

  video::SourceUri test{video::SourceKind::test, "test://ball", "ball"};
  format.fps = 29.97;
  const std::string t = video::capture_pipeline(test, format, 2);
  EXPECT_NE(t.find("videotestsrc name=src is-live=true"), std::string::npos) << t;
  EXPECT_NE(t.find("framerate=2997/100"), std::string::npos) << t;
  EXPECT_NE(t.find("drop=true"), std::string::npos) << t;
  EXPECT_EQ(video::fps_fraction(30), "30/1");
}

TEST(VideoUri, SinkUrisAndCodecs) {
  video::SinkUri u;
  std::string error;
  ASSERT_TRUE(video::parse_sink_uri("null://", &u, &error));
  EXPECT_TRUE(u.discard);
  ASSERT_TRUE(video::parse_sink_uri("file:///tmp/x.MKV", &u, &error));
  EXPECT_EQ(u.container, video::Container::matroska);
  EXPECT_FALSE(video::parse_sink_uri("file:///tmp/x.webm", &u, &error));
  EXPECT_FALSE(video::parse_sink_uri("rtsp://x", &u, &error));

  video::Codec c = video::Codec::h264;
  ASSERT_TRUE(video::choose_codec("auto", video::Container::mp4, false, &c, &error));
  EXPECT_EQ(c, video::Codec::mjpeg);
  ASSERT_TRUE(video::choose_codec("auto", video::Container::mp4, true, &c, &error));
  EXPECT_EQ(c, video::Codec::h264);
  ASSERT_TRUE(video::choose_codec("auto", video::Container::avi, true, &c, &error));
  EXPECT_EQ(c, video::Codec::mjpeg);
  EXPECT_FALSE(video::choose_codec("h264", video::Container::matroska, false, &c, &error));
  EXPECT_NE(error.find("x264enc"), std::string::npos);

  const std::string d = video::record_pipeline(video::Container::avi, video::Codec::mjpeg, 80);
  EXPECT_NE(d.find("jpegenc quality=80 ! avimux ! filesink name=file"), std::string::npos) << d;
  // H.264 is encoded 4:2:0 in the high profile, which every player decodes.
  const std::string h = video::record_pipeline(video::Container::mp4, video::Codec::h264, 80);
  EXPECT_NE(h.find("videoconvert ! video/x-raw,format=I420 ! x264enc "), std::string::npos) << h;
  EXPECT_NE(h.find(" ! video/x-h264,profile=high ! mp4mux"), std::string::npos) << h;
}

// -- the watchdog's decisions, with explicit time -----------------------------------

TEST(VideoWatchdog, BackoffDoublesUpToTheCapAndResetsOnAFrame) {
  video::ReconnectWatchdog w(100 * kMs, 500 * kMs, 0);
  EXPECT_EQ(*w.on_failure(0), 100 * kMs);
  EXPECT_EQ(*w.on_failure(1000 * kMs), 1200 * kMs);
  EXPECT_EQ(*w.on_failure(2000 * kMs), 2400 * kMs);
  EXPECT_EQ(*w.on_failure(3000 * kMs), 3500 * kMs);  // capped
  EXPECT_TRUE(w.in_outage());
  EXPECT_EQ(w.on_frame(4000 * kMs), 4000 * kMs);  // the outage began at the first failure
  EXPECT_FALSE(w.in_outage());
  EXPECT_EQ(w.on_frame(4100 * kMs), 0);
  EXPECT_EQ(*w.on_failure(5000 * kMs), 5100 * kMs);  // back to the first step
}

TEST(VideoWatchdog, GivesUpAfterMaxReconnectsWithoutAFrame) {
  video::ReconnectWatchdog w(10 * kMs, 1000 * kMs, 2);
  EXPECT_TRUE(w.on_failure(0).has_value());
  EXPECT_TRUE(w.on_failure(1).has_value());
  EXPECT_FALSE(w.on_failure(2).has_value());
  video::ReconnectWatchdog again(10 * kMs, 1000 * kMs, 2);
  EXPECT_TRUE(again.on_failure(0).has_value());
  EXPECT_TRUE(again.on_failure(1).has_value());
  again.on_frame(2);
  EXPECT_TRUE(again.on_failure(3).has_value());
}

// -- the hand-off queue -------------------------------------------------------------

video::CapturedFrame numbered(std::uint64_t seq) {
  video::CapturedFrame f;
  f.header.seq = seq;
  return f;
}

TEST(VideoFrameQueue, LiveDropsTheOldestAndEndsAfterTheLastFrame) {
  video::FrameQueue q(2);
  EXPECT_EQ(q.push_drop_oldest(numbered(0)), 0U);
  EXPECT_EQ(q.push_drop_oldest(numbered(1)), 0U);
  EXPECT_EQ(q.push_drop_oldest(numbered(2)), 1U);
  q.close(video::FrameQueue::Outcome::ended);
  video::CapturedFrame f;
  ASSERT_EQ(q.try_pop(&f), video::FrameQueue::Pop::frame);
  EXPECT_EQ(f.header.seq, 1U);
  ASSERT_EQ(q.try_pop(&f), video::FrameQueue::Pop::frame);
  EXPECT_EQ(f.header.seq, 2U);
  EXPECT_EQ(q.try_pop(&f), video::FrameQueue::Pop::ended);
}

TEST(VideoFrameQueue, FileWaitsForRoomAndCloseWakesIt) {
  video::FrameQueue q(1);
  ASSERT_TRUE(q.push_wait(numbered(0)));
  std::thread producer([&] { EXPECT_FALSE(q.push_wait(numbered(1))); });
  q.close(video::FrameQueue::Outcome::stopped);
  producer.join();
  std::string error;
  video::FrameQueue failed(1);
  failed.close(video::FrameQueue::Outcome::failed, "boom");
  video::CapturedFrame f;
  EXPECT_EQ(failed.try_pop(&f, &error), video::FrameQueue::Pop::failed);
  EXPECT_EQ(error, "boom");
}

// -- test:// ---------------------------------------------------------------------

TEST(VideoSource, TestPatternIsLiveAndCounted) {
  StageRunner source(video_registry(), "video.source", "pattern");
  video_test::StopGuard stop_source(source);
  ASSERT_TRUE(source.set("uri", std::string("test://ball")).ok());
  ASSERT_TRUE(source.set("width", std::int64_t{160}).ok());
  ASSERT_TRUE(source.set("height", std::int64_t{120}).ok());
  ASSERT_TRUE(source.set("fps", 60.0).ok());
  ASSERT_TRUE(source.set("count", std::int64_t{5}).ok());
  Status s = source.start();
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_TRUE(source.live());
  bool all_ok = true;
  s = pull_until(
      source, [] { return false; }, std::chrono::seconds(30), &all_ok);
  EXPECT_TRUE(all_ok) << s.message();
  EXPECT_TRUE(s.is_end_of_stream());
  source.stop();
  const auto& frames = source.output("frames");
  ASSERT_EQ(frames.size(), 5U);
  std::uint64_t previous = 0;
  for (std::size_t i = 0; i < frames.size(); ++i) {
    const auto* f = frames[i].as<schema::Frame>();
    EXPECT_EQ(f->width(), 160U);
    EXPECT_EQ(f->height(), 120U);
    EXPECT_EQ(f->format(), schema::PixelFormat::BGR);
    EXPECT_EQ(frames[i].header().seq, f->frame_index());
    if (i > 0) {
      EXPECT_GT(f->frame_index(), previous);  // drops leave gaps, never reorder
    }
    previous = f->frame_index();
  }
  EXPECT_EQ(source.counter_value("frames"), 5);
}

TEST(VideoSource, LiveSourceDropsTheOldestFramesWhenNotPulled) {
  StageRunner source(video_registry(), "video.source", "pattern");
  video_test::StopGuard stop_source(source);
  ASSERT_TRUE(source.set("uri", std::string("test://snow")).ok());
  ASSERT_TRUE(source.set("width", std::int64_t{64}).ok());
  ASSERT_TRUE(source.set("height", std::int64_t{48}).ok());
  ASSERT_TRUE(source.set("fps", 100.0).ok());
  ASSERT_TRUE(source.set("queue_frames", std::int64_t{1}).ok());
  ASSERT_TRUE(source.start().ok());
  pull_until(
      source, [&] { return !source.output("frames").empty(); }, std::chrono::seconds(30));
  ASSERT_EQ(source.output("frames").size(), 1U);
  // The camera keeps producing while nobody pulls; the source never blocks.
  // Drops may already have happened before the first pull: wait for one after it.
  const auto dropped_before = source.counter_value("dropped_frames");
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (source.counter_value("dropped_frames") == dropped_before && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_GT(source.counter_value("dropped_frames"), dropped_before);
  pull_until(
      source, [&] { return source.output("frames").size() >= 2; }, std::chrono::seconds(30));
  ASSERT_GE(source.output("frames").size(), 2U);
  const auto* first = source.output("frames")[0].as<schema::Frame>();
  const auto* second = source.output("frames")[1].as<schema::Frame>();
  EXPECT_GT(second->frame_index(), first->frame_index() + 1);  // the drops show as a gap
}

TEST(VideoSource, StartFailsWithAClearMessage) {
  struct Case {
    std::string uri;
    std::string format;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"ftp://host/x.avi", "BGR", "unsupported"},
      {"test://no_such_pattern", "BGR", "smpte"},
      {"file:///no/such/file.avi", "BGR", "no such video file"},
      {"synthetic://parts?seed=1", "GRAY8", "BGR only"},
  };
  for (const Case& c : cases) {
    StageRunner source(video_registry(), "video.source");
    video_test::StopGuard stop_source(source);
    ASSERT_TRUE(source.set("uri", c.uri).ok());
    ASSERT_TRUE(source.set("format", c.format).ok());
    Status s = source.start();
    EXPECT_FALSE(s.ok()) << c.uri;
    EXPECT_NE(s.message().find(c.says), std::string::npos) << c.uri << ": " << s.message();
    source.stop();
  }
}

// -- synthetic:// ------------------------------------------------------------------

TEST(VideoSource, SyntheticFramesCarryGroundTruthAndPartId) {
  StageRunner source(video_registry(), "video.source", "cam");
  video_test::StopGuard stop_source(source);
  ASSERT_TRUE(source.set("uri", std::string("synthetic://parts?seed=7&station=1&camera=1")).ok());
  ASSERT_TRUE(source.set("width", std::int64_t{640}).ok());
  ASSERT_TRUE(source.set("height", std::int64_t{360}).ok());
  ASSERT_TRUE(source.set("count", std::int64_t{3}).ok());
  source.set_replica(2);
  Status s = source.start();
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_FALSE(source.live());  // fps 0: as fast as flow control allows
  s = source.pull_all(100);
  EXPECT_TRUE(s.is_end_of_stream()) << s.message();
  source.stop();

  const auto& frames = source.output("frames");
  ASSERT_EQ(frames.size(), 3U);
  for (std::size_t i = 0; i < frames.size(); ++i) {
    const auto* f = frames[i].as<schema::Frame>();
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(f->width(), 640U);
    EXPECT_EQ(f->height(), 360U);
    EXPECT_EQ(f->stride(), 640U * 3);
    EXPECT_EQ(f->pixels()->size(), 640U * 3 * 360);
    EXPECT_EQ(f->frame_index(), i);
    ASSERT_NE(f->ground_truth(), nullptr);
    const auto truth = video::parse_truth(f->ground_truth()->string_view());
    ASSERT_TRUE(truth.has_value()) << f->ground_truth()->str();
    // Replica 2 of a source based at station 1 renders station 3.
    EXPECT_EQ(truth->station, 3);
    EXPECT_EQ(truth->camera, 1);
    EXPECT_EQ(truth->frame_index, i);
    EXPECT_NE(truth->part_id, 0U);
    const EnvelopeHeader& h = frames[i].header();
    EXPECT_EQ(h.part_id, truth->part_id);
    EXPECT_EQ(h.stream, 3U * 2 + 1);
    EXPECT_EQ(h.seq, i);
    EXPECT_GT(h.capture_ns, 0);
  }
}

TEST(VideoSource, PacedSyntheticDefersUntilTheNextFrameIsDue) {
  StageRunner source(video_registry(), "video.source", "cam");
  video_test::StopGuard stop_source(source);
  ASSERT_TRUE(source.set("uri", std::string("synthetic://parts?seed=7")).ok());
  ASSERT_TRUE(source.set("width", std::int64_t{320}).ok());
  ASSERT_TRUE(source.set("height", std::int64_t{240}).ok());
  ASSERT_TRUE(source.set("fps", 10.0).ok());
  source.set_now_ns(1'000'000'000);
  ASSERT_TRUE(source.start().ok());
  EXPECT_TRUE(source.live());
  ASSERT_TRUE(source.pull().ok());
  EXPECT_EQ(source.output("frames").size(), 1U);
  ASSERT_TRUE(source.pull().ok());  // not due yet: no output, a wake-up time
  EXPECT_EQ(source.output("frames").size(), 1U);
  EXPECT_EQ(source.deferred_until(), 1'100'000'000);
  source.set_now_ns(1'100'000'000);
  ASSERT_TRUE(source.pull().ok());
  EXPECT_EQ(source.output("frames").size(), 2U);
  source.stop();
}

TEST(VideoSource, SameSeedSameFrames) {
  std::vector<std::uint64_t> parts[2];
  for (auto& run : parts) {
    StageRunner source(video_registry(), "video.source", "cam");
    video_test::StopGuard stop_source(source);
    ASSERT_TRUE(source.set("uri", std::string("synthetic://parts?seed=11")).ok());
    ASSERT_TRUE(source.set("width", std::int64_t{320}).ok());
    ASSERT_TRUE(source.set("height", std::int64_t{240}).ok());
    ASSERT_TRUE(source.set("count", std::int64_t{4}).ok());
    ASSERT_TRUE(source.start().ok());
    EXPECT_TRUE(source.pull_all(100).is_end_of_stream());
    source.stop();
    for (const auto& e : source.output("frames")) run.push_back(e.header().part_id);
  }
  EXPECT_EQ(parts[0], parts[1]);
  EXPECT_EQ(parts[0].size(), 4U);
}

}  // namespace
}  // namespace swarmflow
