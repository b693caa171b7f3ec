// sim.source tells its length through the `expected` counter when it has one.

#include <gtest/gtest.h>

#include "sim/sim.hpp"
#include "support/stage_runner.hpp"

namespace swarmflow {
namespace {

using testing::StageRunner;

const Registry& sim_registry() {
  static const Registry registry = [] {
    Registry r;
    register_sim_stages(r);
    return r;
  }();
  return registry;
}

TEST(SimSource, ExpectedCounterIsItsCount) {
  StageRunner counted(sim_registry(), "sim.source", "src");
  ASSERT_TRUE(counted.set("count", std::int64_t{25}).ok());
  ASSERT_TRUE(counted.start().ok());
  EXPECT_EQ(counted.counter_value("expected"), 25);
  // A restart does not add to it: the count is per replica.
  counted.stop();
  ASSERT_TRUE(counted.start().ok());
  EXPECT_EQ(counted.counter_value("expected"), 25);

  StageRunner endless(sim_registry(), "sim.source", "src");
  ASSERT_TRUE(endless.set("count", std::int64_t{0}).ok());
  ASSERT_TRUE(endless.start().ok());
  EXPECT_EQ(endless.counter_value("expected"), 0);
}

}  // namespace
}  // namespace swarmflow
