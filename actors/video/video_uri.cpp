#include "video/video_uri.hpp"

#include <cmath>
#include <cstddef>
#include <filesystem>
#include <numeric>
#include <system_error>

namespace swarmflow::video {
namespace {

bool starts_with(const std::string& text, const std::string& prefix) {
  return text.compare(0, prefix.size(), prefix) == 0;
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string lower(std::string text) {
  for (char& c : text) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return text;
}

/// `file://PATH` to an absolute path; `file:///abs` and `file://rel` both work.
bool file_path_of(const std::string& text, std::string* path, std::string* error) {
  std::string p = text.substr(std::string("file://").size());
  if (starts_with(p, "localhost/")) p.erase(0, std::string("localhost").size());
  if (p.empty()) {
    *error = "file:// needs a path, e.g. file:///data/video.avi";
    return false;
  }
  std::error_code ec;
  const std::filesystem::path absolute = std::filesystem::absolute(p, ec);
  *path = ec ? p : absolute.lexically_normal().string();
  return true;
}

}  // namespace

bool parse_source_uri(const std::string& text, SourceUri* uri, std::string* error) {
  SourceUri u;
  u.uri = text;
  u.location = text;
  if (starts_with(text, "file://")) {
    u.kind = SourceKind::file;
    if (!file_path_of(text, &u.location, error)) return false;
    u.uri = "file://" + u.location;
  } else if (starts_with(text, "rtsp://") || starts_with(text, "rtsps://") || starts_with(text, "rtspt://")) {
    u.kind = SourceKind::rtsp;
  } else if (starts_with(text, "http://") || starts_with(text, "https://")) {
    u.kind = SourceKind::http;
  } else if (starts_with(text, "v4l2://")) {
    u.kind = SourceKind::v4l2;
    u.location = text.substr(std::string("v4l2://").size());
    if (u.location.empty()) u.location = "/dev/video0";
  } else if (starts_with(text, "test://")) {
    u.kind = SourceKind::test;
    u.location = text.substr(std::string("test://").size());
    if (u.location.empty()) u.location = "smpte";
  } else if (starts_with(text, "synthetic://")) {
    u.kind = SourceKind::synthetic;
  } else {
    *error = "unsupported video URI '" + text +
             "' (use file://PATH, rtsp://..., http(s)://..., v4l2:///dev/videoN, test://PATTERN or "
             "synthetic://parts?..., synthetic://checkerboard?... or synthetic://ultrasound?...)";
    return false;
  }
  if (u.kind != SourceKind::file && u.location.empty()) {
    *error = "empty location in video URI '" + text + "'";
    return false;
  }
  *uri = std::move(u);
  return true;
}

bool is_live(SourceKind kind) {
  switch (kind) {
    case SourceKind::rtsp:
    case SourceKind::http:
    case SourceKind::v4l2:
    case SourceKind::test:
      return true;
    case SourceKind::file:
    case SourceKind::synthetic:
      break;
  }
  return false;
}

std::string fps_fraction(double fps) {
  long long num = std::llround(fps * 1000.0);
  long long den = 1000;
  const long long g = std::gcd(num, den);
  if (g > 1) {
    num /= g;
    den /= g;
  }
  return std::to_string(num) + "/" + std::to_string(den);
}

std::string capture_pipeline(const SourceUri& uri, const CaptureFormat& format, std::size_t max_buffers) {
  std::string d;
  switch (uri.kind) {
    case SourceKind::file:
    case SourceKind::rtsp:
      d = "uridecodebin name=src ! ";
      break;
    case SourceKind::http:
      // A live HTTP camera: no buffering queue in front of the decoder.
      d = "souphttpsrc name=src is-live=true do-timestamp=true ! decodebin ! ";
      break;
    case SourceKind::v4l2:
      d = "v4l2src name=src ! decodebin ! ";
      break;
    case SourceKind::test:
      d = "videotestsrc name=src is-live=true ! ";
      break;
    case SourceKind::synthetic:
      return {};
  }
  d += "videoconvert ! videoscale ! ";
  if (format.fps > 0) d += "videorate ! ";
  d += "video/x-raw,format=" + format.format;
  if (format.width > 0) d += ",width=" + std::to_string(format.width);
  if (format.height > 0) d += ",height=" + std::to_string(format.height);
  if (format.fps > 0) d += ",framerate=" + fps_fraction(format.fps);
  d += " ! appsink name=sink sync=false max-buffers=" + std::to_string(max_buffers);
  d += is_live(uri.kind) ? " drop=true" : " drop=false";
  return d;
}

bool parse_sink_uri(const std::string& text, SinkUri* uri, std::string* error) {
  SinkUri u;
  if (text == "null://") {
    u.discard = true;
    *uri = u;
    return true;
  }
  if (!starts_with(text, "file://")) {
    *error = "unsupported video.sink URI '" + text + "' (use file://PATH.avi|.mkv|.mp4 or null://)";
    return false;
  }
  if (!file_path_of(text, &u.path, error)) return false;
  const std::string name = lower(u.path);
  if (ends_with(name, ".avi")) {
    u.container = Container::avi;
  } else if (ends_with(name, ".mkv")) {
    u.container = Container::matroska;
  } else if (ends_with(name, ".mp4")) {
    u.container = Container::mp4;
  } else {
    *error = "video.sink cannot tell the container of '" + u.path + "': end the file name in .avi, .mkv or .mp4";
    return false;
  }
  *uri = std::move(u);
  return true;
}

bool choose_codec(const std::string& requested, Container container, bool have_x264, Codec* codec, std::string* error) {
  if (requested == "mjpeg") {
    *codec = Codec::mjpeg;
    return true;
  }
  if (requested == "h264") {
    if (!have_x264) {
      *error =
          "codec h264 needs the x264enc element (gstreamer1.0-plugins-ugly), which is not installed; "
          "use codec: mjpeg or auto";
      return false;
    }
    *codec = Codec::h264;
    return true;
  }
  if (requested == "auto") {
    *codec = (have_x264 && container != Container::avi) ? Codec::h264 : Codec::mjpeg;
    return true;
  }
  *error = "unknown codec '" + requested + "' (use auto, mjpeg or h264)";
  return false;
}

std::string record_pipeline(Container container, Codec codec, int quality) {
  std::string d = "appsrc name=src ! videoconvert ! ";
  if (codec == Codec::h264) {
    // quality 100 -> quantizer 10 (near lossless), quality 0 -> 50.
    const int quantizer = 50 - (40 * quality) / 100;
    // 4:2:0 in the high profile: from BGR x264enc would pick High 4:4:4,
    // which browsers, QuickTime and hardware decoders do not play. superfast
    // keeps CABAC and the 8x8 transform (ultrafast drops them, and the stream
    // falls back to constrained baseline).
    d += "video/x-raw,format=I420 ! ";
    d += "x264enc speed-preset=superfast tune=zerolatency pass=quant quantizer=" + std::to_string(quantizer) + " ! ";
    d += "video/x-h264,profile=high ! ";
  } else {
    d += "jpegenc quality=" + std::to_string(quality) + " ! ";
  }
  switch (container) {
    case Container::avi:
      d += "avimux";
      break;
    case Container::matroska:
      d += "matroskamux";
      break;
    case Container::mp4:
      // mp4mux takes no JPEG; qtmux writes MJPEG into the same ISO/QuickTime
      // structure, which qtdemux and common players read.
      d += codec == Codec::h264 ? "mp4mux" : "qtmux";
      break;
  }
  d += " ! filesink name=file";
  return d;
}

std::string redact_credentials(const std::string& uri) {
  const std::size_t scheme = uri.find("://");
  if (scheme == std::string::npos) return uri;
  const std::size_t host = scheme + 3;
  const std::size_t path = uri.find('/', host);
  const std::size_t at = uri.rfind('@', path == std::string::npos ? std::string::npos : path);
  if (at == std::string::npos || at < host) return uri;
  return uri.substr(0, host) + "***" + uri.substr(at);
}

std::uint64_t stable_stream_id(const std::string& name) {
  std::uint64_t h = 14695981039346656037ULL;
  for (unsigned char c : name) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

}  // namespace swarmflow::video
