#include "video/video.hpp"

namespace swarmflow {

void register_video_stages(Registry& /*registry*/) {}

}  // namespace swarmflow
