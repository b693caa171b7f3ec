// Loading stage packs built as shared libraries (swarmflow/plugin.hpp).

#include <swarmflow/plugin.hpp>

#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <system_error>

namespace swarmflow {

namespace {

/// "0.1" of "0.1.0": plugins and programs must share the release's major.minor.
std::string major_minor(const std::string& version) {
  const auto first = version.find('.');
  if (first == std::string::npos) return version;
  const auto second = version.find('.', first + 1);
  return version.substr(0, second);
}

std::string side(std::uint32_t abi, const std::string& version, const std::string& stl, const std::string& compiler) {
  return "swarmflow " + version + ", plugin ABI " + std::to_string(abi) + ", " + stl + " (" + compiler + ")";
}

const char* or_unknown(const char* text) { return text != nullptr ? text : "?"; }

}  // namespace

std::string plugin_mismatch(const PluginDescriptor& plugin, const std::string& file) {
  const std::string version = or_unknown(plugin.swarmflow_version);
  const std::string stl = or_unknown(plugin.stl);
  const bool fits = plugin.abi == SWARMFLOW_PLUGIN_ABI &&
                    major_minor(version) == major_minor(SWARMFLOW_VERSION_STRING) && stl == SWARMFLOW_PLUGIN_STL;
  if (fits) return {};
  return "plugin " + file + " was built for " + side(plugin.abi, version, stl, or_unknown(plugin.compiler)) +
         ", but this program is " +
         side(SWARMFLOW_PLUGIN_ABI, SWARMFLOW_VERSION_STRING, SWARMFLOW_PLUGIN_STL, SWARMFLOW_PLUGIN_COMPILER) +
         ": rebuild the plugin against this swarmflow (the release's major.minor, the plugin ABI and the C++ "
         "library must match)";
}

Status Registry::load_plugin(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return Status::error("plugin " + path + ": no such file", StatusCode::not_found);
  }
  const std::string file = std::filesystem::absolute(path, ec).lexically_normal().string();
  if (std::find(plugins_.begin(), plugins_.end(), file) != plugins_.end()) return {};
  // RTLD_LOCAL: a plugin's own symbols stay its own. The library is never
  // closed: the stage types it added point into it.
  void* handle = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return Status::error("plugin " + file + " cannot be loaded: " + (why != nullptr ? why : "dlopen failed"),
                         StatusCode::invalid_argument);
  }
  using Entry = const PluginDescriptor* (*)();
  auto entry = reinterpret_cast<Entry>(dlsym(handle, kPluginEntryPoint));
  if (entry == nullptr) {
    return Status::error("plugin " + file + " has no entry point " + kPluginEntryPoint +
                             ": is it a swarmflow plugin? (define it with SWARMFLOW_PLUGIN, swarmflow/plugin.hpp)",
                         StatusCode::invalid_argument);
  }
  const PluginDescriptor* descriptor = entry();
  if (descriptor == nullptr) {
    return Status::error("plugin " + file + ": " + kPluginEntryPoint + " returned nothing",
                         StatusCode::invalid_argument);
  }
  if (std::string why = plugin_mismatch(*descriptor, file); !why.empty()) {
    return Status::error(why, StatusCode::failed_precondition);
  }
  if (descriptor->register_stages == nullptr) {
    return Status::error("plugin " + file + " registers no stages", StatusCode::invalid_argument);
  }
  Status s = descriptor->register_stages(*this);
  if (!s.ok()) {
    return Status::error("plugin " + file + " (" + or_unknown(descriptor->name) + " " +
                             or_unknown(descriptor->version) + "): " + s.message(),
                         StatusCode::invalid_argument);
  }
  plugins_.push_back(file);
  return {};
}

Status Registry::load_plugins(const std::string& search_path) {
  std::size_t begin = 0;
  while (begin <= search_path.size()) {
    std::size_t end = search_path.find(':', begin);
    if (end == std::string::npos) end = search_path.size();
    const std::string item = search_path.substr(begin, end - begin);
    begin = end + 1;
    if (item.empty()) continue;
    std::error_code ec;
    if (std::filesystem::is_directory(item, ec)) {
      std::vector<std::string> files;
      for (const auto& f : std::filesystem::directory_iterator(item, ec)) {
        if (f.path().extension() == ".so" && f.is_regular_file(ec)) files.push_back(f.path().string());
      }
      std::sort(files.begin(), files.end());
      for (const auto& f : files) {
        if (Status s = load_plugin(f); !s.ok()) return s;
      }
    } else if (Status s = load_plugin(item); !s.ok()) {
      return s;
    }
  }
  return {};
}

}  // namespace swarmflow
