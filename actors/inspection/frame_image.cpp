#include "inspection/frame_image.hpp"

#include <nlohmann/json.hpp>
#include <opencv2/imgproc.hpp>

namespace swarmflow::inspection {

cv::Mat grey_image(const schema::Frame& frame, cv::Mat& scratch, std::string* error) {
  auto fail = [&](const std::string& why) {
    if (error != nullptr) *error = why;
    return cv::Mat();
  };
  const auto* pixels = frame.pixels();
  const int width = static_cast<int>(frame.width()), height = static_cast<int>(frame.height());
  if (pixels == nullptr || width <= 0 || height <= 0) return fail("frame without pixels");
  int channels = 1;
  switch (frame.format()) {
    case schema::PixelFormat::GRAY8:
    case schema::PixelFormat::NV12:
      channels = 1;
      break;
    case schema::PixelFormat::BGR:
    case schema::PixelFormat::RGB:
      channels = 3;
      break;
    case schema::PixelFormat::BGRA:
      channels = 4;
      break;
    default:
      return fail("unsupported pixel format");
  }
  const std::size_t row = static_cast<std::size_t>(width) * static_cast<std::size_t>(channels);
  const std::size_t stride = frame.stride() != 0 ? frame.stride() : row;
  if (stride < row) return fail("stride smaller than a row of pixels");
  if (pixels->size() < stride * static_cast<std::size_t>(height - 1) + row) return fail("pixel buffer too short");
  // The Mat only reads; OpenCV has no const Mat over const data.
  auto* data = const_cast<std::uint8_t*>(pixels->data());
  const cv::Mat image(height, width, CV_MAKETYPE(CV_8U, channels), data, stride);
  switch (frame.format()) {
    case schema::PixelFormat::BGR:
      cv::cvtColor(image, scratch, cv::COLOR_BGR2GRAY);
      return scratch;
    case schema::PixelFormat::RGB:
      cv::cvtColor(image, scratch, cv::COLOR_RGB2GRAY);
      return scratch;
    case schema::PixelFormat::BGRA:
      cv::cvtColor(image, scratch, cv::COLOR_BGRA2GRAY);
      return scratch;
    default:
      return image;
  }
}

int station_of_part(std::uint64_t part_id) {
  return part_id >= 1'000'000 ? static_cast<int>(part_id / 1'000'000 - 1) : -1;
}

void read_truth_ids(const flatbuffers::String* ground_truth, int* station, std::uint64_t* part_id) {
  if (ground_truth == nullptr || ground_truth->size() == 0) return;
  const auto j = nlohmann::json::parse(ground_truth->begin(), ground_truth->end(), nullptr, false);
  if (!j.is_object()) return;
  const auto s = j.find("station");
  if (s != j.end() && s->is_number_integer()) *station = s->get<int>();
  const auto p = j.find("part_id");
  if (p != j.end() && p->is_number_unsigned()) *part_id = p->get<std::uint64_t>();
}

}  // namespace swarmflow::inspection
