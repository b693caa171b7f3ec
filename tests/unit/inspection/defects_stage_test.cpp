// inspection.defects on the synthetic camera: precision and recall per class
// against the ground truth, at 960x540 (0.2 mm/px) and 1920x1080 (0.1 mm/px),
// and its behaviour on frames without ground truth, grey frames and bad frames.

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "inspection_test_support.hpp"

namespace swarmflow {
namespace {

using inspection_test::inspection_registry;
using inspection_test::render_frame;
using inspection_test::Tally;
using testing::StageRunner;

constexpr std::uint64_t kSeed = 2024;

video::SyntheticPartsConfig camera_config(int station, int camera, int width, int height, double mm_per_px,
                                          std::uint64_t seed = kSeed) {
  video::SyntheticPartsConfig c;
  c.seed = seed;
  c.station = station;
  c.camera = camera;
  c.width = width;
  c.height = height;
  c.mm_per_px = mm_per_px;
  c.defect_rate = 0.9;  // more defects per frame than the pipeline's 0.6, for a shorter test
  return c;
}

std::unique_ptr<StageRunner> defects_stage(double mm_per_px) {
  auto runner = std::make_unique<StageRunner>(inspection_registry(), "inspection.defects", "detect");
  EXPECT_TRUE(runner->set("mm_per_px", mm_per_px).ok());
  const Status s = runner->start();
  EXPECT_TRUE(s.ok()) << s.message();
  return runner;
}

/// Renders `frames` frames of each camera of `stations` stations, runs the
/// stage on them and tallies its findings per class.
std::map<std::string, Tally> evaluate(int stations, int frames, int width, int height, double mm_per_px,
                                      double* detect_ms, std::uint64_t seed = kSeed) {
  std::map<std::string, Tally> tallies;
  auto stage = defects_stage(mm_per_px);
  double ms = 0;
  int steps = 0;
  for (int station = 0; station < stations; ++station) {
    for (int cam = 0; cam < 2; ++cam) {
      const video::SyntheticParts camera(camera_config(station, cam, width, height, mm_per_px, seed));
      for (int i = 0; i < frames; ++i) {
        video::PartTruth truth;
        const Envelope frame = render_frame(camera, static_cast<std::uint64_t>(i), true, &truth);
        const std::size_t before = stage->output("results").size();
        const auto start = std::chrono::steady_clock::now();
        const Status s = stage->feed("frames", frame);
        ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
        ++steps;
        EXPECT_TRUE(s.ok()) << s.message();
        const auto& out = stage->output("results");
        if (out.size() != before + 1) {
          ADD_FAILURE() << "no result for frame " << i;
          continue;
        }
        const auto* r = out.back().as<schema::VisionResults>();
        inspection_test::tally(*r, truth, &tallies);
      }
    }
  }
  stage->stop();
  *detect_ms = ms / std::max(1, steps);
  return tallies;
}

void print(const std::string& title, const std::map<std::string, Tally>& tallies, double detect_ms) {
  std::cout << "[inspection.defects] " << title << ", " << detect_ms << " ms/frame\n";
  std::printf("  %-13s %6s %4s %4s %4s %9s %7s %6s\n", "class", "truth", "TP", "FP", "FN", "precision", "recall", "F1");
  for (const auto& [cls, t] : tallies) {
    std::printf("  %-13s %6d %4d %4d %4d %9.3f %7.3f %6.3f\n", cls.c_str(), t.truths, t.true_positives,
                t.false_positives, t.false_negatives, t.precision(), t.recall(), t.f1());
  }
  std::fflush(stdout);
}

TEST(DefectsStage, PrecisionAndRecallPerClassAt960x540) {
  double detect_ms = 0;
  const auto tallies = evaluate(4, 40, 960, 540, 0.2, &detect_ms);
  print("960x540 at 0.2 mm/px, 4 stations x 2 cameras x 40 frames", tallies, detect_ms);
  for (const char* cls : {"scratch", "pit", "crack", "missing_hole"}) {
    ASSERT_TRUE(tallies.count(cls)) << cls;
    const Tally& t = tallies.at(cls);
    EXPECT_GE(t.truths, 40) << cls;
    EXPECT_GE(t.precision(), 0.95) << cls;
    EXPECT_GE(t.recall(), 0.95) << cls;
  }
  for (const auto& [cls, t] : tallies) {
    EXPECT_TRUE(cls == "scratch" || cls == "pit" || cls == "crack" || cls == "missing_hole") << cls;
  }
}

TEST(DefectsStage, PrecisionAndRecallAt1080p) {
  double detect_ms = 0;
  const auto tallies = evaluate(2, 12, 1920, 1080, 0.1, &detect_ms);
  print("1920x1080 at 0.1 mm/px, 2 stations x 2 cameras x 12 frames", tallies, detect_ms);
  Tally all;
  for (const auto& [cls, t] : tallies) {
    all.truths += t.truths;
    all.true_positives += t.true_positives;
    all.false_positives += t.false_positives;
    all.false_negatives += t.false_negatives;
  }
  EXPECT_GE(all.truths, 60);
  EXPECT_GE(all.precision(), 0.95);
  EXPECT_GE(all.recall(), 0.95);
}

// A longer run over eight more seeds (about two minutes), for the figures in
// docs/inspection.md: --gtest_also_run_disabled_tests --gtest_filter='*SeedSweep*'.
TEST(DefectsStage, DISABLED_SeedSweep) {
  for (const auto& [width, height, mm_per_px, frames] :
       {std::tuple{960, 540, 0.2, 60}, std::tuple{1920, 1080, 0.1, 12}}) {
    std::map<std::string, Tally> total;
    double ms_sum = 0;
    for (std::uint64_t seed = 1; seed <= 8; ++seed) {
      double ms = 0;
      for (const auto& [cls, t] : evaluate(4, frames, width, height, mm_per_px, &ms, seed)) {
        Tally& sum = total[cls];
        sum.truths += t.truths;
        sum.true_positives += t.true_positives;
        sum.false_positives += t.false_positives;
        sum.false_negatives += t.false_negatives;
      }
      ms_sum += ms;
    }
    print(std::to_string(width) + "x" + std::to_string(height) + ", seeds 1-8 x 4 stations x 2 cameras x " +
              std::to_string(frames) + " frames",
          total, ms_sum / 8);
    for (const auto& [cls, t] : total) {
      EXPECT_GE(t.precision(), 0.95) << cls;
      EXPECT_GE(t.recall(), 0.95) << cls;
    }
  }
}

TEST(DefectsStage, ResultCarriesTheFrameIdentityAndGroundTruth) {
  auto stage = defects_stage(0.2);
  const video::SyntheticParts camera(camera_config(1, 1, 960, 540, 0.2));
  video::PartTruth truth;
  const Envelope frame = render_frame(camera, 6, true, &truth);
  ASSERT_TRUE(stage->feed("frames", frame).ok());
  ASSERT_EQ(stage->output("results").size(), 1U);
  const Envelope& e = stage->output("results")[0];
  EXPECT_EQ(e.header().part_id, truth.part_id);
  EXPECT_EQ(e.header().stream, frame.header().stream);
  EXPECT_EQ(e.header().seq, 6U);
  const auto* r = e.as<schema::VisionResults>();
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->camera_id()->str(), "s1c1");
  EXPECT_EQ(r->frame_index(), 6U);
  EXPECT_EQ(r->part_id(), truth.part_id);
  EXPECT_EQ(r->station(), 1);
  EXPECT_FALSE(r->partial());
  ASSERT_NE(r->ground_truth(), nullptr);
  EXPECT_EQ(r->ground_truth()->str(), video::to_json(truth));
  for (const auto* d : *r->defects()) {
    EXPECT_GT(d->score(), 0.0F);
    EXPECT_LE(d->score(), 1.0F);
  }
  EXPECT_EQ(stage->counter_value("frames"), 1);
}

TEST(DefectsStage, WorksWithoutGroundTruth) {
  auto stage = defects_stage(0.2);
  const video::SyntheticParts camera(camera_config(2, 0, 960, 540, 0.2));
  int found = 0;
  for (std::uint64_t i = 0; i < 8; ++i) {
    video::PartTruth truth;
    const Envelope with = render_frame(camera, i, true, &truth);
    const Envelope without = render_frame(camera, i, false);
    ASSERT_TRUE(stage->feed("frames", with).ok());
    ASSERT_TRUE(stage->feed("frames", without).ok());
    const auto& out = stage->output("results");
    const auto* a = out[out.size() - 2].as<schema::VisionResults>();
    const auto* b = out.back().as<schema::VisionResults>();
    EXPECT_EQ(b->ground_truth(), nullptr);
    EXPECT_EQ(b->part_id(), truth.part_id);
    EXPECT_EQ(b->station(), 2);                             // from the part id
    ASSERT_EQ(a->defects()->size(), b->defects()->size());  // the truth is never used to decide
    found += static_cast<int>(b->defects()->size());
  }
  EXPECT_GT(found, 0);
}

TEST(DefectsStage, GreyFramesGiveTheSameFindings) {
  auto stage = defects_stage(0.2);
  const video::SyntheticParts camera(camera_config(0, 1, 960, 540, 0.2));
  const Envelope bgr = render_frame(camera, 3, true);
  const auto* f = bgr.as<schema::Frame>();
  // The same frame as GRAY8 (the camera is monochrome, so BGR -> grey is exact).
  flatbuffers::FlatBufferBuilder fbb;
  std::uint8_t* grey = nullptr;
  const auto data = fbb.CreateUninitializedVector(960 * 540, &grey);
  for (std::size_t i = 0; i < 960 * 540; ++i) grey[i] = f->pixels()->Get(static_cast<flatbuffers::uoffset_t>(3 * i));
  fbb.Finish(schema::CreateFrame(fbb, schema::PixelFormat::GRAY8, 960, 540, 960, 0, 0, 3, data),
             schema::FrameIdentifier());
  const Envelope gray_frame(bgr.header(), Payload::from_builder(fbb));
  ASSERT_TRUE(stage->feed("frames", bgr).ok());
  ASSERT_TRUE(stage->feed("frames", gray_frame).ok());
  const auto* a = stage->output("results")[0].as<schema::VisionResults>();
  const auto* b = stage->output("results")[1].as<schema::VisionResults>();
  ASSERT_EQ(a->defects()->size(), b->defects()->size());
  for (flatbuffers::uoffset_t i = 0; i < a->defects()->size(); ++i) {
    EXPECT_EQ(a->defects()->Get(i)->class_name()->str(), b->defects()->Get(i)->class_name()->str());
  }
}

TEST(DefectsStage, MalformedFrameFailsTheStepAndIsCounted) {
  auto stage = defects_stage(0.1);
  flatbuffers::FlatBufferBuilder fbb;
  const std::vector<std::uint8_t> few(100, 128);
  fbb.Finish(schema::CreateFrameDirect(fbb, schema::PixelFormat::BGR, 640, 480, 1920, 0, nullptr, 0, &few),
             schema::FrameIdentifier());
  const Envelope bad(EnvelopeHeader{}, Payload::from_builder(fbb));
  const Status s = stage->feed("frames", bad);
  EXPECT_TRUE(s.is_error());
  EXPECT_TRUE(stage->output("results").empty());
  EXPECT_EQ(stage->counter_value("bad_frames"), 1);
}

TEST(DefectsStage, EmptyBeltGivesNoDefects) {
  auto stage = defects_stage(0.1);
  flatbuffers::FlatBufferBuilder fbb;
  std::uint8_t* px = nullptr;
  const auto data = fbb.CreateUninitializedVector(320 * 240, &px);
  for (std::size_t i = 0; i < 320 * 240; ++i) px[i] = static_cast<std::uint8_t>(40 + (i * 7919) % 9);
  fbb.Finish(schema::CreateFrame(fbb, schema::PixelFormat::GRAY8, 320, 240, 320, 0, 0, 0, data),
             schema::FrameIdentifier());
  ASSERT_TRUE(stage->feed("frames", Envelope(EnvelopeHeader{}, Payload::from_builder(fbb))).ok());
  ASSERT_EQ(stage->output("results").size(), 1U);
  const auto* r = stage->output("results")[0].as<schema::VisionResults>();
  EXPECT_EQ(r->defects()->size(), 0U);
  EXPECT_EQ(r->station(), -1);
  EXPECT_EQ(stage->counter_value("no_plate"), 1);
  // No plate, no verdict: the frame is flagged, not passed.
  ASSERT_NE(r->cannot_inspect(), nullptr);
  EXPECT_NE(r->cannot_inspect()->str().find("no plate"), std::string::npos);
}

}  // namespace
}  // namespace swarmflow
