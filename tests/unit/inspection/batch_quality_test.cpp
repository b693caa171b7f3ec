#include "inspection/batch_quality.hpp"

#include <gtest/gtest.h>

#include <swarmflow/schema/quality_generated.h>
#include <swarmflow/schema/vision_generated.h>

#include "support/stage_runner.hpp"
#include "video/synthetic_parts.hpp"

namespace swarmflow::inspection {
namespace {

using swarmflow::testing::StageRunner;

video::PartTruth truth_of(std::uint64_t part, int camera) {
  video::PartTruth t;
  t.part_id = part;
  t.camera = camera;
  t.width_mm = 120;
  t.height_mm = 80;
  t.holes = {video::HoleTruth{-30, 0, 10, false}, video::HoleTruth{30, 0, 12, false}};
  t.defects = {video::DefectTruth{"scratch", 100, 100, 60, 4}};
  return t;
}

struct Found {
  std::string cls;
  float x, y, w, h;
};

Envelope defects_result(std::uint64_t part, int camera, const std::vector<Found>& found,
                        const std::string& cannot_inspect = "") {
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<flatbuffers::Offset<schema::Defect>> defects;
  for (const auto& f : found) {
    schema::Box box(f.x, f.y, f.w, f.h);
    defects.push_back(schema::CreateDefect(fbb, fbb.CreateString(f.cls), &box, 0.9F));
  }
  auto camera_id = fbb.CreateString("cam" + std::to_string(camera));
  auto truth = fbb.CreateString(video::to_json(truth_of(part, camera)));
  auto list = fbb.CreateVector(defects);
  flatbuffers::Offset<flatbuffers::String> reason;
  if (!cannot_inspect.empty()) reason = fbb.CreateString(cannot_inspect);
  schema::VisionResultsBuilder b(fbb);
  if (!reason.IsNull()) b.add_cannot_inspect(reason);
  b.add_camera_id(camera_id);
  b.add_part_id(part);
  b.add_defects(list);
  b.add_ground_truth(truth);
  fbb.Finish(b.Finish(), schema::VisionResultsIdentifier());
  EnvelopeHeader h;
  h.part_id = part;
  return Envelope(h, Payload::from_builder(fbb));
}

Envelope measurement_result(std::uint64_t part, double width, bool in_tolerance) {
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<flatbuffers::Offset<schema::Measurement>> ms = {
      schema::CreateMeasurement(fbb, fbb.CreateString("width"), width, fbb.CreateString("mm"), 120, 0.2, in_tolerance),
      schema::CreateMeasurement(fbb, fbb.CreateString("hole_1"), 12.05, fbb.CreateString("mm"), 12, 0.2, true)};
  auto list = fbb.CreateVector(ms);
  auto truth = fbb.CreateString(video::to_json(truth_of(part, 0)));
  schema::VisionResultsBuilder b(fbb);
  b.add_part_id(part);
  b.add_measurements(list);
  b.add_ground_truth(truth);
  fbb.Finish(b.Finish(), schema::VisionResultsIdentifier());
  EnvelopeHeader h;
  h.part_id = part;
  return Envelope(h, Payload::from_builder(fbb));
}

TEST(BatchQuality, ReportsYieldParetoToleranceAndScoresPerBatch) {
  StageRunner r(std::make_unique<BatchQuality>(), "quality");
  ASSERT_TRUE(r.set("batch_parts", std::int64_t{2}).ok());
  ASSERT_TRUE(r.set("summary", false).ok());
  ASSERT_TRUE(r.start().ok());
  // Part 1: camera 0 finds the scratch, camera 1 misses it and sees a pit
  // that is not there; the width is out of tolerance.
  ASSERT_TRUE(r.feed("defects", defects_result(1, 0, {{"scratch", 102, 99, 55, 5}})).ok());
  ASSERT_TRUE(r.feed("defects", defects_result(1, 1, {{"pit", 400, 300, 6, 6}})).ok());
  EXPECT_TRUE(r.output("reports").empty()) << "part 1 waits for its measurement";
  ASSERT_TRUE(r.feed("measurements", measurement_result(1, 120.5, false)).ok());
  // Part 2: both cameras find the scratch; in tolerance.
  ASSERT_TRUE(r.feed("measurements", measurement_result(2, 120.02, true)).ok());
  ASSERT_TRUE(r.feed("defects", defects_result(2, 0, {{"scratch", 100, 100, 60, 4}})).ok());
  ASSERT_TRUE(r.feed("defects", defects_result(2, 1, {{"scratch", 98, 101, 62, 3}})).ok());
  ASSERT_EQ(r.output("reports").size(), 1U);
  const auto* report = r.output("reports")[0].as<schema::BatchReport>();
  EXPECT_EQ(report->parts(), 2U);
  EXPECT_EQ(report->passed(), 0U) << "both parts have defects";
  ASSERT_EQ(report->out_of_tolerance()->size(), 1U);
  EXPECT_EQ(report->out_of_tolerance()->Get(0), 1U);
  ASSERT_EQ(report->defects_by_class()->size(), 2U);
  EXPECT_EQ(report->defects_by_class()->Get(0)->name()->str(), "scratch");  // Pareto order
  EXPECT_EQ(report->defects_by_class()->Get(0)->count(), 3U);
  const auto& s = r.stage();
  const auto& scores = dynamic_cast<const BatchQuality&>(s).scores();
  EXPECT_EQ(scores.at("scratch").true_positives, 3U);
  EXPECT_EQ(scores.at("scratch").false_negatives, 1U);
  EXPECT_EQ(scores.at("pit").false_positives, 1U);
  EXPECT_NEAR(report->measurement_error_mm_max(), 0.5, 1e-9);
  EXPECT_EQ(r.counter_value("parts"), 2);
}

TEST(BatchQuality, IncompletePartsEndInAPartialLastBatch) {
  StageRunner r(std::make_unique<BatchQuality>(), "quality");
  ASSERT_TRUE(r.set("summary", false).ok());
  ASSERT_TRUE(r.set("measured", false).ok());
  ASSERT_TRUE(r.start().ok());
  ASSERT_TRUE(r.feed("defects", defects_result(5, 0, {})).ok());
  r.stop();
  const auto& q = dynamic_cast<const BatchQuality&>(r.stage());
  EXPECT_EQ(q.parts(), 1U);
  EXPECT_EQ(q.passed(), 1U);
}

TEST(BatchQuality, APartThatCannotBeInspectedGetsNoVerdict) {
  StageRunner r(std::make_unique<BatchQuality>(), "quality");
  ASSERT_TRUE(r.set("batch_parts", std::int64_t{3}).ok());
  ASSERT_TRUE(r.set("summary", false).ok());
  ASSERT_TRUE(r.set("measured", false).ok());
  ASSERT_TRUE(r.start().ok());
  // Part 7: one camera could not inspect its frame; the other saw nothing.
  // Part 8: clean. Part 9: a scratch found.
  ASSERT_TRUE(r.feed("defects", defects_result(7, 0, {}, "specular glare over 20.0 % of the surface")).ok());
  ASSERT_TRUE(r.feed("defects", defects_result(7, 1, {})).ok());
  ASSERT_TRUE(r.feed("defects", defects_result(8, 0, {})).ok());
  ASSERT_TRUE(r.feed("defects", defects_result(8, 1, {})).ok());
  ASSERT_TRUE(r.feed("defects", defects_result(9, 0, {{"scratch", 100, 100, 60, 4}})).ok());
  ASSERT_TRUE(r.feed("defects", defects_result(9, 1, {{"scratch", 100, 100, 60, 4}})).ok());
  ASSERT_EQ(r.output("reports").size(), 1U);
  const auto* report = r.output("reports")[0].as<schema::BatchReport>();
  EXPECT_EQ(report->parts(), 3U);
  EXPECT_EQ(report->not_inspected(), 1U);
  EXPECT_EQ(report->passed(), 1U) << "part 7 is neither passed nor failed";
  EXPECT_DOUBLE_EQ(report->yield(), 0.5) << "yield is over the inspected parts";
  ASSERT_EQ(report->not_inspected_by_reason()->size(), 1U);
  EXPECT_EQ(report->not_inspected_by_reason()->Get(0)->name()->str(), "specular glare");
  const auto& q = dynamic_cast<const BatchQuality&>(r.stage());
  EXPECT_EQ(q.not_inspected(), 1U);
  // The frame that was not inspected is not scored: its true scratch is no
  // false negative. Part 7's camera 1 and part 8's two cameras missed theirs.
  EXPECT_EQ(q.scores().at("scratch").false_negatives, 3U);
}

}  // namespace
}  // namespace swarmflow::inspection
