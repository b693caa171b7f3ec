#pragma once
// The packs on OpenCV and GStreamer, which a Runtime does not carry: tests
// that run them register them as the `swarmflow` command does.

#include <swarmflow/registry.hpp>

#include "inspection/batch_quality.hpp"
#include "inspection/inspection.hpp"
#include "ultrasound/ultrasound.hpp"
#include "video/video.hpp"
#include "vision/vision.hpp"

namespace swarmflow::testing {

inline void register_media_packs(Registry& registry) {
  register_video_stages(registry);
  register_vision_stages(registry);
  register_inspection_stages(registry);
  inspection::register_batch_quality(registry);
  register_ultrasound_stages(registry);
}

}  // namespace swarmflow::testing
