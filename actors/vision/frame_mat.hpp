#pragma once
// cv::Mat views over Frame payloads, and frames written once, in place.

#include <cstdint>
#include <string>

#include <opencv2/core.hpp>

#include <swarmflow/envelope.hpp>
#include <swarmflow/schema/frame_generated.h>

namespace swarmflow::vision {

/// Channels of a pixel format (NV12: 1, a luma plane followed by chroma).
int channels_of(schema::PixelFormat format);
/// OpenCV type of one row of a format's first plane.
int cv_type_of(schema::PixelFormat format);
/// "BGR", "RGB", "GRAY8", "NV12", "BGRA" to a format; false when unknown.
bool parse_format(const std::string& text, schema::PixelFormat* format);

/// A read-only view of a frame's first plane (no copy); empty when the frame
/// is malformed (too few pixel bytes for its size).
cv::Mat view_of(const schema::Frame& frame);

/// A frame being written: the pixels live in the builder's memory, written
/// once through `pixels`; `finish` adds the other fields and completes it.
class FrameWriter {
 public:
  FrameWriter(int width, int height, schema::PixelFormat format);
  /// The frame's pixels, to draw or copy into (stride = width x channels).
  cv::Mat& pixels() { return pixels_; }
  /// Completes the frame, copying the descriptive fields of `like` (camera
  /// id, index, capture time, ground truth), and returns its payload.
  PayloadPtr finish(const schema::Frame& like);

 private:
  flatbuffers::FlatBufferBuilder builder_;
  flatbuffers::Offset<flatbuffers::Vector<std::uint8_t>> data_;
  cv::Mat pixels_;
  int width_;
  int height_;
  schema::PixelFormat format_;
};

}  // namespace swarmflow::vision
