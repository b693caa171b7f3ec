#include "video/frame_overlay.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include <opencv2/imgproc.hpp>

namespace swarmflow::video {
namespace {

/// A fixed colour per defect class, so a class looks the same in every frame.
cv::Scalar colour_of(const std::string& name) {
  static const cv::Scalar kPalette[] = {
      {0, 0, 255}, {0, 165, 255}, {255, 0, 255}, {255, 128, 0}, {0, 255, 255}, {255, 255, 0}, {128, 0, 255},
  };
  std::size_t h = 0;
  for (unsigned char c : name) h = h * 31 + c;
  return kPalette[h % (sizeof(kPalette) / sizeof(kPalette[0]))];
}

/// Text on a filled box, so it reads on any background.
void label(cv::Mat& bgr, const std::string& text, cv::Point origin, double font_scale, int thickness,
           const cv::Scalar& background) {
  int baseline = 0;
  const cv::Size size = cv::getTextSize(text, cv::FONT_HERSHEY_SIMPLEX, font_scale, thickness, &baseline);
  origin.x = std::clamp(origin.x, 0, std::max(0, bgr.cols - size.width));
  origin.y = std::clamp(origin.y, size.height + baseline, std::max(size.height + baseline, bgr.rows - 1));
  cv::rectangle(bgr, cv::Point(origin.x, origin.y - size.height - baseline),
                cv::Point(origin.x + size.width, origin.y + baseline / 2), background, cv::FILLED);
  cv::putText(bgr, text, origin, cv::FONT_HERSHEY_SIMPLEX, font_scale, cv::Scalar(255, 255, 255), thickness,
              cv::LINE_AA);
}

std::string fixed(double value, int decimals) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.*f", decimals, value);
  return buffer;
}

}  // namespace

cv::Mat pixels_of(const schema::Frame& frame) {
  const auto* pixels = frame.pixels();
  const int width = static_cast<int>(frame.width());
  const int height = static_cast<int>(frame.height());
  if (pixels == nullptr || width <= 0 || height <= 0) return {};
  int type = CV_8UC3;
  int rows = height;
  int channels = 3;
  switch (frame.format()) {
    case schema::PixelFormat::BGR:
    case schema::PixelFormat::RGB:
      break;
    case schema::PixelFormat::BGRA:
      type = CV_8UC4;
      channels = 4;
      break;
    case schema::PixelFormat::GRAY8:
      type = CV_8UC1;
      channels = 1;
      break;
    case schema::PixelFormat::NV12:
      type = CV_8UC1;
      channels = 1;
      rows = height + (height + 1) / 2;
      break;
    default:
      return {};
  }
  const std::size_t stride = frame.stride() != 0 ? frame.stride() : static_cast<std::size_t>(width * channels);
  if (stride < static_cast<std::size_t>(width * channels)) return {};
  const std::size_t needed = stride * static_cast<std::size_t>(rows - 1) + static_cast<std::size_t>(width * channels);
  if (pixels->size() < needed) return {};
  return cv::Mat(rows, width, type, const_cast<std::uint8_t*>(pixels->data()), stride);
}

bool copy_as_bgr(const schema::Frame& frame, cv::Mat& bgr) {
  const cv::Mat view = pixels_of(frame);
  if (view.empty() || bgr.type() != CV_8UC3) return false;
  const int width = static_cast<int>(frame.width());
  const int height = static_cast<int>(frame.height());
  const bool same_size = width == bgr.cols && height == bgr.rows;
  int code = -1;
  switch (frame.format()) {
    case schema::PixelFormat::BGR:
      break;
    case schema::PixelFormat::RGB:
      code = cv::COLOR_RGB2BGR;
      break;
    case schema::PixelFormat::BGRA:
      code = cv::COLOR_BGRA2BGR;
      break;
    case schema::PixelFormat::GRAY8:
      code = cv::COLOR_GRAY2BGR;
      break;
    case schema::PixelFormat::NV12:
      if (height % 2 != 0) return false;
      code = cv::COLOR_YUV2BGR_NV12;
      break;
    default:
      return false;
  }
  // The frame as BGR at its own size: the view itself, or converted straight
  // into `bgr` when no scaling follows.
  cv::Mat as_bgr = view;
  if (code >= 0) {
    as_bgr = same_size ? bgr : cv::Mat();
    cv::cvtColor(view, as_bgr, code);
  }
  if (!same_size) {
    cv::resize(as_bgr, bgr, bgr.size(), 0, 0, cv::INTER_AREA);
  } else if (code < 0) {
    view.copyTo(bgr);
  }
  return true;
}

void draw_annotations(cv::Mat& bgr, const schema::VisionResults& results, double scale_x, double scale_y) {
  const int thickness = std::max(2, static_cast<int>(std::lround(bgr.cols / 480.0)));
  const double font_scale = std::max(0.4, bgr.cols / 1600.0);
  const int line_height = static_cast<int>(std::lround(28 * font_scale + 6));

  if (const auto* defects = results.defects()) {
    for (const auto* d : *defects) {
      if (d == nullptr || d->box() == nullptr) continue;
      const std::string name = d->class_name() != nullptr ? d->class_name()->str() : "defect";
      const cv::Scalar colour = colour_of(name);
      const cv::Rect box(static_cast<int>(std::lround(d->box()->x() * scale_x)),
                         static_cast<int>(std::lround(d->box()->y() * scale_y)),
                         std::max(1, static_cast<int>(std::lround(d->box()->width() * scale_x))),
                         std::max(1, static_cast<int>(std::lround(d->box()->height() * scale_y))));
      cv::rectangle(bgr, box, colour, thickness, cv::LINE_AA);
      label(bgr, name + " " + fixed(d->score(), 2), cv::Point(box.x, box.y - thickness), font_scale,
            std::max(1, thickness / 2), colour);
    }
  }

  int y = line_height;
  std::string title;
  if (results.part_id() != 0) title = "part " + std::to_string(results.part_id());
  if (results.station() >= 0 && results.part_id() != 0) title += "  station " + std::to_string(results.station());
  if (results.partial()) title += title.empty() ? "partial" : "  (partial)";
  if (!title.empty()) {
    label(bgr, title, cv::Point(8, y), font_scale, std::max(1, thickness / 2), cv::Scalar(64, 64, 64));
    y += line_height;
  }
  if (const auto* measurements = results.measurements()) {
    for (const auto* m : *measurements) {
      if (m == nullptr) continue;
      std::string text = m->name() != nullptr ? m->name()->str() : "value";
      text += ": " + fixed(m->value(), 3);
      if (m->unit() != nullptr && m->unit()->size() != 0) text += " " + m->unit()->str();
      if (m->tolerance() > 0) text += " (" + fixed(m->nominal(), 3) + " +/- " + fixed(m->tolerance(), 3) + ")";
      const cv::Scalar background = m->in_tolerance() ? cv::Scalar(0, 128, 0) : cv::Scalar(0, 0, 192);
      label(bgr, text, cv::Point(8, y), font_scale, std::max(1, thickness / 2), background);
      y += line_height;
    }
  }
}

}  // namespace swarmflow::video
