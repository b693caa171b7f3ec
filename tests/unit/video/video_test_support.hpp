#pragma once
// Helpers of the video tests: frames made in memory, temporary files, and
// bounded pulling of sources that defer.

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>

#include <swarmflow/envelope.hpp>
#include <swarmflow/registry.hpp>
#include <swarmflow/schema/frame_generated.h>
#include <swarmflow/schema/vision_generated.h>

#include "support/stage_runner.hpp"
#include "video/video.hpp"

namespace swarmflow::video_test {

/// A registry with the video pack.
inline const Registry& video_registry() {
  static const Registry registry = [] {
    Registry r;
    register_video_stages(r);
    return r;
  }();
  return registry;
}

/// The colour frame `index` of a test sequence is filled with; it encodes the
/// index so the order survives a lossy codec.
inline std::uint8_t level_of(std::uint64_t index) { return static_cast<std::uint8_t>(16 + (index * 7) % 224); }

/// A BGR frame of `width` x `height` filled with (level, 128, 255 - level).
inline Envelope make_frame(std::uint64_t index, int width, int height, const std::string& camera = "cam") {
  flatbuffers::FlatBufferBuilder fbb(static_cast<std::size_t>(width * height * 3) + 256);
  const auto camera_id = fbb.CreateString(camera);
  std::uint8_t* pixels = nullptr;
  const std::size_t stride = static_cast<std::size_t>(width) * 3;
  const auto data = fbb.CreateUninitializedVector(stride * static_cast<std::size_t>(height), &pixels);
  const std::uint8_t level = level_of(index);
  for (int i = 0; i < width * height; ++i) {
    pixels[i * 3 + 0] = level;
    pixels[i * 3 + 1] = 128;
    pixels[i * 3 + 2] = static_cast<std::uint8_t>(255 - level);
  }
  fbb.Finish(schema::CreateFrame(fbb, schema::PixelFormat::BGR, static_cast<std::uint32_t>(width),
                                 static_cast<std::uint32_t>(height), static_cast<std::uint32_t>(stride),
                                 steady_now_ns(), camera_id, index, data),
             schema::FrameIdentifier());
  EnvelopeHeader h;
  h.seq = index;
  h.capture_ns = steady_now_ns();
  return Envelope(h, Payload::from_builder(fbb));
}

/// Vision results for frame `index` of `camera` with one defect box.
inline Envelope make_results(std::uint64_t index, const std::string& camera, float x, float y, float w, float h) {
  flatbuffers::FlatBufferBuilder fbb;
  const schema::Box box(x, y, w, h);
  const auto defect = schema::CreateDefect(fbb, fbb.CreateString("scratch"), &box, 0.9F);
  const auto defects = fbb.CreateVector(&defect, 1);
  const auto measurement =
      schema::CreateMeasurement(fbb, fbb.CreateString("width"), 100.2, fbb.CreateString("mm"), 100.0, 0.5, true);
  const auto measurements = fbb.CreateVector(&measurement, 1);
  fbb.Finish(schema::CreateVisionResults(fbb, fbb.CreateString(camera), index, 42, defects, measurements),
             schema::VisionResultsIdentifier());
  EnvelopeHeader header;
  header.seq = index;
  return Envelope(header, Payload::from_builder(fbb));
}

/// A path in the temporary directory, unique to this process; removed on destruction.
class TempFile {
 public:
  explicit TempFile(const std::string& name)
      : path_(std::filesystem::temp_directory_path() / ("swarmflow_video_" + std::to_string(::getpid()) + "_" + name)) {
    std::filesystem::remove(path_);
  }
  ~TempFile() {
    std::error_code ec;
    std::filesystem::remove(path_, ec);
  }
  std::string path() const { return path_.string(); }
  std::string uri() const { return "file://" + path_.string(); }

 private:
  std::filesystem::path path_;
};

/// Stops the runner's stage when a test leaves early (a failed ASSERT), so
/// no capture thread outlives the runner's counters. stop() may run twice.
class StopGuard {
 public:
  explicit StopGuard(testing::StageRunner& runner) : runner_(runner) {}
  ~StopGuard() { runner_.stop(); }
  StopGuard(const StopGuard&) = delete;
  StopGuard& operator=(const StopGuard&) = delete;

 private:
  testing::StageRunner& runner_;
};

/// Pulls `runner` (a source) until `done()` holds, the source ends or fails,
/// or `limit` passes; sleeps until the time the source asked to be called
/// again. Returns the last status; `*all_ok` is cleared on any error.
template <class Done>
Status pull_until(testing::StageRunner& runner, Done done, std::chrono::seconds limit, bool* all_ok = nullptr) {
  const auto until = std::chrono::steady_clock::now() + limit;
  Status s;
  while (!done() && std::chrono::steady_clock::now() < until) {
    s = runner.pull();
    if (s.is_error() && all_ok != nullptr) *all_ok = false;
    if (!s.ok()) return s;
    const std::int64_t wake = runner.deferred_until();
    if (wake > 0) {
      const std::int64_t wait = std::min<std::int64_t>(wake - steady_now_ns(), 50'000'000);
      if (wait > 0) std::this_thread::sleep_for(std::chrono::nanoseconds(wait));
    }
  }
  return s;
}

}  // namespace swarmflow::video_test
