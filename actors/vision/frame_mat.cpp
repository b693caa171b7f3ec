#include "vision/frame_mat.hpp"

namespace swarmflow::vision {

int channels_of(schema::PixelFormat format) {
  switch (format) {
    case schema::PixelFormat::BGR:
    case schema::PixelFormat::RGB: return 3;
    case schema::PixelFormat::BGRA: return 4;
    case schema::PixelFormat::GRAY8:
    case schema::PixelFormat::NV12: return 1;
  }
  return 3;
}

int cv_type_of(schema::PixelFormat format) { return CV_8UC(channels_of(format)); }

bool parse_format(const std::string& text, schema::PixelFormat* format) {
  if (text == "BGR") *format = schema::PixelFormat::BGR;
  else if (text == "RGB") *format = schema::PixelFormat::RGB;
  else if (text == "GRAY8") *format = schema::PixelFormat::GRAY8;
  else if (text == "NV12") *format = schema::PixelFormat::NV12;
  else if (text == "BGRA") *format = schema::PixelFormat::BGRA;
  else return false;
  return true;
}

cv::Mat view_of(const schema::Frame& frame) {
  const auto* px = frame.pixels();
  const int w = static_cast<int>(frame.width());
  const int h = static_cast<int>(frame.height());
  const int type = cv_type_of(frame.format());
  const std::size_t stride = frame.stride() != 0 ? frame.stride() : static_cast<std::size_t>(w) * CV_ELEM_SIZE(type);
  if (px == nullptr || w <= 0 || h <= 0 || stride < static_cast<std::size_t>(w) * CV_ELEM_SIZE(type) ||
      px->size() < stride * static_cast<std::size_t>(h)) {
    return {};
  }
  // OpenCV wants a non-const pointer; the view is only ever read.
  return cv::Mat(h, w, type, const_cast<std::uint8_t*>(px->data()), stride);
}

FrameWriter::FrameWriter(int width, int height, schema::PixelFormat format)
    : builder_(static_cast<std::size_t>(width) * static_cast<std::size_t>(height) * channels_of(format) + 1024,
               &payload_allocator()),
      width_(width),
      height_(height),
      format_(format) {
  const int type = cv_type_of(format);
  std::size_t bytes =
      static_cast<std::size_t>(width) * static_cast<std::size_t>(height) * static_cast<std::size_t>(CV_ELEM_SIZE(type));
  if (format == schema::PixelFormat::NV12) bytes = bytes * 3 / 2;  // chroma plane after the luma plane
  std::uint8_t* data = nullptr;
  data_ = builder_.CreateUninitializedVector(bytes, &data);
  pixels_ = cv::Mat(height, width, type, data);
}

PayloadPtr FrameWriter::finish(const schema::Frame& like) {
  auto camera = builder_.CreateString(like.camera_id() != nullptr ? like.camera_id()->str() : std::string());
  auto truth = builder_.CreateString(like.ground_truth() != nullptr ? like.ground_truth()->str() : std::string());
  schema::FrameBuilder b(builder_);
  b.add_format(format_);
  b.add_width(static_cast<std::uint32_t>(width_));
  b.add_height(static_cast<std::uint32_t>(height_));
  b.add_stride(static_cast<std::uint32_t>(pixels_.step[0]));
  b.add_capture_ns(like.capture_ns());
  b.add_camera_id(camera);
  b.add_frame_index(like.frame_index());
  b.add_pixels(data_);
  b.add_ground_truth(truth);
  builder_.Finish(b.Finish(), schema::FrameIdentifier());
  return Payload::from_builder(builder_);
}

}  // namespace swarmflow::vision
