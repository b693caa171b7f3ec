// The follow log of a served pipeline that takes no requests
// (serve_hub.hpp): numbered events, a bounded backlog whose losses a
// follower is told of, the end of the streams. One thread, no waiting on
// the clock: every read has an event or the end at hand, or a zero timeout.

#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "lm/serve_hub.hpp"

namespace swarmflow::lm {
namespace {

constexpr std::chrono::milliseconds kNow{0};

ServeEvent token(std::uint64_t position, const std::string& piece, bool final = false) {
  ServeEvent e;
  e.piece = piece;
  e.position = position;
  e.final = final;
  if (final) e.finish_reason = "stop";
  return e;
}

TEST(ServeHubFollow, FollowersReadTheLogInOrderFromWhereTheyStart) {
  ServeHub hub(4, true, 8);
  ASSERT_TRUE(hub.followed());
  EXPECT_EQ(hub.follow_next(), 1U);
  EXPECT_TRUE(hub.follow(1, 100, kNow).events.empty());  // nothing yet
  hub.deliver(16, token(0, "frame "));
  hub.deliver(17, token(0, "frame "));
  hub.deliver(16, token(1, "0.", true));
  const FollowBatch all = hub.follow(0, 100, kNow);
  ASSERT_EQ(all.events.size(), 3U);
  EXPECT_EQ(all.lost, 0U);
  EXPECT_FALSE(all.ended);
  EXPECT_EQ(all.events[0].number, 1U);
  EXPECT_EQ(all.events[0].request, 16U);
  EXPECT_EQ(all.events[1].request, 17U);
  EXPECT_EQ(all.events[2].number, 3U);
  EXPECT_TRUE(all.events[2].event.final);
  EXPECT_EQ(all.events[2].event.position, 1U);
  // From the middle, and at most `max` at once.
  const FollowBatch two = hub.follow(2, 1, kNow);
  ASSERT_EQ(two.events.size(), 1U);
  EXPECT_EQ(two.events[0].number, 2U);
  // From now on: nothing until the next event.
  EXPECT_EQ(hub.follow_next(), 4U);
  EXPECT_TRUE(hub.follow(hub.follow_next(), 100, kNow).events.empty());
  EXPECT_EQ(hub.figures().followed_events, 3U);
}

TEST(ServeHubFollow, AFollowerBehindTheBacklogIsToldWhatItLost) {
  ServeHub hub(4, true, 3);
  for (std::uint64_t i = 0; i < 10; ++i) hub.deliver(1, token(i, "w "));
  const FollowBatch late = hub.follow(1, 100, kNow);
  EXPECT_EQ(late.lost, 7U);  // 1..7 were dropped from a log of 3
  ASSERT_EQ(late.events.size(), 3U);
  EXPECT_EQ(late.events[0].number, 8U);
  EXPECT_EQ(hub.figures().follow_lost, 7U);
  // 0 is the oldest kept: nothing counted lost.
  const FollowBatch oldest = hub.follow(0, 100, kNow);
  EXPECT_EQ(oldest.lost, 0U);
  ASSERT_EQ(oldest.events.size(), 3U);
  EXPECT_EQ(oldest.events[0].number, 8U);
  EXPECT_EQ(hub.figures().follow_lost, 7U);
  // A number not reached yet: nothing, nothing lost.
  const FollowBatch ahead = hub.follow(100, 100, kNow);
  EXPECT_TRUE(ahead.events.empty());
  EXPECT_EQ(ahead.lost, 0U);
}

TEST(ServeHubFollow, TheEndComesAfterTheLastEventAFollowerReads) {
  ServeHub hub(4, true, 8);
  hub.deliver(1, token(0, "a "));
  hub.deliver(1, token(1, "b", true));
  hub.end_streams();
  const FollowBatch first = hub.follow(1, 1, kNow);
  ASSERT_EQ(first.events.size(), 1U);
  EXPECT_FALSE(first.ended);  // one more to read
  const FollowBatch rest = hub.follow(2, 100, kNow);
  ASSERT_EQ(rest.events.size(), 1U);
  EXPECT_TRUE(rest.ended);
  EXPECT_TRUE(hub.follow(3, 100, kNow).ended);
}

TEST(ServeHubFollow, FollowersAreBoundedAndCounted) {
  ServeHub hub(4, true);
  EXPECT_TRUE(hub.add_follower(2));
  EXPECT_TRUE(hub.add_follower(2));
  EXPECT_FALSE(hub.add_follower(2));
  EXPECT_EQ(hub.figures().followers, 2U);
  hub.remove_follower();
  EXPECT_EQ(hub.figures().followers, 1U);
  EXPECT_TRUE(hub.add_follower(2));
}

// A hub that answers requests keeps its events per request, not in a log.
TEST(ServeHubFollow, AHubThatAnswersRequestsHasNoLog) {
  ServeHub hub(4);
  EXPECT_FALSE(hub.followed());
  const auto id = hub.admit(ServeRequest{});
  ASSERT_TRUE(id.has_value());
  hub.deliver(*id, token(0, "x", true));
  ServeEvent e;
  ASSERT_TRUE(hub.next(*id, e, kNow));
  EXPECT_EQ(e.piece, "x");
  EXPECT_EQ(hub.figures().followed_events, 0U);
}

}  // namespace
}  // namespace swarmflow::lm
