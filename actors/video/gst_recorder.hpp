#pragma once
// A GStreamer recording pipeline fed through an appsrc: BGR frames in,
// encoded and muxed into a file. GStreamer types stay in the .cpp.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <swarmflow/envelope.hpp>
#include <swarmflow/status.hpp>

#include "video/video_uri.hpp"

namespace swarmflow::video {

/// What a recording writes.
struct RecorderConfig {
  std::string path;
  Container container = Container::avi;
  Codec codec = Codec::mjpeg;
  int quality = 85;  ///< 1..100
  double fps = 30;   ///< sets the timestamps; frames are never dropped or repeated
  int width = 0;
  int height = 0;
};

/// One recording: appsrc ! videoconvert ! encoder ! muxer ! filesink.
class GstRecorder {
 public:
  explicit GstRecorder(RecorderConfig config);
  /// Finishes the file if `finish` was not called.
  ~GstRecorder();
  GstRecorder(const GstRecorder&) = delete;
  GstRecorder& operator=(const GstRecorder&) = delete;

  /// Builds the pipeline and starts it.
  Status start();
  /// Bytes between rows of the BGR frames the recording takes.
  std::size_t stride() const;
  /// Bytes of one BGR frame.
  std::size_t frame_size() const;

  /// Pushes a new frame that `fill` writes (BGR, `stride()` bytes a row)
  /// into the buffer the encoder reads: one copy, made by `fill`.
  Status push_filled(const std::function<void(std::uint8_t* bgr, std::size_t stride)>& fill);
  /// Pushes `frame_size()` bytes at `bgr` that `owner` keeps alive, without
  /// copying them (the encoder holds `owner` until it is done with them).
  Status push_shared(const std::uint8_t* bgr, PayloadPtr owner);

  /// Sends end of stream and waits up to `timeout_ns` for the muxer to
  /// finish the file, then releases the pipeline.
  Status finish(std::int64_t timeout_ns);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace swarmflow::video
