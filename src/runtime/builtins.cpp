#include <swarmflow/registry.hpp>

#include "inspection/batch_quality.hpp"
#include "inspection/inspection.hpp"
#include "io/io.hpp"
#include "sim/sim.hpp"
#include "video/video.hpp"
#include "vision/vision.hpp"

namespace swarmflow {

void register_builtin_stages(Registry& registry) {
  register_sim_stages(registry);
  register_io_stages(registry);
  register_video_stages(registry);
  register_vision_stages(registry);
  register_inspection_stages(registry);
  inspection::register_batch_quality(registry);
}

}  // namespace swarmflow
