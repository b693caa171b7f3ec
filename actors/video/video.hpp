#pragma once
/// \file video.hpp
/// The `video` pack. Each stage's header lists its ports, parameters and a
/// YAML example.

#include <swarmflow/registry.hpp>

namespace swarmflow {

/// Adds the video.* stages.
void register_video_stages(Registry& registry);

}  // namespace swarmflow
