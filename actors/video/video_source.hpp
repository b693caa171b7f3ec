#pragma once
/// \file video_source.hpp
/// `video.source`: frames from a file, a network or USB camera, a GStreamer
/// test pattern or the synthetic inspection camera. docs/video.md has the
/// details (threading, the watchdog, the one-copy rule).
///
/// Output `frames` (swarmflow.schema.Frame).
///
/// Parameters:
///   uri              string   file://PATH | rtsp://... | http(s)://... | v4l2:///dev/videoN |
///                             test://PATTERN | synthetic://parts?key=value&... |
///                             synthetic://checkerboard?key=value&... (a calibration target) |
///                             synthetic://ultrasound?key=value&... (a B-mode probe, docs/ultrasound.md)
///   width, height    integer  output size, 0 = as the source gives
///   fps              number   output rate, 0 = as the source gives (synthetic: 0 = as fast as
///                             flow control allows; > 0 = paced and live)
///   format           string   BGR | GRAY8 | NV12 (synthetic: BGR only; synthetic://ultrasound:
///                             BGR or GRAY8, drawn straight into the payload either way), default BGR
///   count            integer  frames to deliver per replica, 0 = until the source ends (files) or
///                             forever (live sources)
///   camera_id        string   Frame.camera_id; empty = "<stage id>-<replica>"; with several
///                             replicas "-<replica>" is appended to a given id
///   queue_frames     integer  frames the capture thread may hold for process(), default 4
///   reconnect_ms     integer  first wait before a live source is rebuilt after a failure; doubles
///                             on each further failure without a frame
///   reconnect_max_ms integer  cap of that wait
///   max_reconnects   integer  consecutive reconnects without a frame before the source fails,
///                             0 = forever
///   stall_ms         integer  a live source without a frame this long is rebuilt, 0 = never
///
/// Envelope headers: seq = Frame.frame_index; capture_ns = steady clock at
/// capture; stream = a stable hash of camera_id (synthetic: station * 2 +
/// camera; ultrasound: the replica); part_id = the part in view (synthetic
/// parts only, else 0).
///
/// Replicas: replica r of a synthetic source renders station `station + r`
/// (the URI's station is the base), so `replicas: 4` gives four stations.
/// Replica r of a synthetic ultrasound probe scans patient `seed + r`.
/// Replicas of other sources each open the same URI.
///
/// Counters: frames, dropped_frames, reconnects, gap_ms, and expected (the
/// frames it will deliver, when known: `count`, or a file's length at the
/// output rate once its first frame is read; 0 = unknown).
///
/// ```yaml
/// stages:
///   - id: camera
///     type: video.source
///     replicas: 4
///     params: {uri: "synthetic://parts?seed=7&camera=0", width: 1280, height: 720, fps: 15}
///   - id: door
///     type: video.source
///     params: {uri: "rtsp://10.0.0.7/stream1", fps: 10, reconnect_ms: 500, max_reconnects: 0}
/// ```

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include <swarmflow/schema/frame_generated.h>
#include <swarmflow/stage.hpp>

#include "video/gst_capture.hpp"
#include "video/synthetic_parts.hpp"
#include "video/synthetic_ultrasound.hpp"
#include "video/video_uri.hpp"

namespace swarmflow::video {

class VideoSource final : public Stage {
 public:
  void setup(StageSpec& s) override;
  Status start(StageContext& ctx) override;
  Status process(Inputs& in, Outputs& out, StageContext& ctx) override;
  void stop(StageContext& ctx) override;
  /// The position of a synthetic camera (its next frame) or a file (the
  /// frames it sent): a failover restarts it elsewhere from there. A live
  /// source (a camera, a stream) has none.
  bool snapshot(std::string& out) const override;
  Status restore(const std::string& state) override;

 private:
  Status start_synthetic(StageContext& ctx);
  Status start_capture(StageContext& ctx);
  Status produce_synthetic(Outputs& out, StageContext& ctx);
  Status produce_captured(Outputs& out, StageContext& ctx);

  OutputPort<schema::Frame> frames_;
  std::string uri_text_;
  std::int64_t width_ = 0;
  std::int64_t height_ = 0;
  double fps_ = 0;
  std::string format_;
  std::int64_t count_ = 0;
  std::string camera_id_param_;
  std::int64_t queue_frames_ = 4;
  std::int64_t reconnect_ms_ = 0;
  std::int64_t reconnect_max_ms_ = 0;
  std::int64_t max_reconnects_ = 0;
  std::int64_t stall_ms_ = 0;

  SourceUri uri_;
  std::string camera_id_;
  std::uint64_t stream_ = 0;
  std::uint64_t next_index_ = 0;  ///< synthetic: the next frame to render
  std::int64_t delivered_ = 0;    ///< frames emitted, compared with count
  std::int64_t start_ns_ = 0;
  std::uint64_t first_index_ = 0;
  bool rebase_pacing_ = false;  ///< restored: paced from the next frame on
  std::uint64_t skip_below_ = 0;  ///< a restored file: frames numbered below this were sent already
  std::unique_ptr<SyntheticParts> synthetic_;
  std::unique_ptr<SyntheticUltrasound> ultrasound_;
  std::unique_ptr<GstCapture> capture_;
  std::atomic<std::int64_t>* frames_counter_ = nullptr;
  std::atomic<std::int64_t>* expected_counter_ = nullptr;
};

}  // namespace swarmflow::video
