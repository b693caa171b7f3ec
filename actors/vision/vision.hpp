#pragma once
/// \file vision.hpp
/// The `vision` pack. Each stage's header lists its ports, parameters and a
/// YAML example.

#include <swarmflow/registry.hpp>

namespace swarmflow {

/// Adds the vision.* stages.
void register_vision_stages(Registry& registry);

}  // namespace swarmflow
