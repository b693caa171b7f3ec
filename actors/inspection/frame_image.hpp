#pragma once
/// \file frame_image.hpp
/// Grey images of schema::Frame payloads for the inspection stages, and the
/// station a part was seen at.

#include <cstdint>
#include <string>

#include <opencv2/core.hpp>

#include <swarmflow/schema/frame_generated.h>

namespace swarmflow::inspection {

/// A grey (CV_8U) image of `frame`. GRAY8 and NV12 (its luma plane) are
/// wrapped without a copy; BGR, RGB and BGRA are converted into `scratch`,
/// which is reused from call to call. Empty, with `*error` set, when the frame
/// is malformed (no pixels, a stride too small, a buffer too short).
cv::Mat grey_image(const schema::Frame& frame, cv::Mat& scratch, std::string* error);

/// The station a part id belongs to under the convention of the synthetic
/// camera, (station + 1) * 1'000'000 + index; -1 for a smaller id.
int station_of_part(std::uint64_t part_id);

/// The `station` and `part_id` fields of a frame's ground-truth JSON, if it
/// has them (left unchanged otherwise).
void read_truth_ids(const flatbuffers::String* ground_truth, int* station, std::uint64_t* part_id);

}  // namespace swarmflow::inspection
