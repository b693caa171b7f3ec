#pragma once
/// \file ultrasound.hpp
/// The `ultrasound` pack: B-mode ultrasound stages with classical image
/// processing and no learned model. Each stage's header lists its ports,
/// parameters and a YAML example (ultrasound_stages.hpp):
///   - ultrasound.enhance: speckle reduction and contrast;
///   - ultrasound.segment: lesion masks with contours, size, echogenicity,
///     shape, margin and posterior features;
///   - ultrasound.flow: vessel velocity in mm/s by speckle tracking;
///   - ultrasound.report: one finding per lesion, streamed as text tokens,
///     scored against the ground truth of synthetic probes.
/// The image processing itself is in plain functions (ultrasound_image.hpp),
/// the scoring in ultrasound_score.hpp. docs/ultrasound.md describes the
/// methods, the synthetic probe and the measured figures. Not for clinical use.

#include <swarmflow/registry.hpp>

namespace swarmflow {

/// Adds the ultrasound.* stages.
void register_ultrasound_stages(Registry& registry);

}  // namespace swarmflow
