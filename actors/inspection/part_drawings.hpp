#pragma once
/// \file part_drawings.hpp
/// The nominal drawings of the parts an inspection station checks: outer size
/// and hole pattern of each variant, in millimetres. The inspection stages use
/// them as prior knowledge (which holes must exist, what each size should be);
/// the table matches the variants the synthetic camera machines
/// (video::synthetic_part_variants), which a unit test checks.

#include <string>
#include <string_view>
#include <vector>

namespace swarmflow::inspection {

/// One hole of a drawing, in the plate's own frame: origin at the plate
/// centre, x along the long side, y along the short side.
struct NominalHole {
  double x_mm = 0, y_mm = 0, diameter_mm = 0;
};

/// One part variant as drawn.
struct PartDrawing {
  std::string name;
  double width_mm = 0, height_mm = 0;  ///< long side, short side
  std::vector<NominalHole> holes;
};

/// Every known variant.
const std::vector<PartDrawing>& part_drawings();

/// The variant whose outer size is nearest to (width, height), if both sides
/// are within `max_error_mm` of it; else null.
const PartDrawing* nearest_drawing(double width_mm, double height_mm, double max_error_mm);

/// The variant called `name`, or null.
const PartDrawing* find_drawing(std::string_view name);

/// The names of all variants, for a parameter's choices.
std::vector<std::string> drawing_names();

}  // namespace swarmflow::inspection
