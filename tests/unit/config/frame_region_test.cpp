// A region a stage reads (vision.crop) that lies outside the frames its
// producer declares (video.source, vision.convert, vision.crop with a width
// and height) is refused when the pipeline is loaded, at the parameter that
// puts it there; where the size is not declared nothing is assumed.

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include <swarmflow/registry.hpp>

#include "config/pipeline_spec.hpp"
#include "sim/sim.hpp"
#include "video/video.hpp"
#include "vision/vision.hpp"

namespace swarmflow {
namespace {

class FrameRegionTest : public ::testing::Test {
 protected:
  FrameRegionTest() {
    register_sim_stages(registry_);
    register_video_stages(registry_);
    register_vision_stages(registry_);
  }

  /// The camera (`camera_params`) -> vision.crop (`crop_params`) -> a sink.
  std::optional<config::PipelineSpec> load(const std::string& camera_params, const std::string& crop_params) {
    diagnostics_.clear();
    const std::string yaml =
        "pipeline: crop\n"
        "stages:\n"
        "  - {id: cam, type: video.source, params: {" + camera_params + "}}\n"
        "  - {id: crop, type: vision.crop, inputs: {frames: cam/frames}, params: {" + crop_params + "}}\n"
        "  - {id: out, type: video.sink, inputs: {frames: crop/frames}}\n";
    return config::load_pipeline_string(yaml, "crop.yaml", registry_, diagnostics_);
  }

  Registry registry_;
  std::vector<Diagnostic> diagnostics_;
};

TEST_F(FrameRegionTest, ARegionThatStartsOutsideTheDeclaredFramesIsRefusedAtItsX) {
  EXPECT_FALSE(load("uri: \"test://smpte\", width: 320, height: 240", "x: 2000, width: 100").has_value());
  ASSERT_EQ(diagnostics_.size(), 1U) << format_diagnostics(diagnostics_);
  const Diagnostic& d = diagnostics_.front();
  EXPECT_EQ(d.line, 4);
  EXPECT_EQ(d.column, 77);  // the value of x
  EXPECT_NE(d.message.find("the region of stage 'crop' starts at x 2000, y 0, outside the 320x240 frames of "
                           "'cam/frames'"),
            std::string::npos)
      << d.message;
}

TEST_F(FrameRegionTest, ARegionThatRunsOverAnEdgeIsRefusedAtItsWidthOrHeight) {
  EXPECT_FALSE(load("width: 320, height: 240", "x: 300, y: 200, width: 100, height: 40").has_value());
  ASSERT_EQ(diagnostics_.size(), 1U) << format_diagnostics(diagnostics_);
  EXPECT_NE(diagnostics_[0].message.find("ends at x + width = 400, beyond the right edge"), std::string::npos)
      << diagnostics_[0].message;

  EXPECT_FALSE(load("width: 320, height: 240", "x: 0, y: 200, width: 100, height: 41").has_value());
  ASSERT_EQ(diagnostics_.size(), 1U) << format_diagnostics(diagnostics_);
  EXPECT_NE(diagnostics_[0].message.find("ends at y + height = 241, beyond the bottom edge"), std::string::npos)
      << diagnostics_[0].message;
}

TEST_F(FrameRegionTest, ARegionInsideOrToTheEdgeIsAccepted) {
  EXPECT_TRUE(load("width: 320, height: 240", "x: 220, y: 140, width: 100, height: 100").has_value())
      << format_diagnostics(diagnostics_);
  EXPECT_TRUE(load("width: 320, height: 240", "x: 319, y: 239").has_value()) << format_diagnostics(diagnostics_);
}

TEST_F(FrameRegionTest, AnUndeclaredSizeIsNotGuessed) {
  // width 0: as the source gives, unknown until it runs (checked then).
  EXPECT_TRUE(load("uri: \"test://smpte\"", "x: 2000").has_value()) << format_diagnostics(diagnostics_);
  EXPECT_TRUE(load("width: 320", "x: 2000").has_value()) << format_diagnostics(diagnostics_);
}

TEST_F(FrameRegionTest, ACropDeclaresTheSizeOfWhatItEmits) {
  diagnostics_.clear();
  const std::string yaml =
      "pipeline: crops\n"
      "stages:\n"
      "  - {id: cam, type: video.source, params: {width: 640, height: 480}}\n"
      "  - {id: big, type: vision.crop, inputs: {frames: cam/frames}, params: {width: 200, height: 200}}\n"
      "  - {id: small, type: vision.crop, inputs: {frames: big/frames}, params: {x: 150, width: 100}}\n"
      "  - {id: out, type: video.sink, inputs: {frames: small/frames}}\n";
  EXPECT_FALSE(config::load_pipeline_string(yaml, "crops.yaml", registry_, diagnostics_).has_value());
  ASSERT_EQ(diagnostics_.size(), 1U) << format_diagnostics(diagnostics_);
  EXPECT_EQ(diagnostics_[0].line, 5);
  EXPECT_NE(diagnostics_[0].message.find("the 200x200 frames of 'big/frames'"), std::string::npos)
      << diagnostics_[0].message;
}

}  // namespace
}  // namespace swarmflow
