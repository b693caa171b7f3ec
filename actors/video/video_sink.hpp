#pragma once
/// \file video_sink.hpp
/// `video.sink`: writes frames to a video file, with the vision results of
/// each frame drawn on it, or discards them. docs/video.md has the details.
///
/// Inputs:
///   frames        swarmflow.schema.Frame           the frames to write
///   annotations   swarmflow.schema.VisionResults   optional; drawn on the frame with the same
///                                                  camera_id and frame_index
///
/// Parameters:
///   uri           string   file://PATH.avi | .mkv | .mp4 (the container follows the extension), or
///                          null:// to count and discard; default null://
///   fps           number   frame rate written into the file (timestamps only), default 30
///   codec         string   auto | mjpeg | h264; auto = H.264 (x264enc) into MKV/MP4 when x264enc is
///                          installed, else MJPEG (jpegenc); .avi files always get MJPEG under auto
///   quality       integer  1..100, JPEG quality or the H.264 quantizer scale, default 85
///   hold_frames   integer  once annotations have been seen, frames wait for their annotations, at
///                          most this many frames; default 8
///
/// Every frame is written, in arrival order; the file's size is that of the
/// first frame and later frames of another size are scaled to it. Drawing
/// needs a copy of the frame (the payload is shared and immutable): the copy
/// is made straight into the encoder's buffer. A BGR frame with nothing to
/// draw and the encoder's row layout is handed to the encoder without a copy.
/// `stop` sends end of stream and waits (at most 10 s) for the muxer to
/// finish the file.
///
/// Counters: frames, annotations, written, annotated, resized, discarded,
/// malformed (frames whose pixels do not fit their size; skipped).
///
/// ```yaml
/// stages:
///   - id: record
///     type: video.sink
///     inputs: {frames: camera/frames, annotations: detect/results}
///     params: {uri: "file:///tmp/inspection.avi", fps: 15, codec: mjpeg, quality: 80}
/// ```

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>

#include <swarmflow/schema/frame_generated.h>
#include <swarmflow/schema/vision_generated.h>
#include <swarmflow/stage.hpp>

#include "video/gst_recorder.hpp"
#include "video/gst_support.hpp"
#include "video/video_uri.hpp"

namespace swarmflow::video {

class VideoSink final : public Stage {
 public:
  void setup(StageSpec& s) override;
  Status start(StageContext& ctx) override;
  Status process(Inputs& in, Outputs& out, StageContext& ctx) override;
  void stop(StageContext& ctx) override;

 private:
  /// The latest annotations for `frame`, or null; `*superseded` is set when
  /// annotations of a later frame of the same camera have already arrived.
  const schema::VisionResults* annotations_for(const schema::Frame& frame, bool* superseded) const;
  /// Writes the pending frames that are ready (all of them when `all`).
  Status release(bool all);
  Status write(const Envelope& frame, const schema::VisionResults* annotations);

  InputPort<schema::Frame> frames_;
  InputPort<schema::VisionResults> annotations_;
  std::string uri_text_;
  double fps_ = 30;
  std::string codec_text_;
  std::int64_t quality_ = 85;
  std::int64_t hold_frames_ = 8;

  SinkUri uri_;
  Codec codec_ = Codec::mjpeg;
  std::unique_ptr<GstRecorder> recorder_;
  int width_ = 0;  ///< size of the file's frames (the first frame's)
  int height_ = 0;
  bool annotations_seen_ = false;
  std::deque<Envelope> pending_;             ///< frames waiting for their annotations
  std::deque<Envelope> recent_annotations_;  ///< newest last
  std::unique_ptr<RateLimitedLog> log_;

  std::atomic<std::int64_t>* frames_counter_ = nullptr;
  std::atomic<std::int64_t>* annotations_counter_ = nullptr;
  std::atomic<std::int64_t>* written_ = nullptr;
  std::atomic<std::int64_t>* annotated_ = nullptr;
  std::atomic<std::int64_t>* resized_ = nullptr;
  std::atomic<std::int64_t>* discarded_ = nullptr;
  std::atomic<std::int64_t>* malformed_ = nullptr;
};

}  // namespace swarmflow::video
