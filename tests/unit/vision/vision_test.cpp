#include <gtest/gtest.h>

#include <opencv2/imgproc.hpp>

#include <swarmflow/registry.hpp>

#include <swarmflow/schema/vision_generated.h>

#include "support/stage_runner.hpp"
#include "vision/frame_mat.hpp"
#include "vision/vision.hpp"

namespace swarmflow {
namespace {

using testing::StageRunner;

Registry vision_registry() {
  Registry r;
  register_vision_stages(r);
  return r;
}

/// A BGR test frame: a horizontal gradient with a white square at (40, 30).
Envelope test_frame(int w, int h, std::uint64_t index = 3) {
  flatbuffers::FlatBufferBuilder fbb;
  std::uint8_t* data = nullptr;
  auto px = fbb.CreateUninitializedVector(static_cast<std::size_t>(w * h * 3), &data);
  cv::Mat m(h, w, CV_8UC3, data);
  for (int x = 0; x < w; ++x) m.col(x).setTo(cv::Scalar(x % 256, 0, 255 - x % 256));
  cv::rectangle(m, cv::Rect(40, 30, 20, 20), cv::Scalar(255, 255, 255), cv::FILLED);
  auto cam = fbb.CreateString("cam0");
  auto truth = fbb.CreateString("{\"part_id\":7}");
  fbb.Finish(schema::CreateFrame(fbb, schema::PixelFormat::BGR, static_cast<std::uint32_t>(w),
                                 static_cast<std::uint32_t>(h), static_cast<std::uint32_t>(w * 3), 1234, cam, index, px,
                                 truth),
             schema::FrameIdentifier());
  EnvelopeHeader hdr;
  hdr.seq = index;
  hdr.part_id = 7;
  return Envelope(hdr, Payload::from_builder(fbb));
}

TEST(VisionConvert, ResizesAndConvertsToGray) {
  StageRunner r(vision_registry(), "vision.convert");
  ASSERT_TRUE(r.set("width", std::int64_t{80}).ok());
  ASSERT_TRUE(r.set("height", std::int64_t{60}).ok());
  ASSERT_TRUE(r.set("format", std::string("GRAY8")).ok());
  ASSERT_TRUE(r.start().ok());
  ASSERT_TRUE(r.feed("frames", test_frame(160, 120)).ok());
  ASSERT_EQ(r.output("frames").size(), 1U);
  const auto* f = r.output("frames")[0].as<schema::Frame>();
  EXPECT_EQ(f->width(), 80U);
  EXPECT_EQ(f->height(), 60U);
  EXPECT_EQ(f->format(), schema::PixelFormat::GRAY8);
  EXPECT_EQ(f->stride(), 80U);
  EXPECT_EQ(f->frame_index(), 3U);
  EXPECT_EQ(f->camera_id()->str(), "cam0");
  EXPECT_EQ(f->ground_truth()->str(), "{\"part_id\":7}");
  EXPECT_EQ(r.output("frames")[0].header().part_id, 7U);
  // The white square, scaled by half, is still white.
  EXPECT_GT(vision::view_of(*f).at<std::uint8_t>(20, 25), 240);
}

TEST(VisionCrop, CutsTheRegionAndClampsToTheFrame) {
  StageRunner r(vision_registry(), "vision.crop");
  ASSERT_TRUE(r.set("x", std::int64_t{40}).ok());
  ASSERT_TRUE(r.set("y", std::int64_t{30}).ok());
  ASSERT_TRUE(r.set("width", std::int64_t{500}).ok());
  ASSERT_TRUE(r.start().ok());
  ASSERT_TRUE(r.feed("frames", test_frame(160, 120)).ok());
  const auto* f = r.output("frames")[0].as<schema::Frame>();
  EXPECT_EQ(f->width(), 120U);
  EXPECT_EQ(f->height(), 90U);
  EXPECT_EQ(vision::view_of(*f).at<cv::Vec3b>(0, 0), cv::Vec3b(255, 255, 255));
}

TEST(VisionAnnotate, DrawsDefectBoxesOnACopyAndPassesPlainFramesOn) {
  StageRunner r(vision_registry(), "vision.annotate");
  ASSERT_TRUE(r.start().ok());
  // Without results the frame passes on untouched: the same payload.
  const Envelope frame = test_frame(160, 120);
  ASSERT_TRUE(r.feed("frames", frame).ok());
  ASSERT_EQ(r.output("frames").size(), 1U);
  EXPECT_EQ(r.output("frames")[0].payload().get(), frame.payload().get());

  flatbuffers::FlatBufferBuilder fbb;
  schema::Box box(100, 80, 30, 20);
  std::vector<flatbuffers::Offset<schema::Defect>> defects = {
      schema::CreateDefect(fbb, fbb.CreateString("scratch"), &box, 0.9F)};
  fbb.Finish(schema::CreateVisionResults(fbb, fbb.CreateString("cam0"), 3, 7, fbb.CreateVector(defects)),
             schema::VisionResultsIdentifier());
  const Envelope results(frame.header(), Payload::from_builder(fbb));
  std::vector<const Envelope*> set = {&frame, &results};
  Inputs in;
  in.reset_joined(&set, false);
  Outputs out;
  out.reset(frame.header());
  ASSERT_TRUE(r.stage().process(in, out, r).ok());
  ASSERT_EQ(out.items().size(), 1U);
  const auto* f = out.items()[0].envelope.as<schema::Frame>();
  const cv::Mat drawn = vision::view_of(*f);
  EXPECT_EQ(drawn.at<cv::Vec3b>(80, 115), cv::Vec3b(0, 0, 255)) << "the box's top edge is red";
  EXPECT_NE(vision::view_of(*frame.as<schema::Frame>()).at<cv::Vec3b>(80, 115), cv::Vec3b(0, 0, 255))
      << "the input frame is not drawn on";
}

}  // namespace
}  // namespace swarmflow
