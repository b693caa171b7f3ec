// A plugin that says it was built for another swarmflow release and plugin
// ABI, as one built against an old install would: the loader must refuse it
// before calling anything else in it.

#include <swarmflow/plugin.hpp>

namespace {

swarmflow::Status register_stages(swarmflow::Registry&) {
  return swarmflow::Status::error("a mismatched plugin was asked to register its stages");
}

}  // namespace

extern "C" __attribute__((visibility("default"))) const swarmflow::PluginDescriptor* swarmflow_plugin_v1() {
  static const swarmflow::PluginDescriptor descriptor{
      SWARMFLOW_PLUGIN_ABI + 1, "99.0.0", SWARMFLOW_PLUGIN_STL, SWARMFLOW_PLUGIN_COMPILER, "mismatched", "1.0.0",
      &register_stages};
  return &descriptor;
}
