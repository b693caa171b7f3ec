// The inspection pipeline over four units in one process: batch_quality sees
// every part of every station exactly once, and the ground truth it counts is
// the truth the cameras rendered.

#include <gtest/gtest.h>

#include <map>
#include <mutex>

#include <swarmflow/runtime.hpp>
#include <swarmflow/schema/quality_generated.h>

#include "support/media_packs.hpp"
#include "video/synthetic_parts.hpp"

namespace swarmflow {
namespace {

constexpr int kFrames = 8;
constexpr int kStations = 4;

std::string pipeline() {
  // Unpaced cameras and blocking queues: nothing is dropped, so every part
  // must be complete.
  const std::string source_params =
      "width: 960, height: 540, fps: 0, count: " + std::to_string(kFrames);
  return "pipeline: inspection-units\nunits: 4\nstages:\n"
         "  - {id: cam_a, type: video.source, replicas: 4, placement: {spread: true},\n"
         "     params: {uri: \"synthetic://parts?seed=11&camera=0&mm_per_px=0.2\", " + source_params + "}}\n"
         "  - {id: cam_b, type: video.source, replicas: 4, placement: {spread: true},\n"
         "     params: {uri: \"synthetic://parts?seed=11&camera=1&mm_per_px=0.2\", " + source_params + "}}\n"
         "  - {id: detect, type: inspection.defects, replicas: 4, key: stream,\n"
         "     inputs: {frames: [cam_a/frames, cam_b/frames]}, params: {mm_per_px: 0.2}, queue: {capacity: 2}}\n"
         "  - {id: measure, type: inspection.measure, replicas: 4, key: part_id,\n"
         "     inputs: {a: cam_a/frames, b: cam_b/frames}, join: {key: part_id, timeout_ms: 60000},\n"
         "     params: {mm_per_px: 0.2}, queue: {capacity: 2}}\n"
         "  - {id: quality, type: inspection.batch_quality, inputs: {defects: detect/results, measurements: measure/results},\n"
         "     params: {batch_parts: 8, summary: false}, queue: {capacity: 16}}\n";
}

TEST(InspectionAcrossUnits, BatchQualityCountsEveryPartAndTheTrueDefects) {
  Runtime rt;
  swarmflow::testing::register_media_packs(rt.registry());
  std::vector<Diagnostic> diags;
  ASSERT_TRUE(rt.load_string(pipeline(), "inspection-units.yaml", &diags).ok()) << format_diagnostics(diags);
  std::mutex m;
  std::uint64_t parts = 0;
  std::uint64_t partial = 0;
  std::map<std::string, std::uint64_t> truth_seen;  // TP + FN per class, as batch_quality counted it
  std::map<std::string, std::uint64_t> found;       // detections per class
  ASSERT_TRUE(rt.subscribe("quality/reports", [&](const Envelope& e) {
                  const auto* r = e.as<schema::BatchReport>();
                  std::lock_guard<std::mutex> lock(m);
                  parts += r->parts();
                  partial += r->partial_parts();
                  for (const auto* c : *r->defects_by_class()) found[c->name()->str()] += c->count();
                  for (const auto* s : *r->scores()) {
                    truth_seen[s->name()->str()] += s->true_positives() + s->false_negatives();
                  }
                }).ok());
  Status s = rt.run();
  ASSERT_TRUE(s.ok()) << s.message();
  RunReport report = rt.report();
  for (const auto& e : report.edges) EXPECT_EQ(e.dropped, 0U) << e.from << " -> " << e.to;
  ASSERT_EQ(report.units.size(), 4U);
  for (const auto& u : report.units) EXPECT_GT(u.received, 0U) << u.id << " took part";

  // The truth the cameras rendered, per class, over both cameras of every station.
  std::map<std::string, std::uint64_t> truth;
  for (int station = 0; station < kStations; ++station) {
    for (int camera = 0; camera < 2; ++camera) {
      video::SyntheticPartsConfig cfg;
      std::string error;
      ASSERT_TRUE(video::parse_synthetic_uri("synthetic://parts?seed=11&camera=" + std::to_string(camera) +
                                                 "&mm_per_px=0.2&width=960&height=540",
                                             &cfg, &error))
          << error;
      cfg.station = station;
      const video::SyntheticParts cam(cfg);
      for (int i = 0; i < kFrames; ++i) {
        for (const auto& d : cam.truth(static_cast<std::uint64_t>(i)).defects) ++truth[d.class_name];
      }
    }
  }
  EXPECT_EQ(parts, static_cast<std::uint64_t>(kFrames * kStations));
  EXPECT_EQ(partial, 0U);
  EXPECT_EQ(truth_seen, truth) << "batch_quality counted the true defects of every frame of every unit";
  std::uint64_t total_found = 0;
  for (const auto& [cls, n] : found) total_found += n;
  EXPECT_GT(total_found, 0U);
}

}  // namespace
}  // namespace swarmflow
