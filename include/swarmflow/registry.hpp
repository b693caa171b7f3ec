#pragma once
/// \file registry.hpp
/// The catalogue of stage types, by name.

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <swarmflow/stage.hpp>
#include <swarmflow/status.hpp>

namespace swarmflow {

/// Makes a fresh instance of a stage type.
using StageFactory = std::function<std::unique_ptr<Stage>()>;

/// One registered stage type.
struct StageType {
  std::string name;         ///< `pack.verb_or_noun`
  std::string description;  ///< one line
  StageFactory make;
};

/// Stage types by name. Packs add themselves through
/// `register_<pack>_stages(Registry&)`; applications add their own with
/// `add`, plugins theirs through `load_plugin`.
class Registry {
 public:
  /// Adds a type; fails if the name is taken.
  Status add(std::string name, std::string description, StageFactory make);
  template <class S>
  Status add(std::string name, std::string description) {
    return add(std::move(name), std::move(description), [] { return std::make_unique<S>(); });
  }

  /// The type called `name`, or null.
  const StageType* find(std::string_view name) const;
  /// All types, sorted by name.
  std::vector<const StageType*> all() const;
  /// The registered name closest to `name` by edit distance, or empty.
  std::string nearest(std::string_view name) const;
  /// Instantiates `name` and runs its `setup` into `spec`.
  Status describe(std::string_view name, StageSpec& spec) const;

  /// Loads the stage pack built as a shared library at `path` and adds its
  /// stage types (swarmflow/plugin.hpp). A plugin built for another
  /// swarmflow release, plugin ABI or C++ library is refused, naming the
  /// file and both sides. Loading the same file again does nothing.
  Status load_plugin(const std::string& path);
  /// Loads every plugin on a colon-separated list of files and folders (the
  /// form of `SWARMFLOW_PLUGIN_PATH`); a folder contributes its `*.so`
  /// files in name order. Stops at the first failure.
  Status load_plugins(const std::string& search_path);
  /// The plugin files loaded so far, as given to `load_plugin` made absolute.
  const std::vector<std::string>& plugins() const { return plugins_; }

 private:
  std::map<std::string, StageType, std::less<>> types_;
  std::vector<std::string> plugins_;
};

/// Adds the packs the runtime carries (sim, io) to `registry`. The packs on
/// OpenCV and GStreamer are libraries of their own (swarmflow::actors_video,
/// ...), registered by whoever links them.
void register_builtin_stages(Registry& registry);

/// Edit distance between two strings (for "did you mean" hints).
std::size_t edit_distance(std::string_view a, std::string_view b);

}  // namespace swarmflow
