// pipelines/inspection-consensus.yaml: three detector replicas vote per
// frame, one of them lying confidently on every third frame; the quality
// report's precision and recall per class are those of one honest detector.

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include <swarmflow/runtime.hpp>
#include <swarmflow/schema/quality_generated.h>

#include "support/media_packs.hpp"

namespace swarmflow {
namespace {

struct Scores {
  std::map<std::string, std::array<std::uint64_t, 3>> by_class;  // TP, FP, FN
  std::uint64_t parts = 0;
};

std::string file_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

/// Runs `yaml` and sums the quality reports' scores.
Scores run(const std::string& yaml, RunReport* report) {
  Runtime rt;
  swarmflow::testing::register_media_packs(rt.registry());
  std::vector<Diagnostic> diags;
  EXPECT_TRUE(rt.load_string(yaml, "inspection-consensus.yaml", &diags).ok()) << format_diagnostics(diags);
  Scores scores;
  std::mutex m;
  EXPECT_TRUE(rt.subscribe("quality/reports", [&](const Envelope& e) {
                  const auto* r = e.as<schema::BatchReport>();
                  std::lock_guard<std::mutex> lock(m);
                  scores.parts += r->parts();
                  for (const auto* s : *r->scores()) {
                    auto& t = scores.by_class[s->name()->str()];
                    t[0] += s->true_positives();
                    t[1] += s->false_positives();
                    t[2] += s->false_negatives();
                  }
                }).ok());
  const Status s = rt.run();
  EXPECT_TRUE(s.ok()) << s.message();
  *report = rt.report();
  return scores;
}

std::int64_t counter(const StageReport* s, const std::string& name) {
  if (s == nullptr) return -1;
  auto it = s->counters.find(name);
  return it == s->counters.end() ? 0 : it->second;
}

TEST(InspectionConsensus, ALyingDetectorChangesNeitherPrecisionNorRecall) {
  const std::string voting = file_text(SWARMFLOW_SOURCE_DIR "/pipelines/inspection-consensus.yaml");
  ASSERT_FALSE(voting.empty());
  RunReport voted_report;
  const Scores voted = run(voting, &voted_report);

  // The same cameras, one honest detector, no vote.
  const std::string honest =
      "pipeline: inspection-honest\n"
      "stages:\n"
      "  - {id: cam_a, type: video.source, params: {uri: \"synthetic://parts?seed=7&camera=0&mm_per_px=0.2\",\n"
      "     width: 960, height: 540, fps: 0, count: 30}}\n"
      "  - {id: cam_b, type: video.source, params: {uri: \"synthetic://parts?seed=7&camera=1&mm_per_px=0.2\",\n"
      "     width: 960, height: 540, fps: 0, count: 30}}\n"
      "  - {id: detect, type: inspection.defects, inputs: {frames: [cam_a/frames, cam_b/frames]},\n"
      "     params: {mm_per_px: 0.2}}\n"
      "  - {id: quality, type: inspection.batch_quality, inputs: {defects: detect/results},\n"
      "     params: {batch_parts: 10, cameras_per_part: 2, measured: false, summary: false}}\n";
  RunReport honest_report;
  const Scores single = run(honest, &honest_report);

  ASSERT_EQ(single.parts, 30U);
  EXPECT_EQ(voted.parts, 30U);
  ASSERT_FALSE(single.by_class.empty());
  EXPECT_EQ(voted.by_class, single.by_class);
  // The liar did lie, and the vote says so.
  EXPECT_EQ(counter(voted_report.stage("detect"), "lies"), 20);  // every 3rd of its 60 frames
  ASSERT_EQ(voted_report.consensus.size(), 1U);
  const ConsensusReport& c = voted_report.consensus[0];
  EXPECT_EQ(c.decisions, 60U);
  EXPECT_EQ(c.checked, 60U);
  EXPECT_EQ(c.wrong, 0U);
  EXPECT_EQ(c.without_quorum, 0U);
}

}  // namespace
}  // namespace swarmflow
