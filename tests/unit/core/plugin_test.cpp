// The plugin loader's decision: a plugin fits only when it was built for this
// plugin ABI, swarmflow release (major.minor) and C++ library; a refusal
// names the file and both sides.

#include <gtest/gtest.h>

#include <filesystem>

#include <swarmflow/plugin.hpp>

namespace {

swarmflow::Status no_stages(swarmflow::Registry&) { return {}; }

swarmflow::PluginDescriptor built_here() {
  return {SWARMFLOW_PLUGIN_ABI, SWARMFLOW_VERSION_STRING, SWARMFLOW_PLUGIN_STL, SWARMFLOW_PLUGIN_COMPILER,
          "test", "1.0", &no_stages};
}

TEST(PluginMismatch, APluginBuiltLikeThisProgramFits) {
  EXPECT_EQ(swarmflow::plugin_mismatch(built_here(), "libp.so"), "");
}

TEST(PluginMismatch, AnotherPatchReleaseFits) {
  auto p = built_here();
  const std::string version = std::to_string(SWARMFLOW_VERSION_MAJOR) + "." +
                              std::to_string(SWARMFLOW_VERSION_MINOR) + "." +
                              std::to_string(SWARMFLOW_VERSION_PATCH + 7);
  p.swarmflow_version = version.c_str();
  EXPECT_EQ(swarmflow::plugin_mismatch(p, "libp.so"), "");
}

TEST(PluginMismatch, AnotherAbiIsRefusedNamingTheFileAndBothSides) {
  auto p = built_here();
  p.abi = SWARMFLOW_PLUGIN_ABI + 1;
  const std::string why = swarmflow::plugin_mismatch(p, "/x/libp.so");
  EXPECT_NE(why.find("/x/libp.so"), std::string::npos) << why;
  EXPECT_NE(why.find("plugin ABI " + std::to_string(SWARMFLOW_PLUGIN_ABI + 1)), std::string::npos) << why;
  EXPECT_NE(why.find("plugin ABI " + std::to_string(SWARMFLOW_PLUGIN_ABI)), std::string::npos) << why;
}

TEST(PluginMismatch, AnotherMinorReleaseIsRefused) {
  auto p = built_here();
  const std::string version = std::to_string(SWARMFLOW_VERSION_MAJOR) + "." +
                              std::to_string(SWARMFLOW_VERSION_MINOR + 1) + ".0";
  p.swarmflow_version = version.c_str();
  const std::string why = swarmflow::plugin_mismatch(p, "libp.so");
  EXPECT_NE(why.find("swarmflow " + version), std::string::npos) << why;
  EXPECT_NE(why.find(std::string("swarmflow ") + SWARMFLOW_VERSION_STRING), std::string::npos) << why;
}

TEST(PluginMismatch, AnotherStandardLibraryIsRefused) {
  auto p = built_here();
  p.stl = "libc++ abi 1";
  EXPECT_NE(swarmflow::plugin_mismatch(p, "libp.so").find("libc++ abi 1"), std::string::npos);
}

TEST(PluginLoad, AMissingFileOrANonPluginLibraryIsRefused) {
  swarmflow::Registry r;
  EXPECT_FALSE(r.load_plugin("/no/such/libplugin.so").ok());
  const std::string not_a_plugin = "/lib/x86_64-linux-gnu/libz.so.1";
  if (std::filesystem::exists(not_a_plugin)) {
    const swarmflow::Status s = r.load_plugin(not_a_plugin);
    EXPECT_NE(s.message().find("swarmflow_plugin_v1"), std::string::npos) << s.message();
  }
  EXPECT_TRUE(r.plugins().empty());
}

}  // namespace
