#include "vision/vision_stages.hpp"

#include <cstdio>

#include <opencv2/calib3d.hpp>
#include <opencv2/imgproc.hpp>

#include "vision/camera_calibration.hpp"
#include "vision/frame_mat.hpp"

namespace swarmflow::vision {

namespace {

Status bad_frame(const char* stage) {
  return Status::error(std::string(stage) + ": frame has fewer pixel bytes than its size says",
                       StatusCode::invalid_argument);
}

/// Converts `src` (of `from`) into `dst` (of `to`, already sized).
void convert_pixels(const cv::Mat& src, schema::PixelFormat from, cv::Mat& dst, schema::PixelFormat to) {
  using F = schema::PixelFormat;
  if (from == to || (channels_of(from) == 1 && channels_of(to) == 1)) {
    src.copyTo(dst);
    return;
  }
  int code = -1;
  if (from == F::BGR && to == F::RGB) code = cv::COLOR_BGR2RGB;
  if (from == F::RGB && to == F::BGR) code = cv::COLOR_RGB2BGR;
  if (from == F::BGR && to == F::GRAY8) code = cv::COLOR_BGR2GRAY;
  if (from == F::RGB && to == F::GRAY8) code = cv::COLOR_RGB2GRAY;
  if (from == F::GRAY8 && to == F::BGR) code = cv::COLOR_GRAY2BGR;
  if (from == F::GRAY8 && to == F::RGB) code = cv::COLOR_GRAY2RGB;
  if (from == F::BGR && to == F::BGRA) code = cv::COLOR_BGR2BGRA;
  if (from == F::BGRA && to == F::BGR) code = cv::COLOR_BGRA2BGR;
  if (from == F::BGRA && to == F::GRAY8) code = cv::COLOR_BGRA2GRAY;
  if (from == F::GRAY8 && to == F::BGRA) code = cv::COLOR_GRAY2BGRA;
  if (from == F::RGB && to == F::BGRA) code = cv::COLOR_RGB2BGRA;
  if (code < 0) {
    src.copyTo(dst);
    return;
  }
  cv::cvtColor(src, dst, code);
}

}  // namespace

// -- vision.convert -------------------------------------------------------

void Convert::setup(StageSpec& s) {
  in_ = s.input<schema::Frame>("frames", "frames to convert");
  out_ = s.output<schema::Frame>("frames", "converted frames");
  s.param(width_, "width", "output width in pixels, 0 = keep", 0, {0.0, 16384.0});
  s.param(height_, "height", "output height in pixels, 0 = keep", 0, {0.0, 16384.0});
  s.frame_size(out_, "width", "height");
  s.param(format_, "format", "output pixel format, empty = keep", "", {"", "BGR", "RGB", "GRAY8", "BGRA"});
  s.param(interpolation_, "interpolation", "resampling for resizing", "area", {"area", "linear", "nearest"});
}

Status Convert::start(StageContext&) { return {}; }

Status Convert::process(Inputs& in, Outputs& out, StageContext&) {
  const schema::Frame* f = in.get(in_);
  if (f == nullptr) return {};
  if (f->format() == schema::PixelFormat::NV12) {
    return Status::error("vision.convert: NV12 input is not supported; ask the source for BGR or GRAY8",
                         StatusCode::invalid_argument);
  }
  const cv::Mat src = view_of(*f);
  if (src.empty()) return bad_frame("vision.convert");
  schema::PixelFormat to = f->format();
  if (!format_.empty()) parse_format(format_, &to);
  const int w = width_ > 0 ? static_cast<int>(width_) : src.cols;
  const int h = height_ > 0 ? static_cast<int>(height_) : src.rows;
  FrameWriter writer(w, h, to);
  const int interp = interpolation_ == "linear" ? cv::INTER_LINEAR
                     : interpolation_ == "nearest" ? cv::INTER_NEAREST
                                                   : cv::INTER_AREA;
  if (w == src.cols && h == src.rows) {
    convert_pixels(src, f->format(), writer.pixels(), to);
  } else if (to == f->format()) {
    cv::resize(src, writer.pixels(), writer.pixels().size(), 0, 0, interp);  // straight into the payload
  } else {
    cv::Mat resized;
    cv::resize(src, resized, cv::Size(w, h), 0, 0, interp);
    convert_pixels(resized, f->format(), writer.pixels(), to);
  }
  out.emit(out_, writer.finish(*f));
  return {};
}

// -- vision.crop ----------------------------------------------------------

void Crop::setup(StageSpec& s) {
  in_ = s.input<schema::Frame>("frames", "frames to crop");
  out_ = s.output<schema::Frame>("frames", "the cropped region");
  s.param(x_, "x", "left edge of the region in pixels", 0, {0.0, 16384.0});
  s.param(y_, "y", "top edge of the region in pixels", 0, {0.0, 16384.0});
  s.param(width_, "width", "width of the region, 0 = to the right edge", 0, {0.0, 16384.0});
  s.param(height_, "height", "height of the region, 0 = to the bottom edge", 0, {0.0, 16384.0});
  s.frame_region(in_, "x", "y", "width", "height");
  s.frame_size(out_, "width", "height");
}

Status Crop::process(Inputs& in, Outputs& out, StageContext&) {
  const schema::Frame* f = in.get(in_);
  if (f == nullptr) return {};
  if (f->format() == schema::PixelFormat::NV12) {
    return Status::error("vision.crop: NV12 input is not supported", StatusCode::invalid_argument);
  }
  const cv::Mat src = view_of(*f);
  if (src.empty()) return bad_frame("vision.crop");
  if (x_ >= src.cols || y_ >= src.rows) {
    // Every frame of the stream will miss too: a setting that cannot work.
    return Status::error("vision.crop: the region starts at x " + std::to_string(x_) + ", y " + std::to_string(y_) +
                             ", outside the " + std::to_string(src.cols) + "x" + std::to_string(src.rows) +
                             " frame; set x and y inside it",
                         StatusCode::invalid_argument);
  }
  const int x = static_cast<int>(x_);
  const int y = static_cast<int>(y_);
  const int w = std::min(width_ > 0 ? static_cast<int>(width_) : src.cols, src.cols - x);
  const int h = std::min(height_ > 0 ? static_cast<int>(height_) : src.rows, src.rows - y);
  FrameWriter writer(w, h, f->format());
  src(cv::Rect(x, y, w, h)).copyTo(writer.pixels());
  out.emit(out_, writer.finish(*f));
  return {};
}

// -- vision.undistort -------------------------------------------------------

void Undistort::setup(StageSpec& s) {
  in_ = s.input<schema::Frame>("frames", "frames as the lens shows them");
  out_ = s.output<schema::Frame>("frames", "the same frames with the lens distortion removed");
  s.param(calibration_, "calibration", "calibration file written by swarmflow calibrate (required)", "");
  s.param(interpolation_, "interpolation", "resampling of the remap", "linear", {"linear", "cubic"});
}

Status Undistort::start(StageContext&) {
  if (calibration_.empty()) {
    return Status::error("vision.undistort: set calibration to the file written by swarmflow calibrate",
                         StatusCode::invalid_argument);
  }
  Calibration c;
  std::string error;
  if (!read_calibration(calibration_, &c, &error)) {
    return Status::error("vision.undistort: " + error, StatusCode::invalid_argument);
  }
  size_ = c.image_size;
  cv::initUndistortRectifyMap(c.camera_matrix, c.distortion, cv::Mat(), c.camera_matrix, size_, CV_16SC2, map1_,
                              map2_);
  return {};
}

Status Undistort::process(Inputs& in, Outputs& out, StageContext&) {
  const schema::Frame* f = in.get(in_);
  if (f == nullptr) return {};
  if (f->format() == schema::PixelFormat::NV12) {
    return Status::error("vision.undistort: NV12 input is not supported; ask the source for BGR or GRAY8",
                         StatusCode::invalid_argument);
  }
  const cv::Mat src = view_of(*f);
  if (src.empty()) return bad_frame("vision.undistort");
  if (src.size() != size_) {
    return Status::error("vision.undistort: " + calibration_ + " calibrates " + std::to_string(size_.width) + "x" +
                             std::to_string(size_.height) + " frames, but this frame is " + std::to_string(src.cols) +
                             "x" + std::to_string(src.rows) + "; calibrate this camera at this size",
                         StatusCode::invalid_argument);
  }
  FrameWriter writer(src.cols, src.rows, f->format());
  cv::remap(src, writer.pixels(), map1_, map2_, interpolation_ == "cubic" ? cv::INTER_CUBIC : cv::INTER_LINEAR,
            cv::BORDER_CONSTANT);  // straight into the payload
  out.emit(out_, writer.finish(*f));
  return {};
}

// -- vision.annotate --------------------------------------------------------

void draw_results(cv::Mat& image, const schema::VisionResults& results, int thickness, double font_scale) {
  const bool colour = image.channels() >= 3;
  const cv::Scalar box_colour = colour ? cv::Scalar(0, 0, 255) : cv::Scalar(255);
  const cv::Scalar text_colour = colour ? cv::Scalar(0, 255, 255) : cv::Scalar(255);
  if (results.defects() != nullptr) {
    for (const auto* d : *results.defects()) {
      if (d->box() == nullptr) continue;
      const cv::Rect box(cvRound(d->box()->x()), cvRound(d->box()->y()), std::max(1, cvRound(d->box()->width())),
                         std::max(1, cvRound(d->box()->height())));
      cv::rectangle(image, box, box_colour, thickness);
      char label[96];
      std::snprintf(label, sizeof label, "%s %.2f", d->class_name() != nullptr ? d->class_name()->c_str() : "?",
                    static_cast<double>(d->score()));
      cv::putText(image, label, cv::Point(box.x, std::max(12, box.y - 4)), cv::FONT_HERSHEY_SIMPLEX, font_scale,
                  text_colour, std::max(1, thickness / 2), cv::LINE_AA);
    }
  }
  if (results.measurements() != nullptr) {
    int line = 0;
    for (const auto* m : *results.measurements()) {
      char text[160];
      std::snprintf(text, sizeof text, "%s %.2f %s%s", m->name() != nullptr ? m->name()->c_str() : "?", m->value(),
                    m->unit() != nullptr ? m->unit()->c_str() : "", m->in_tolerance() ? "" : "  OUT");
      const cv::Scalar c = m->in_tolerance() ? text_colour : box_colour;
      cv::putText(image, text, cv::Point(10, 30 + line * static_cast<int>(28 * font_scale / 0.6)),
                  cv::FONT_HERSHEY_SIMPLEX, font_scale, c, std::max(1, thickness / 2), cv::LINE_AA);
      ++line;
    }
  }
}

void Annotate::setup(StageSpec& s) {
  frames_ = s.input<schema::Frame>("frames", "frames to draw on");
  results_ = s.input<schema::VisionResults>("results", "what to draw: defects and measurements");
  out_ = s.output<schema::Frame>("frames", "annotated frames");
  s.param(thickness_, "thickness", "line thickness in pixels", 2, {1.0, 20.0});
  s.param(font_scale_, "font_scale", "label size", 0.6, {0.1, 5.0});
  s.param(camera_, "camera", "only frames of this camera id go on; empty = all", "");
  s.require_join();  // a frame and its results in one step
}

Status Annotate::process(Inputs& in, Outputs& out, StageContext&) {
  const schema::Frame* f = in.get(frames_);
  if (f == nullptr) return {};  // results without their frame: nothing to draw on
  if (!camera_.empty() && (f->camera_id() == nullptr || f->camera_id()->str() != camera_)) return {};
  if (f->format() == schema::PixelFormat::NV12) {
    return Status::error("vision.annotate: NV12 input is not supported", StatusCode::invalid_argument);
  }
  const cv::Mat src = view_of(*f);
  if (src.empty()) return bad_frame("vision.annotate");
  const schema::VisionResults* r = in.get(results_);
  if (r == nullptr) {
    out.forward(out_, *in.envelope(frames_));  // nothing to draw: the same payload goes on
    return {};
  }
  FrameWriter writer(src.cols, src.rows, f->format());
  src.copyTo(writer.pixels());
  draw_results(writer.pixels(), *r, static_cast<int>(thickness_), font_scale_);
  out.emit(out_, writer.finish(*f), in.envelope(frames_)->header());
  return {};
}

}  // namespace swarmflow::vision
