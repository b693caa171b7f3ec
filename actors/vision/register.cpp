#include "vision/vision.hpp"
#include "vision/vision_stages.hpp"

namespace swarmflow {

void register_vision_stages(Registry& registry) {
  registry.add<vision::Convert>("vision.convert", "resize a frame and change its pixel format");
  registry.add<vision::Crop>("vision.crop", "cut a region out of a frame");
  registry.add<vision::Undistort>("vision.undistort", "remove lens distortion with a camera calibration file");
  registry.add<vision::Annotate>("vision.annotate", "draw defects and measurements on frames");
}

}  // namespace swarmflow
