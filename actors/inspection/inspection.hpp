#pragma once
/// \file inspection.hpp
/// The `inspection` pack. Each stage's header lists its ports, parameters and a
/// YAML example.

#include <swarmflow/registry.hpp>

namespace swarmflow {

/// Adds the inspection.* stages.
void register_inspection_stages(Registry& registry);

}  // namespace swarmflow
