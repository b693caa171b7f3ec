// Placement, pure: where replicas start (place_static) and where the replicas
// of dead units go (place_after_failure).

#include <gtest/gtest.h>

#include "config/pipeline_spec.hpp"
#include "placement/failover.hpp"
#include "placement/static_placement.hpp"

namespace swarmflow::placement {
namespace {

config::StageDecl stage(const std::string& id, int replicas, std::vector<std::string> pins = {}, bool spread = false) {
  config::StageDecl s;
  s.id = id;
  s.type = "sim.work";
  s.replicas = replicas;
  s.pin_units = std::move(pins);
  s.spread = spread;
  return s;
}

config::PipelineSpec spec_with(std::vector<config::UnitDecl> units, std::vector<config::StageDecl> stages) {
  config::PipelineSpec spec;
  spec.units = std::move(units);
  spec.stages = std::move(stages);
  return spec;
}

config::UnitDecl unit(const std::string& id, int threads = 1, double speed = 1.0) {
  config::UnitDecl u;
  u.id = id;
  u.threads = threads;
  u.speed = speed;
  return u;
}

TEST(PlaceStatic, BalancesByThreadsTimesSpeedAndHonoursPins) {
  // u1 has twice the capacity of u0; the source pinned to u0 counts there.
  auto spec = spec_with({unit("u0", 1), unit("u1", 2)}, {stage("src", 1, {"u0"}), stage("work", 6)});
  const auto plan = place_static(spec);
  ASSERT_EQ(plan.size(), 2U);
  EXPECT_EQ(plan[0], std::vector<int>({0}));
  int on_u1 = 0;
  for (int u : plan[1]) on_u1 += u == 1 ? 1 : 0;
  // Each replica goes where (load + 1) / capacity is lowest: u0 ends with
  // the source and one replica (2 / 1), u1 with five (5 / 2).
  EXPECT_EQ(on_u1, 5);
  EXPECT_EQ(place_static(spec), plan) << "the same file gives the same plan in every process";
}

TEST(PlaceStatic, SpreadPutsOneReplicaPerUnitFirst) {
  auto spec = spec_with({unit("u0", 8), unit("u1", 1), unit("u2", 1)}, {stage("work", 3, {}, true)});
  EXPECT_EQ(place_static(spec)[0], std::vector<int>({0, 1, 2}));
  spec.stages[0].spread = false;
  EXPECT_EQ(place_static(spec)[0], std::vector<int>({0, 0, 0}));  // u0 is 8 times as big
}

TEST(PlaceAfterFailure, ReplicasOfADeadUnitGoToTheLeastLoadedSurvivor) {
  auto spec = spec_with({unit("u0"), unit("u1"), unit("u2"), unit("u3", 4)},
                        {stage("src", 1, {"u0"}), stage("work", 3), stage("sink", 1, {"u0"})});
  const std::vector<std::vector<int>> before = {{0}, {1, 2, 1}, {0}};
  // u1 dies; u3 (4 threads, nothing yet) takes both of its replicas.
  const auto plan = place_after_failure(spec, {true, false, false}, before, {true, false, true, true});
  EXPECT_TRUE(plan.refused.empty()) << plan.refused;
  EXPECT_EQ(plan.unit_of, (std::vector<std::vector<int>>{{0}, {3, 2, 3}, {0}}));
  EXPECT_EQ(plan.moved, (std::vector<std::pair<int, int>>{{1, 0}, {1, 2}}));
  EXPECT_TRUE(plan.lost.empty());
  // Nothing else moved.
  for (std::size_t s = 0; s < before.size(); ++s) {
    for (std::size_t r = 0; r < before[s].size(); ++r) {
      if (before[s][r] != 1) {
        EXPECT_EQ(plan.unit_of[s][r], before[s][r]) << s << "/" << r;
      }
    }
  }
}

TEST(PlaceAfterFailure, ASourceOnADeadUnitIsLostNotRestarted) {
  auto spec = spec_with({unit("u0"), unit("u1")}, {stage("camera", 2), stage("sink", 1)});
  const auto plan = place_after_failure(spec, {true, false}, {{0, 1}, {0}}, {true, false});
  EXPECT_TRUE(plan.refused.empty());
  EXPECT_EQ(plan.unit_of[0], std::vector<int>({0, kLost}));
  EXPECT_EQ(plan.lost, (std::vector<std::pair<int, int>>{{0, 1}}));
  EXPECT_TRUE(plan.moved.empty());
}

TEST(PlaceAfterFailure, ASourceWithASnapshotRestartsElsewhereUnlessItsPlacementPinsIt) {
  // camera replicas 0 and 1 on u1 with snapshots; replica 1 is pinned to u1
  // alone by a stage of its own: it is lost, not refused.
  auto spec = spec_with({unit("u0"), unit("u1"), unit("u2")},
                        {stage("camera", 2, {"u1", "u2"}), stage("pinned", 1, {"u1"}), stage("sink", 1, {"u0"})});
  const std::vector<std::vector<bool>> restartable = {{true, false}, {true}, {false}};
  const auto plan =
      place_after_failure(spec, {true, true, false}, {{1, 1}, {1}, {0}}, {true, false, true}, restartable);
  EXPECT_TRUE(plan.refused.empty()) << plan.refused;
  EXPECT_EQ(plan.unit_of[0], std::vector<int>({2, kLost}));  // replica 1 has no snapshot
  EXPECT_EQ(plan.unit_of[1], std::vector<int>({kLost}));     // nowhere its placement allows
  EXPECT_EQ(plan.moved, (std::vector<std::pair<int, int>>{{0, 0}}));
  EXPECT_EQ(plan.lost, (std::vector<std::pair<int, int>>{{0, 1}, {1, 0}}));
}

TEST(PlaceAfterFailure, PinsAreHonouredAndAReplicaWithNowhereToGoRefusesTheFailover) {
  auto spec = spec_with({unit("u0"), unit("u1"), unit("u2")},
                        {stage("src", 1, {"u0"}), stage("gpu", 1, {"u1", "u2"}), stage("disk", 1, {"u1"})});
  auto plan = place_after_failure(spec, {true, false, false}, {{0}, {1}, {2}}, {true, false, true});
  EXPECT_TRUE(plan.refused.empty());
  EXPECT_EQ(plan.unit_of[1], std::vector<int>({2}));  // not u0: its placement does not allow it
  plan = place_after_failure(spec, {true, false, false}, {{0}, {2}, {1}}, {true, false, true});
  EXPECT_NE(plan.refused.find("replica 0 of stage 'disk' has no unit left that its placement allows"),
            std::string::npos)
      << plan.refused;
}

TEST(PlaceAfterFailure, AUnitThatMayNotTakeWorkIsPassedOver) {
  // u2 is alive but has ended its run (usable false): u0 takes the work.
  auto spec = spec_with({unit("u0"), unit("u1"), unit("u2", 16)}, {stage("work", 2)});
  const auto plan = place_after_failure(spec, {false}, {{1, 1}}, {true, false, false});
  EXPECT_EQ(plan.unit_of[0], std::vector<int>({0, 0}));
}

}  // namespace
}  // namespace swarmflow::placement
