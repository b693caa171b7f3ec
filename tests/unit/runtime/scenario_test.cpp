// `scenario:`: a unit's speed changes at its time in the run, and the
// stages on it see the new speed (sim.* stages scale their work by it).

#include <gtest/gtest.h>

#include <atomic>

#include <swarmflow/runtime.hpp>
#include <swarmflow/schema/blob_generated.h>

namespace swarmflow {
namespace {

std::atomic<std::int64_t> g_first_speed{0};  ///< x1000, at the first envelope
std::atomic<std::int64_t> g_last_speed{0};   ///< x1000, at the last

/// Records the speed its unit runs at, as the stage sees it.
class SpeedProbe final : public Stage {
 public:
  void setup(StageSpec& s) override { in_ = s.input<schema::Blob>("in"); }
  Status process(Inputs&, Outputs&, StageContext& ctx) override {
    const auto milli = static_cast<std::int64_t>(ctx.speed() * 1000 + 0.5);
    std::int64_t none = 0;
    g_first_speed.compare_exchange_strong(none, milli);
    g_last_speed.store(milli);
    return {};
  }

 private:
  InputPort<schema::Blob> in_;
};

TEST(Scenario, AUnitsSpeedChangesAtItsTimeAndItsStagesSeeIt) {
  Runtime rt;
  ASSERT_TRUE(rt.registry().add<SpeedProbe>("test.speed_probe", "records its unit's speed").ok());
  std::vector<Diagnostic> diags;
  // 300 envelopes at 500/s: 0.6 s; u0 slows to a quarter at 0.3 s.
  ASSERT_TRUE(rt.load_string("pipeline: scenario\nunits:\n  - {id: u0, speed: 1.0}\n"
                             "scenario:\n  - {at_s: 0.3, unit: u0, speed: 0.25}\n"
                             "stages:\n"
                             "  - {id: src, type: sim.source, params: {count: 300, rate_hz: 500}}\n"
                             "  - {id: probe, type: test.speed_probe, inputs: {in: src/out}}\n",
                             "scenario.yaml", &diags)
                  .ok())
      << format_diagnostics(diags);
  ASSERT_TRUE(rt.run().ok());
  EXPECT_EQ(g_first_speed.load(), 1000);
  EXPECT_EQ(g_last_speed.load(), 250);
}

}  // namespace
}  // namespace swarmflow
