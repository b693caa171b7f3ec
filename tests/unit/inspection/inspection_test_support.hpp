#pragma once
// Helpers of the inspection tests: frames rendered by the synthetic camera,
// detections matched to the ground truth, stages driven on joined sets.

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <swarmflow/schema/frame_generated.h>
#include <swarmflow/schema/vision_generated.h>

#include "inspection/inspection.hpp"
#include "support/stage_runner.hpp"
#include "video/synthetic_parts.hpp"

namespace swarmflow::inspection_test {

/// The inspection pack on its own.
inline const Registry& inspection_registry() {
  static const Registry registry = [] {
    Registry r;
    register_inspection_stages(r);
    return r;
  }();
  return registry;
}

/// Frame `index` of `camera`, rendered straight into the payload as
/// video.source does, with its ground truth when `with_truth`.
inline Envelope render_frame(const video::SyntheticParts& camera, std::uint64_t index, bool with_truth,
                             video::PartTruth* truth_out = nullptr) {
  const auto& c = camera.config();
  const std::size_t stride = static_cast<std::size_t>(c.width) * 3;
  flatbuffers::FlatBufferBuilder fbb(stride * static_cast<std::size_t>(c.height) + 4096);
  const auto id = fbb.CreateString("s" + std::to_string(c.station) + "c" + std::to_string(c.camera));
  std::uint8_t* pixels = nullptr;
  const auto data = fbb.CreateUninitializedVector(stride * static_cast<std::size_t>(c.height), &pixels);
  const video::PartTruth truth = camera.render(index, pixels, stride);
  flatbuffers::Offset<flatbuffers::String> json;
  if (with_truth) json = fbb.CreateString(video::to_json(truth));
  const auto frame = schema::CreateFrame(fbb, schema::PixelFormat::BGR, static_cast<std::uint32_t>(c.width),
                                         static_cast<std::uint32_t>(c.height), static_cast<std::uint32_t>(stride), 0,
                                         id, index, data, json);
  schema::FinishFrameBuffer(fbb, frame);
  EnvelopeHeader header;
  header.stream = static_cast<std::uint64_t>(c.station * 2 + c.camera);
  header.seq = index;
  header.part_id = truth.part_id;
  if (truth_out != nullptr) *truth_out = truth;
  return Envelope(header, Payload::from_builder(fbb));
}

/// A detection box against a true one: IoU >= 0.3, or the detection's centre
/// inside the true box grown by `grow` pixels.
inline bool matches(const schema::Box& d, const video::DefectTruth& t, float grow = 4.0F) {
  const float ix = std::max(0.0F, std::min(d.x() + d.width(), t.x + t.width) - std::max(d.x(), t.x));
  const float iy = std::max(0.0F, std::min(d.y() + d.height(), t.y + t.height) - std::max(d.y(), t.y));
  const float inter = ix * iy;
  const float uni = d.width() * d.height() + t.width * t.height - inter;
  if (uni > 0 && inter / uni >= 0.3F) return true;
  const float cx = d.x() + d.width() / 2, cy = d.y() + d.height() / 2;
  return cx >= t.x - grow && cx <= t.x + t.width + grow && cy >= t.y - grow && cy <= t.y + t.height + grow;
}

/// Detection counts of one class. Matching is one to one: a second detection
/// of the same true defect is a false positive.
struct Tally {
  int truths = 0, true_positives = 0, false_positives = 0, false_negatives = 0;
  double precision() const {
    const int d = true_positives + false_positives;
    return d > 0 ? static_cast<double>(true_positives) / d : 1.0;
  }
  double recall() const { return truths > 0 ? static_cast<double>(true_positives) / truths : 1.0; }
  double f1() const {
    const double p = precision(), r = recall();
    return p + r > 0 ? 2 * p * r / (p + r) : 0.0;
  }
};

/// Adds one frame's results to `tallies` (by class), matching its defects to
/// `truth` greedily, most confident first.
inline void tally(const schema::VisionResults& results, const video::PartTruth& truth,
                  std::map<std::string, Tally>* tallies) {
  std::vector<const schema::Defect*> found;
  if (results.defects() != nullptr) {
    for (const auto* d : *results.defects()) found.push_back(d);
  }
  std::stable_sort(found.begin(), found.end(),
                   [](const schema::Defect* a, const schema::Defect* b) { return a->score() > b->score(); });
  std::vector<bool> taken(truth.defects.size(), false);
  for (const auto& t : truth.defects) ++(*tallies)[t.class_name].truths;
  for (const auto* d : found) {
    const std::string cls = d->class_name() != nullptr ? d->class_name()->str() : "";
    bool hit = false;
    for (std::size_t i = 0; i < truth.defects.size() && !hit; ++i) {
      if (taken[i] || truth.defects[i].class_name != cls || d->box() == nullptr) continue;
      if (matches(*d->box(), truth.defects[i])) hit = taken[i] = true;
    }
    Tally& t = (*tallies)[cls];
    if (hit) {
      ++t.true_positives;
    } else {
      ++t.false_positives;
    }
  }
  for (std::size_t i = 0; i < truth.defects.size(); ++i) {
    if (!taken[i]) ++(*tallies)[truth.defects[i].class_name].false_negatives;
  }
}

/// One step of a stage with joined inputs (`a`, `b`; null where missing).
inline std::vector<Envelope> step_joined(testing::StageRunner& runner, const Envelope* a, const Envelope* b,
                                         bool partial, Status* status) {
  std::vector<const Envelope*> by_port(runner.spec().inputs().size(), nullptr);
  by_port[static_cast<std::size_t>(runner.spec().input_index("a"))] = a;
  by_port[static_cast<std::size_t>(runner.spec().input_index("b"))] = b;
  Inputs in;
  in.reset_joined(&by_port, partial);
  Outputs out;
  out.reset((a != nullptr ? a : b)->header());
  *status = runner.stage().process(in, out, runner);
  std::vector<Envelope> emitted;
  for (auto& item : out.items()) emitted.push_back(item.envelope);
  return emitted;
}

/// The measurement called `name`, or null.
inline const schema::Measurement* find_measurement(const schema::VisionResults& r, const std::string& name) {
  if (r.measurements() == nullptr) return nullptr;
  for (const auto* m : *r.measurements()) {
    if (m->name() != nullptr && m->name()->str() == name) return m;
  }
  return nullptr;
}

}  // namespace swarmflow::inspection_test
