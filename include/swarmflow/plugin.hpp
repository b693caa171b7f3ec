#pragma once
/// \file plugin.hpp
/// Stage packs built as shared libraries ("plugins"), loaded at run time by
/// the stock `swarmflow` command (`--plugin PATH`, `SWARMFLOW_PLUGIN_PATH`,
/// `plugins:` in a pipeline file) or by an application through
/// `Registry::load_plugin`.
///
/// A plugin exports one C function, `swarmflow_plugin_v1`, that returns a
/// descriptor; write it with `SWARMFLOW_PLUGIN`:
///
/// ```cpp
/// swarmflow::Status register_stages(swarmflow::Registry& r) {
///   return r.add<Brightness>("example.brightness", "scales the pixels of frames");
/// }
/// SWARMFLOW_PLUGIN("example", "1.0.0", register_stages)
/// ```
///
/// Stages pass C++ objects (std::string, std::function, Status) across the
/// library boundary, so a plugin must be built against the same swarmflow
/// release (major.minor), plugin ABI and C++ standard library as the program
/// that loads it. The loader checks all three before it calls anything else in
/// the plugin, and refuses a mismatch with both sides named
/// (docs/writing-a-stage.md, "The ABI rule").

#include <cstdint>
#include <string>

#include <swarmflow/registry.hpp>
#include <swarmflow/status.hpp>
#include <swarmflow/version.hpp>

/// The plugin ABI: the layout of `PluginDescriptor` and of the types a stage
/// sees (Stage, StageSpec, Registry, ports, envelopes). Raised whenever one of
/// them changes incompatibly.
#define SWARMFLOW_PLUGIN_ABI 2  // 2: Stage gained state_key, take_key, give_key

#define SWARMFLOW_PLUGIN_STR_(x) #x
#define SWARMFLOW_PLUGIN_STR(x) SWARMFLOW_PLUGIN_STR_(x)

/// The C++ standard library and its ABI the including code is built with.
/// Two sides must agree on it for C++ objects to cross between them.
#if defined(_LIBCPP_VERSION)
#define SWARMFLOW_PLUGIN_STL "libc++ abi " SWARMFLOW_PLUGIN_STR(_LIBCPP_ABI_VERSION)
#elif defined(__GLIBCXX__) && defined(_GLIBCXX_DEBUG)
#define SWARMFLOW_PLUGIN_STL "libstdc++ cxx11-abi=" SWARMFLOW_PLUGIN_STR(_GLIBCXX_USE_CXX11_ABI) " debug"
#elif defined(__GLIBCXX__)
#define SWARMFLOW_PLUGIN_STL "libstdc++ cxx11-abi=" SWARMFLOW_PLUGIN_STR(_GLIBCXX_USE_CXX11_ABI)
#else
#define SWARMFLOW_PLUGIN_STL "unknown"
#endif

/// The compiler, for messages only (GCC and Clang share libstdc++'s ABI).
#if defined(__clang__)
#define SWARMFLOW_PLUGIN_COMPILER "clang " SWARMFLOW_PLUGIN_STR(__clang_major__)
#elif defined(__GNUC__)
#define SWARMFLOW_PLUGIN_COMPILER "gcc " SWARMFLOW_PLUGIN_STR(__GNUC__)
#else
#define SWARMFLOW_PLUGIN_COMPILER "unknown compiler"
#endif

namespace swarmflow {

/// What `swarmflow_plugin_v1` returns. The first four fields keep their place
/// in every ABI, so that any loader can read them and explain a mismatch.
struct PluginDescriptor {
  std::uint32_t abi;              ///< SWARMFLOW_PLUGIN_ABI the plugin was built with
  const char* swarmflow_version;  ///< SWARMFLOW_VERSION_STRING of the headers it was built against
  const char* stl;                ///< SWARMFLOW_PLUGIN_STL it was built with
  const char* compiler;           ///< SWARMFLOW_PLUGIN_COMPILER it was built with
  // -- read only once the three checks above pass ---
  const char* name;     ///< the plugin's own name, for messages
  const char* version;  ///< the plugin's own version, for messages
  /// Adds the plugin's stage types to `registry`.
  Status (*register_stages)(Registry& registry);
};

/// The name of the entry point the loader looks up.
inline constexpr const char* kPluginEntryPoint = "swarmflow_plugin_v1";

/// Why this process refuses `plugin`, or empty when it fits: the ABI, the swarmflow release (major.minor) and the C++ standard
/// library must match this build's. `file` names the plugin in the message.
/// Pure: the loader's decision, testable without a shared library.
std::string plugin_mismatch(const PluginDescriptor& plugin, const std::string& file);

}  // namespace swarmflow

/// Defines the plugin's entry point. `register_fn` is a
/// `swarmflow::Status (swarmflow::Registry&)` function.
#define SWARMFLOW_PLUGIN(plugin_name, plugin_version, register_fn)                                  \
  extern "C" __attribute__((visibility("default"))) const ::swarmflow::PluginDescriptor*            \
  swarmflow_plugin_v1() {                                                                            \
    static const ::swarmflow::PluginDescriptor descriptor{                                           \
        SWARMFLOW_PLUGIN_ABI, SWARMFLOW_VERSION_STRING, SWARMFLOW_PLUGIN_STL, SWARMFLOW_PLUGIN_COMPILER, \
        plugin_name,          plugin_version,           &register_fn};                               \
    return &descriptor;                                                                              \
  }
