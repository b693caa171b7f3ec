#pragma once
// Drawing of vision results on a BGR image, as video.sink writes them, and
// the conversion of a Frame into a BGR image of a given size.

#include <opencv2/core.hpp>

#include <swarmflow/schema/frame_generated.h>
#include <swarmflow/schema/vision_generated.h>

namespace swarmflow::video {

/// A read-only view of `frame`'s pixels (no copy): rows x cols of the first
/// plane for BGR, RGB, BGRA and GRAY8; for NV12 the luma rows followed by the
/// chroma rows (height * 3 / 2 rows). Empty when the frame has too few bytes
/// for its size or an unknown format.
cv::Mat pixels_of(const schema::Frame& frame);

/// Converts (and, when the sizes differ, scales) `frame` into `bgr`, which
/// keeps its size and memory (CV_8UC3). False when the frame is malformed.
bool copy_as_bgr(const schema::Frame& frame, cv::Mat& bgr);

/// Draws boxes with class and score labels for the defects, and the
/// measurements as text lines, onto `bgr`. Box coordinates (pixels of the
/// analysed frame) are multiplied by `scale_x` and `scale_y` (the size of
/// `bgr` over the size of that frame).
void draw_annotations(cv::Mat& bgr, const schema::VisionResults& results, double scale_x = 1.0, double scale_y = 1.0);

}  // namespace swarmflow::video
