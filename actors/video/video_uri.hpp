#pragma once
// URIs of video.source and video.sink, and the GStreamer pipelines they stand
// for. Pure string logic (no GStreamer), so it is tested on its own.

#include <cstddef>
#include <cstdint>
#include <string>

namespace swarmflow::video {

/// Where a video.source reads from.
enum class SourceKind { file, rtsp, http, v4l2, test, synthetic };

/// A parsed video.source URI.
struct SourceUri {
  SourceKind kind = SourceKind::file;
  std::string uri;       ///< as written, or for `file://` the canonical `file:///abs/path`
  std::string location;  ///< file path, device, test pattern, or the URL itself
};

/// Reads `file://PATH`, `rtsp://...`, `http(s)://...`, `v4l2:///dev/videoN`,
/// `test://PATTERN` or `synthetic://parts?...`. A relative file path is made
/// absolute. False with `*error` set for any other scheme or an empty location.
bool parse_source_uri(const std::string& text, SourceUri* uri, std::string* error);

/// Live sources produce on their own clock and are watched for failures:
/// rtsp, http, v4l2 and test. Files are not; synthetic is live only when paced.
bool is_live(SourceKind kind);

/// The raw format a capture pipeline delivers.
struct CaptureFormat {
  std::string format = "BGR";  ///< BGR | GRAY8 | NV12
  int width = 0;               ///< 0 = as the source gives
  int height = 0;
  double fps = 0;  ///< 0 = as the source gives
};

/// `fps` as a GStreamer fraction "N/D" (exact to 1/1000).
std::string fps_fraction(double fps);

/// The gst-launch description of the capture pipeline for `uri`. Its first
/// element is named `src` (its location, uri or device is set as a property
/// afterwards, so no user text is parsed as pipeline syntax) and the last is
/// an appsink named `sink`.
std::string capture_pipeline(const SourceUri& uri, const CaptureFormat& format, std::size_t max_buffers);

/// Containers video.sink writes, chosen by the file's extension.
enum class Container { avi, matroska, mp4 };
/// Codecs video.sink encodes with.
enum class Codec { mjpeg, h264 };

/// A parsed video.sink URI: a file to write or `null://`.
struct SinkUri {
  bool discard = false;  ///< `null://`: frames are counted and dropped
  std::string path;      ///< absolute path of the file
  Container container = Container::avi;
};

/// Reads `file://PATH.avi|.mkv|.mp4` or `null://`; false with `*error` set otherwise.
bool parse_sink_uri(const std::string& text, SinkUri* uri, std::string* error);

/// The codec for `requested` ("auto" | "mjpeg" | "h264") in `container`:
/// auto picks H.264 when x264enc exists and the container is not AVI, else
/// MJPEG. False with `*error` when h264 is asked for without x264enc.
bool choose_codec(const std::string& requested, Container container, bool have_x264, Codec* codec, std::string* error);

/// The gst-launch description of the recording pipeline: an appsrc named
/// `src`, the encoder, the muxer and a filesink named `file` (its location is
/// set as a property). `quality` is 1..100.
std::string record_pipeline(Container container, Codec codec, int quality);

/// `uri` with any `user:password@` replaced by `***@`, for log lines.
std::string redact_credentials(const std::string& uri);

/// A stable 64-bit id for a name (FNV-1a), used as the stream id of a camera.
std::uint64_t stable_stream_id(const std::string& name);

}  // namespace swarmflow::video
