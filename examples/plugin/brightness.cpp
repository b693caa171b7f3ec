// libswarmflow_example_plugin.so — a stage pack of one stage, loaded by the
// stock `swarmflow` command (`--plugin`, SWARMFLOW_PLUGIN_PATH or `plugins:`).
// docs/writing-a-stage.md walks through it.

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>

#include <swarmflow/plugin.hpp>
#include <swarmflow/schema/frame_generated.h>
#include <swarmflow/stage.hpp>

namespace {

namespace schema = swarmflow::schema;

/// example.brightness — input `frames` (Frame), output `frames` (Frame).
/// Every 8-bit sample becomes `gain * value + offset`, clamped to 0..255, in
/// a new frame with the same size, format and header fields.
///   gain (number, 0..16, default 1): factor applied to every sample.
///   offset (integer, -255..255, default 0): added after the gain.
///
/// ```yaml
///   - {id: bright, type: example.brightness, inputs: {frames: camera/frames}, params: {gain: 1.5}}
/// ```
class Brightness final : public swarmflow::Stage {
 public:
  void setup(swarmflow::StageSpec& s) override {
    in_ = s.input<schema::Frame>("frames", "frames to brighten or darken");
    out_ = s.output<schema::Frame>("frames", "the same frames, every sample scaled and shifted");
    s.param(gain_, "gain", "factor applied to every 8-bit sample", 1.0, {0.0, 16.0});
    s.param(offset_, "offset", "added to every sample after the gain", std::int64_t{0}, {-255.0, 255.0});
  }

  swarmflow::Status start(swarmflow::StageContext& ctx) override {
    // Precompute the 256 results once; a frame is then one table lookup per byte.
    for (int v = 0; v < 256; ++v) {
      const double x = std::round(gain_ * v + static_cast<double>(offset_));
      table_[v] = static_cast<std::uint8_t>(std::clamp(x, 0.0, 255.0));
    }
    frames_ = &ctx.counter("frames_brightened");
    return {};
  }

  swarmflow::Status process(swarmflow::Inputs& in, swarmflow::Outputs& out, swarmflow::StageContext&) override {
    const schema::Frame* frame = in.get(in_);
    if (frame == nullptr || frame->pixels() == nullptr) {
      return swarmflow::Status::error("a frame without pixels", swarmflow::StatusCode::invalid_argument);
    }
    const auto* pixels = frame->pixels();
    flatbuffers::FlatBufferBuilder fbb(pixels->size() + 256);
    // Pixels are written once, straight into the new payload.
    std::uint8_t* dst = nullptr;
    auto pixel_vec = fbb.CreateUninitializedVector(pixels->size(), &dst);
    for (flatbuffers::uoffset_t i = 0; i < pixels->size(); ++i) dst[i] = table_[pixels->Get(i)];
    auto camera = frame->camera_id() != nullptr ? fbb.CreateString(frame->camera_id()->str()) : 0;
    auto truth = frame->ground_truth() != nullptr ? fbb.CreateString(frame->ground_truth()->str()) : 0;
    schema::FrameBuilder b(fbb);
    b.add_format(frame->format());
    b.add_width(frame->width());
    b.add_height(frame->height());
    b.add_stride(frame->stride());
    b.add_capture_ns(frame->capture_ns());
    if (!camera.IsNull()) b.add_camera_id(camera);
    b.add_frame_index(frame->frame_index());
    b.add_pixels(pixel_vec);
    if (!truth.IsNull()) b.add_ground_truth(truth);
    fbb.Finish(b.Finish(), schema::FrameIdentifier());
    out.emit(out_, fbb);
    frames_->fetch_add(1, std::memory_order_relaxed);
    return {};
  }

 private:
  swarmflow::InputPort<schema::Frame> in_;
  swarmflow::OutputPort<schema::Frame> out_;
  double gain_ = 1.0;
  std::int64_t offset_ = 0;
  std::uint8_t table_[256] = {};
  std::atomic<std::int64_t>* frames_ = nullptr;
};

swarmflow::Status register_stages(swarmflow::Registry& registry) {
  return registry.add<Brightness>("example.brightness", "scales and shifts every 8-bit sample of frames");
}

}  // namespace

SWARMFLOW_PLUGIN("example", "1.0.0", register_stages)
