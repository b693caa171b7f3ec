#pragma once
/// \file inspection.hpp
/// The `inspection` pack: classical machine-vision stages for machined parts.
/// Each stage's header lists its ports, parameters, assumptions and a YAML
/// example:
///   - inspection.defects (defect_detector.hpp): scratches, pits, cracks and
///     missing holes on a plate, one VisionResults per frame;
///   - inspection.measure (dimension_gauge.hpp): outer size and hole
///     diameters in mm from the two cameras of a station, fused.
/// The image processing itself is in plain functions (defect_finder.hpp,
/// plate_geometry.hpp) over the part drawings of part_drawings.hpp.
/// docs/inspection.md describes the methods and the measured figures.

#include <swarmflow/registry.hpp>

namespace swarmflow {

/// Adds the inspection.* stages.
void register_inspection_stages(Registry& registry);

}  // namespace swarmflow
