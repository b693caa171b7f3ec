#include "inspection/dimension_gauge.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "inspection/frame_image.hpp"
#include "inspection/part_drawings.hpp"
#include "inspection/plate_geometry.hpp"
#include "vision/camera_calibration.hpp"

namespace swarmflow::inspection {

namespace {

/// One camera's gauging of a plate, in millimetres.
struct PlateSize {
  double width_mm = 0, height_mm = 0;
  struct Hole {
    cv::Point2d position_mm;  ///< in the plate's own frame
    double diameter_mm = 0;
  };
  std::vector<Hole> holes;
};

constexpr double kMinHoleMm = 4.0;  ///< smaller dark regions are not holes

/// One camera's gauging; nothing when there is no plate, or when the plate
/// cannot be inspected (`*reason` then says why).
std::optional<PlateSize> gauge(const cv::Mat& grey, double mm_per_px, std::string* reason) {
  const PlateView view = find_plate(grey, kMinHoleMm / mm_per_px);
  if (!view.found) return std::nullopt;
  if (!view.cannot_inspect.empty()) {
    *reason = view.cannot_inspect;
    return std::nullopt;
  }
  const PlateGauge g = gauge_plate(grey, view);
  if (!g.ok) return std::nullopt;
  PlateSize size{g.width_px * mm_per_px, g.height_px * mm_per_px, {}};
  for (const auto& hole : g.holes) {
    if (!hole.ok) continue;
    size.holes.push_back(PlateSize::Hole{view.to_plate(hole.centre) * mm_per_px, hole.diameter_px * mm_per_px});
  }
  return size;
}

}  // namespace

void DimensionGauge::setup(StageSpec& s) {
  a_ = s.input<schema::Frame>("a", "frames of the station's first camera");
  b_ = s.input<schema::Frame>("b", "frames of the station's second camera");
  results_ = s.output<schema::VisionResults>("results", "outer size and hole diameters of each part, in mm");
  s.param(mm_per_px_, "mm_per_px", "scale at the plate, mm per pixel, of camera a (and of camera b unless it has its own)", 0.1,
          {0.005, 10.0});
  s.param(calibration_, "calibration",
          "calibration file (swarmflow calibrate) whose mm_per_px is used instead of mm_per_px; empty = none", "");
  s.param(mm_per_px_b_, "mm_per_px_b", "camera b's own scale, mm per pixel; 0 = camera a's", 0.0, {0.0, 10.0});
  s.param(calibration_b_, "calibration_b",
          "camera b's own calibration file, whose mm_per_px is camera b's scale; empty = none", "");
  s.param(tolerance_mm_, "tolerance_mm", "allowed deviation of the outer width and height, mm", 0.2, {0.0, 100.0});
  s.param(hole_tolerance_mm_, "hole_tolerance_mm", "allowed deviation of a hole's diameter, mm", 0.1, {0.0, 100.0});
  std::vector<std::string> variants = {"auto"};
  for (auto& name : drawing_names()) variants.push_back(name);
  s.param(variant_, "variant", "the part's drawing, or auto to take the drawing nearest in size", "auto",
          std::move(variants));
  s.param(drawing_tolerance_mm_, "drawing_tolerance_mm",
          "how far the measured size may be from a drawing's for variant auto, mm", 3.0, {0.0, 100.0});
  s.param(station_, "station", "the station reported; -1 takes it from the part id", -1, {-1.0, 1e6});
}

Status DimensionGauge::start(StageContext& ctx) {
  sets_ = &ctx.counter("sets");
  partial_sets_ = &ctx.counter("partial_sets");
  no_plate_ = &ctx.counter("no_plate");
  bad_frames_ = &ctx.counter("bad_frames");
  cannot_inspect_ = &ctx.counter("cannot_inspect");

  // Each camera's scale: its own calibration file, else its own mm_per_px,
  // else camera a's.
  auto scale_from = [](const std::string& path, double* mm_per_px) -> Status {
    vision::Calibration c;
    std::string error;
    if (!vision::read_calibration(path, &c, &error)) {
      return Status::error("inspection.measure: " + error, StatusCode::invalid_argument);
    }
    if (!(c.mm_per_px >= 0.005 && c.mm_per_px <= 10.0)) {
      return Status::error("inspection.measure: " + path +
                               " has no mm_per_px (its flat working-plane view was not found or was tilted); "
                               "calibrate again with the board flat on the working plane in the first frame, "
                               "or set mm_per_px and no calibration",
                           StatusCode::invalid_argument);
    }
    *mm_per_px = c.mm_per_px;
    return {};
  };
  scale_[0] = mm_per_px_;
  if (!calibration_.empty()) {
    if (Status s = scale_from(calibration_, &scale_[0]); !s.ok()) return s;
    mm_per_px_ = scale_[0];
  }
  scale_[1] = mm_per_px_b_ > 0 ? mm_per_px_b_ : scale_[0];
  if (!calibration_b_.empty()) {
    if (Status s = scale_from(calibration_b_, &scale_[1]); !s.ok()) return s;
  }
  return {};
}

Status DimensionGauge::process(Inputs& in, Outputs& out, StageContext& /*ctx*/) {
  const std::array<const schema::Frame*, 2> frames = {in.get(a_), in.get(b_)};
  const std::array<const Envelope*, 2> envelopes = {in.envelope(a_), in.envelope(b_)};
  const schema::Frame* first = frames[0] != nullptr ? frames[0] : frames[1];
  const Envelope* first_envelope = frames[0] != nullptr ? envelopes[0] : envelopes[1];
  if (first == nullptr || first_envelope == nullptr) return {};
  sets_->fetch_add(1, std::memory_order_relaxed);

  // -- each camera on its own ---------------------------------------------------------
  std::vector<PlateSize> sizes;
  std::string reasons;  // of the cameras whose plate cannot be inspected
  for (std::size_t k = 0; k < frames.size(); ++k) {
    const schema::Frame* frame = frames[k];
    if (frame == nullptr) continue;
    std::string error;
    const cv::Mat grey = grey_image(*frame, grey_, &error);
    if (grey.empty()) {
      bad_frames_->fetch_add(1, std::memory_order_relaxed);
      return Status::error("inspection.measure: " + error, StatusCode::invalid_argument);
    }
    std::string reason;
    auto size = gauge(grey, scale_[k], &reason);
    if (size) {
      sizes.push_back(std::move(*size));
    } else if (!reason.empty()) {
      const std::string camera = frame->camera_id() != nullptr ? frame->camera_id()->str() : std::string("camera");
      reasons += (reasons.empty() ? "" : "; ") + camera + ": " + reason;
    } else {
      no_plate_->fetch_add(1, std::memory_order_relaxed);
    }
  }
  const bool partial = in.partial() || sizes.size() < 2;
  if (partial) partial_sets_->fetch_add(1, std::memory_order_relaxed);

  // -- fused -------------------------------------------------------------------------------
  struct Value {
    std::string name;
    double value, nominal, tolerance;
    bool known;  ///< nominal comes from a drawing
  };
  std::vector<Value> values;
  if (!sizes.empty()) {
    double width = 0, height = 0;
    for (const auto& s : sizes) {
      width += s.width_mm;
      height += s.height_mm;
    }
    width /= static_cast<double>(sizes.size());
    height /= static_cast<double>(sizes.size());
    const PartDrawing* drawing =
        variant_ == "auto" ? nearest_drawing(width, height, drawing_tolerance_mm_) : find_drawing(variant_);
    values.push_back({"width", width, drawing != nullptr ? drawing->width_mm : 0.0, tolerance_mm_, drawing != nullptr});
    values.push_back(
        {"height", height, drawing != nullptr ? drawing->height_mm : 0.0, tolerance_mm_, drawing != nullptr});
    if (drawing != nullptr) {
      for (std::size_t k = 0; k < drawing->holes.size(); ++k) {
        const NominalHole& nominal = drawing->holes[k];
        const cv::Point2d where(nominal.x_mm, nominal.y_mm);
        const double reach = std::max(2.0, nominal.diameter_mm / 2);
        double sum = 0;
        int count = 0;
        for (const auto& s : sizes) {
          const PlateSize::Hole* best = nullptr;
          double best_distance = reach;
          for (const auto& h : s.holes) {
            const double d = cv::norm(h.position_mm - where);
            if (d < best_distance) {
              best_distance = d;
              best = &h;
            }
          }
          if (best != nullptr) {
            sum += best->diameter_mm;
            ++count;
          }
        }
        values.push_back({"hole_" + std::to_string(k) + "_diameter", count > 0 ? sum / count : 0.0, nominal.diameter_mm,
                          hole_tolerance_mm_, true});
      }
    } else {
      const PlateSize& s = sizes.front();
      for (std::size_t i = 0; i < s.holes.size(); ++i) {
        values.push_back(
            {"hole_" + std::to_string(i) + "_diameter", s.holes[i].diameter_mm, 0.0, hole_tolerance_mm_, false});
      }
    }
  }

  // -- the result -----------------------------------------------------------------------
  EnvelopeHeader header = first_envelope->header();
  int station = static_cast<int>(station_);
  std::uint64_t truth_part = 0;
  int truth_station = -1;
  read_truth_ids(first->ground_truth(), &truth_station, &truth_part);
  if (header.part_id == 0) header.part_id = truth_part;
  if (station < 0) station = station_of_part(header.part_id) >= 0 ? station_of_part(header.part_id) : truth_station;

  flatbuffers::FlatBufferBuilder fbb(1024);
  std::vector<flatbuffers::Offset<schema::Measurement>> measurements;
  for (const auto& v : values) {
    const bool in_tolerance = v.known && v.value > 0 && std::abs(v.value - v.nominal) <= v.tolerance;
    measurements.push_back(
        schema::CreateMeasurementDirect(fbb, v.name.c_str(), v.value, "mm", v.nominal, v.tolerance, in_tolerance));
  }
  const auto camera = fbb.CreateString("station-" + std::to_string(station));
  flatbuffers::Offset<flatbuffers::String> truth;
  if (first->ground_truth() != nullptr) truth = fbb.CreateString(first->ground_truth());
  // No camera gave a plate fit to gauge, and at least one said why: the
  // part gets no verdict, only the reason.
  flatbuffers::Offset<flatbuffers::String> not_inspected;
  if (sizes.empty()) {
    if (reasons.empty()) reasons = "no plate found in any camera";
    not_inspected = fbb.CreateString(reasons);
    cannot_inspect_->fetch_add(1, std::memory_order_relaxed);
  }
  const auto measurement_vector = fbb.CreateVector(measurements);
  schema::VisionResultsBuilder b(fbb);
  b.add_camera_id(camera);
  b.add_frame_index(first->frame_index());
  b.add_part_id(header.part_id);
  b.add_measurements(measurement_vector);
  b.add_partial(partial);
  b.add_station(station);
  if (!truth.IsNull()) b.add_ground_truth(truth);
  if (!not_inspected.IsNull()) b.add_cannot_inspect(not_inspected);
  fbb.Finish(b.Finish(), schema::VisionResultsIdentifier());
  out.emit(results_, Payload::from_builder(fbb), header);
  return {};
}

}  // namespace swarmflow::inspection
