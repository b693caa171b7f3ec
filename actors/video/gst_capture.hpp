#pragma once
// A GStreamer capture pipeline on its own thread, ending in an appsink whose
// frames are written once into finished Frame payloads and handed to the
// stage through a small FrameQueue. Live sources are watched: after an error,
// an unexpected end of stream or a stall the pipeline is rebuilt with
// exponential backoff. GStreamer types stay in the .cpp.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include <swarmflow/status.hpp>

#include "video/frame_queue.hpp"
#include "video/video_uri.hpp"

namespace swarmflow::video {

/// What a capture reads and how it reports.
struct CaptureConfig {
  SourceUri uri;
  CaptureFormat format;
  std::string camera_id;                           ///< written into every Frame
  std::uint64_t stream = 0;                        ///< envelope header stream id
  std::uint64_t first_index = 0;                   ///< frame_index and seq of the first frame
  std::size_t queue_frames = 4;                    ///< capacity of the hand-off queue (and of the appsink's)
  std::int64_t reconnect_ns = 500'000'000;         ///< first backoff after a failure
  std::int64_t reconnect_max_ns = 10'000'000'000;  ///< backoff cap
  std::int64_t max_reconnects = 0;                 ///< consecutive attempts without a frame; 0 = forever
  std::int64_t stall_ns = 0;                       ///< a live source without a frame this long is rebuilt; 0 = never
  std::string log_name;                            ///< prefix of log lines (stage id and replica)
  std::int64_t frame_limit = 0;                    ///< frames the stage will take (its count); 0 = all
};

/// Counters of the replica, updated from the capture thread. Each must stay
/// valid as long as the capture (StageContext counters do).
struct CaptureCounters {
  std::atomic<std::int64_t>* reconnects = nullptr;
  std::atomic<std::int64_t>* gap_ms = nullptr;
  std::atomic<std::int64_t>* dropped_frames = nullptr;
  /// A file's frame count at the output rate (at most `frame_limit`), set at
  /// its first frame when its duration and frame rate are known; else left.
  std::atomic<std::int64_t>* expected = nullptr;
};

/// One capture pipeline and its thread.
class GstCapture {
 public:
  GstCapture(CaptureConfig config, CaptureCounters counters);
  /// Stops the thread and releases the pipeline.
  ~GstCapture();
  GstCapture(const GstCapture&) = delete;
  GstCapture& operator=(const GstCapture&) = delete;

  /// Builds the pipeline (a missing element or a bad property fails here) and
  /// starts the capture thread.
  Status start();
  /// Takes the next frame if one is ready; never blocks. `ended` after the
  /// last frame of a file, `failed` (with `*error`) when a file fails or a live
  /// source gives up.
  FrameQueue::Pop try_pop(CapturedFrame* frame, std::string* error);
  /// Stops the thread and releases the pipeline; waits for both.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace swarmflow::video
