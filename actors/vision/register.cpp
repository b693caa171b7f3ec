#include "vision/vision.hpp"
#include "vision/vision_stages.hpp"

#include <opencv2/core/utility.hpp>

#include <swarmflow/library_threads.hpp>

namespace swarmflow {

void register_vision_stages(Registry& registry) {
  // Its stages call OpenCV: the runtime sets OpenCV's threads for a run
  // (swarmflow/library_threads.hpp).
  register_library_threads("opencv", {[] { return cv::getNumThreads(); }, [](int n) { cv::setNumThreads(n); }});
  registry.add<vision::Convert>("vision.convert", "resize a frame and change its pixel format");
  registry.add<vision::Crop>("vision.crop", "cut a region out of a frame");
  registry.add<vision::Undistort>("vision.undistort", "remove lens distortion with a camera calibration file");
  registry.add<vision::Annotate>("vision.annotate", "draw defects and measurements on frames");
}

}  // namespace swarmflow
