#include "inspection/part_drawings.hpp"

#include <algorithm>
#include <cmath>

namespace swarmflow::inspection {

const std::vector<PartDrawing>& part_drawings() {
  static const std::vector<PartDrawing> drawings = {
      {"plate_120x80_4h", 120.0, 80.0, {{-45, -25, 12}, {45, -25, 12}, {-45, 25, 12}, {45, 25, 12}}},
      {"plate_100x70_6h",
       100.0,
       70.0,
       {{-35, -22, 10}, {0, -22, 10}, {35, -22, 10}, {-35, 22, 10}, {0, 22, 10}, {35, 22, 10}}},
      {"plate_130x85_5h", 130.0, 85.0, {{-52, -30, 8}, {52, -30, 8}, {-52, 30, 8}, {52, 30, 8}, {0, 0, 16}}},
      {"plate_110x60_4h", 110.0, 60.0, {{-40, 0, 14}, {40, 0, 14}, {0, -17, 9}, {0, 17, 9}}},
  };
  return drawings;
}

const PartDrawing* nearest_drawing(double width_mm, double height_mm, double max_error_mm) {
  const PartDrawing* best = nullptr;
  double best_error = max_error_mm;
  for (const auto& d : part_drawings()) {
    const double error = std::max(std::abs(d.width_mm - width_mm), std::abs(d.height_mm - height_mm));
    if (error <= best_error) {
      best_error = error;
      best = &d;
    }
  }
  return best;
}

const PartDrawing* find_drawing(std::string_view name) {
  for (const auto& d : part_drawings()) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

std::vector<std::string> drawing_names() {
  std::vector<std::string> names;
  for (const auto& d : part_drawings()) names.push_back(d.name);
  return names;
}

}  // namespace swarmflow::inspection
