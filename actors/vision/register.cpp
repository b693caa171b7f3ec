#include "vision/vision.hpp"

namespace swarmflow {

void register_vision_stages(Registry& /*registry*/) {}

}  // namespace swarmflow
