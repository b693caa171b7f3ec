// The log's level: named as users write it, --log-level over SWARMFLOW_LOG
// over the default, and an unknown name refused saying where it came from.

#include <gtest/gtest.h>

#include <swarmflow/log.hpp>

namespace {

using swarmflow::log::Level;

TEST(LogLevel, EveryNameReadsBack) {
  for (Level l : {Level::trace, Level::debug, Level::info, Level::warn, Level::error, Level::off}) {
    EXPECT_EQ(swarmflow::log::parse_level(swarmflow::log::to_string(l)), l);
  }
  EXPECT_EQ(swarmflow::log::parse_level("warning"), Level::warn);
  EXPECT_FALSE(swarmflow::log::parse_level("loud").has_value());
  EXPECT_FALSE(swarmflow::log::parse_level("").has_value());
}

TEST(LogLevel, TheFlagWinsOverTheEnvironmentWhichWinsOverInfo) {
  Level l = Level::off;
  ASSERT_TRUE(swarmflow::log::choose_level("", nullptr, &l).ok());
  EXPECT_EQ(l, Level::info);
  ASSERT_TRUE(swarmflow::log::choose_level("", "", &l).ok());
  EXPECT_EQ(l, Level::info);
  ASSERT_TRUE(swarmflow::log::choose_level("", "debug", &l).ok());
  EXPECT_EQ(l, Level::debug);
  ASSERT_TRUE(swarmflow::log::choose_level("error", "debug", &l).ok());
  EXPECT_EQ(l, Level::error);
}

TEST(LogLevel, AnUnknownNameIsRefusedNamingItsSource) {
  Level l = Level::info;
  const auto flag = swarmflow::log::choose_level("loud", "debug", &l);
  EXPECT_FALSE(flag.ok());
  EXPECT_NE(flag.message().find("--log-level: unknown level 'loud'"), std::string::npos) << flag.message();
  const auto env = swarmflow::log::choose_level("", "loud", &l);
  EXPECT_FALSE(env.ok());
  EXPECT_NE(env.message().find("SWARMFLOW_LOG: unknown level 'loud'"), std::string::npos) << env.message();
}

}  // namespace
