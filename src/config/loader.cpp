// Reads a pipeline definition (YAML) into a PipelineSpec and checks it against
// the stage catalogue. Every mistake is collected, none stops the reading, and
// the diagnostics come out in file order.

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <variant>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "config/pipeline_spec.hpp"

namespace swarmflow::config {

const char* to_string(KeyField field) {
  switch (field) {
    case KeyField::stream: return "stream";
    case KeyField::seq: return "seq";
    case KeyField::part_id: return "part_id";
  }
  return "?";
}

const char* to_string(Overflow overflow) {
  switch (overflow) {
    case Overflow::block: return "block";
    case Overflow::drop_oldest: return "drop_oldest";
    case Overflow::drop_newest: return "drop_newest";
  }
  return "?";
}

const StageDecl* PipelineSpec::find_stage(const std::string& id) const {
  for (const auto& stage : stages) {
    if (stage.id == id) return &stage;
  }
  return nullptr;
}

namespace {

// -- vocabulary ---

const std::vector<std::string> kTopKeys = {"pipeline",  "units",     "coordinator", "coordinator_key", "plugins",
                                           "stages",    "placement", "transport",   "failure",
                                           "scenario",  "opencv"};
const std::vector<std::string> kOpenCvKeys = {"threads"};
const std::vector<std::string> kScenarioKeys = {"at_s", "unit", "speed"};
const std::vector<std::string> kTransportKeys = {"max_message_bytes", "high_water_mark", "linger_ms",
                                                 "pack_below_bytes", "in_process"};
const std::vector<std::string> kInProcess = {"zeromq", "direct"};
const std::vector<std::string> kFailureKeys = {"heartbeat_ms", "phi_threshold", "min_std_ms",
                                               "acceptable_pause_ms", "window", "snapshot_every",
                                               "snapshot_ms"};
const std::vector<std::string> kUnitKeys = {"id", "endpoint", "threads", "speed", "public_key"};
const std::vector<std::string> kStageKeys = {"id",  "type",     "replicas",  "params", "inputs", "queue",
                                             "key", "feedback", "placement", "join",   "fanout"};
const std::vector<std::string> kJoinKeys = {"key", "timeout_ms"};
const std::vector<std::string> kReplicaKeys = {"min", "max"};
const std::vector<std::string> kQueueKeys = {"capacity", "overflow"};
const std::vector<std::string> kStagePlacementKeys = {"units", "spread"};
const std::vector<std::string> kPlacementKeys = {"policy",      "rebalance_above", "interval_ms",
                                                 "hysteresis",  "sustain_ms",      "cooldown_ms"};
const std::vector<std::string> kOverflows = {"block", "drop_oldest", "drop_newest"};
const std::vector<std::string> kPolicies = {"static", "adaptive"};

// -- limits on what a file may ask for (docs/pipelines.md, "Limits") ---
// Each is checked before anything of that size is built, so a file cannot make
// validation or a run allocate without bound.

constexpr std::int64_t kMaxUnits = 256;                 // per pipeline; 8x the 32 units placement targets
constexpr std::int64_t kMaxReplicas = 1024;             // per stage (its `replicas` or `max`)
constexpr std::int64_t kMaxTotalReplicas = 100'000;     // per pipeline, the stages' `max` replicas summed
constexpr std::int64_t kMaxStages = 100'000;            // per pipeline
constexpr std::int64_t kMaxEdges = 4 * kMaxStages;      // per pipeline: producers named in all `inputs:`
// The YAML parser holds some 75 bytes per byte of text, so the text is
// bounded before it is parsed; 100,000 stages written out in full fit.
constexpr std::int64_t kMaxFileBytes = 64ll << 20;
// Nearest-name searches ("did you mean") compare names one pair at a time;
// this many comparisons per file keep a file full of typos linear to check.
constexpr std::size_t kNearestComparisons = 1'000'000;
constexpr std::size_t kListedNames = 12;                // names a hint lists before "and N more"
constexpr std::size_t kExampleOutputs = 3;              // producers a hint offers for an input
constexpr std::size_t kCycleStagesShown = 12;           // stages a cycle's message names before eliding
const char* const kUnitsLimitHint =
    "ask for fewer units: stages share units, and a unit's `threads` gives it more workers";
const char* const kReplicasLimitHint =
    "ask for fewer replicas: a stage's replicas share the units' worker threads, so more than those rarely helps";
// Messages between units: at least room for a frame header and a small
// payload, at most the largest buffer FlatBuffers verifies (2^31 - 2).
constexpr std::int64_t kMinMessageBytes = 4096;
constexpr std::int64_t kMaxMessageBytes = (1ll << 31) - 2;
constexpr std::int64_t kMaxPackBelowBytes = 16384;  // a pack frame is at most 64 KiB
constexpr std::int64_t kMaxCapacity = 1'000'000;
constexpr std::int64_t kMaxThreads = 4096;

// -- text ---

std::string join(const std::vector<std::string>& items, const char* separator = ", ") {
  std::string out;
  for (const auto& item : items) {
    if (!out.empty()) out += separator;
    out += item;
  }
  return out;
}

std::string in_quotes(const std::string& text) { return "'" + text + "'"; }

/// At most kListedNames of `items`, then how many more there are.
std::string join_some(const std::vector<std::string>& items) {
  if (items.size() <= kListedNames) return join(items);
  const std::vector<std::string> first(items.begin(), items.begin() + kListedNames);
  return join(first) + " and " + std::to_string(items.size() - kListedNames) + " more";
}

/// The candidate closest to `name`, or empty when none is close enough to be
/// a plausible typo (the same threshold as Registry::nearest).
std::string nearest_of(std::string_view name, const std::vector<std::string>& candidates) {
  std::string best;
  std::size_t best_distance = std::string::npos;
  const std::size_t threshold = std::max<std::size_t>(3, name.size() / 2);
  for (const auto& candidate : candidates) {
    // The distance is at least the difference in length: skip the hopeless.
    const std::size_t floor = candidate.size() > name.size() ? candidate.size() - name.size()
                                                             : name.size() - candidate.size();
    if (floor > threshold || floor >= best_distance) continue;
    const std::size_t d = edit_distance(name, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  if (best_distance > threshold) return {};
  return best;
}

/// "did you mean 'x'?" or, with no close candidate, the whole list.
std::string suggest(std::string_view name, const std::vector<std::string>& candidates,
                    const std::string& list_intro) {
  const std::string best = nearest_of(name, candidates);
  if (!best.empty()) return "did you mean " + in_quotes(best) + "?";
  return list_intro + join_some(candidates);
}

bool is_identifier(std::string_view text) {
  if (text.empty()) return false;
  return std::all_of(text.begin(), text.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
}

std::string format_number(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

std::optional<std::int64_t> parse_integer(const std::string& text) {
  const char* begin = text.data();
  const char* end = begin + text.size();
  if (begin != end && *begin == '+') ++begin;
  if (begin == end || *begin == '+') return std::nullopt;
  std::int64_t value = 0;
  const auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec != std::errc() || ptr != end) return std::nullopt;
  return value;
}

std::optional<double> parse_number(const std::string& text) {
  const char* begin = text.data();
  const char* end = begin + text.size();
  if (begin != end && *begin == '+') ++begin;
  if (begin == end || *begin == '+') return std::nullopt;
  double value = 0;
  const auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec != std::errc() || ptr != end || !std::isfinite(value)) return std::nullopt;
  return value;
}

// -- YAML nodes ---

SourceLoc loc_of(const YAML::Mark& mark) {
  if (mark.line < 0 || mark.column < 0) return {};
  return {mark.line + 1, mark.column + 1};
}

SourceLoc loc_of(const YAML::Node& node) { return loc_of(node.Mark()); }

/// A quoted scalar ("10") is a string in YAML, never a number or a boolean.
bool is_quoted(const YAML::Node& node) { return node.Tag() == "!"; }

/// A node as a user would recognise it after "got".
std::string shown(const YAML::Node& node) {
  if (!node.IsDefined() || node.IsNull()) return "nothing";
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "a map";
  return is_quoted(node) ? "\"" + node.Scalar() + "\"" : node.Scalar();
}

/// One `key: value` of a map.
struct Entry {
  std::string name;
  YAML::Node key;
  YAML::Node value;

  SourceLoc key_loc() const { return loc_of(key); }
  /// The value's position; the key's when the value is empty (yaml-cpp puts
  /// an empty value at the start of the next line).
  SourceLoc value_loc() const { return value.IsNull() ? key_loc() : loc_of(value); }
};

/// The entries of a map in file order.
struct Entries {
  std::vector<Entry> items;
  std::unordered_map<std::string, std::size_t> index;  ///< name -> position in items

  const Entry* find(const std::string& name) const {
    auto it = index.find(name);
    return it == index.end() ? nullptr : &items[it->second];
  }
  void add(Entry entry) {
    index.emplace(entry.name, items.size());
    items.push_back(std::move(entry));
  }
};

// -- parameters ---

const char* kind_phrase(ParamKind kind) {
  switch (kind) {
    case ParamKind::boolean: return "a boolean (true or false)";
    case ParamKind::integer: return "an integer";
    case ParamKind::number: return "a number";
    case ParamKind::string: return "a string";
  }
  return "?";
}

/// What a parameter takes, as `swarmflow describe` would say it.
std::string param_hint(const ParamInfo& info) {
  std::string text = in_quotes(info.name) + " takes " + kind_phrase(info.kind);
  if (info.range.min || info.range.max) {
    text += " in [" + (info.range.min ? format_number(*info.range.min) : std::string("-inf")) + ", " +
            (info.range.max ? format_number(*info.range.max) : std::string("inf")) + "]";
  }
  if (!info.choices.empty()) text += ", one of: " + join(info.choices);
  text += ", default " + swarmflow::to_string(info.default_value);
  if (!info.description.empty()) text += ": " + info.description;
  return text;
}

/// Converts a YAML value to the parameter's declared kind, or nothing when it
/// is not written as that kind.
std::optional<ParamValue> convert_param(const YAML::Node& node, ParamKind kind) {
  if (!node.IsScalar()) return std::nullopt;
  const std::string& text = node.Scalar();
  if (kind == ParamKind::string) return ParamValue{text};
  if (is_quoted(node)) return std::nullopt;
  switch (kind) {
    case ParamKind::boolean: {
      bool value = false;
      if (!YAML::convert<bool>::decode(node, value)) return std::nullopt;
      return ParamValue{value};
    }
    case ParamKind::integer:
      if (auto value = parse_integer(text)) return ParamValue{*value};
      return std::nullopt;
    case ParamKind::number:
      if (auto value = parse_number(text)) return ParamValue{*value};
      return std::nullopt;
    case ParamKind::string: break;
  }
  return std::nullopt;
}

std::vector<std::string> port_names(const std::vector<PortInfo>& ports) {
  std::vector<std::string> names;
  names.reserve(ports.size());
  for (const auto& p : ports) names.push_back(p.name);
  return names;
}

bool accepts(const PortInfo& input, const PortInfo& output) {
  return input.type == "*" || input.type == output.type;
}

// -- the loader ---

/// What the checks across stages need to know about a stage beyond its decl.
struct StageFacts {
  bool id_ok = false;                  ///< a well-formed id that is not a duplicate
  bool type_known = false;             ///< `ports` holds the type's declared ports
  const StageSpec* ports = nullptr;    ///< from Registry::describe, one per type; ports only
  SourceLoc inputs_loc;                ///< of the `inputs:` key, if any
  std::set<std::string> named_inputs;  ///< input ports the definition mentions
};

/// A connection whose producing stage exists, for the cycle check.
struct Link {
  std::size_t from = 0;
  std::size_t to = 0;
  std::size_t input = 0;  ///< index into the consumer's decl.inputs
};

class Loader {
 public:
  Loader(std::string file, const Registry& registry, std::vector<Diagnostic>& diagnostics,
         const PluginLoader& load_plugin = {})
      : file_(std::move(file)),
        registry_(registry),
        load_plugin_(load_plugin),
        diagnostics_(diagnostics),
        first_diagnostic_(diagnostics.size()) {
    spec_.file = file_;
  }

  /// False, with a diagnostic, when a definition of `bytes` is too large to parse.
  bool size_allowed(std::uintmax_t bytes) {
    if (bytes <= static_cast<std::uintmax_t>(kMaxFileBytes)) return true;
    report_limit({1, 1}, "file: " + std::to_string(bytes) + " bytes", kMaxFileBytes, "bytes per definition",
                 "a definition of 100,000 stages fits in far less; is this the right file?");
    return false;
  }

  std::optional<PipelineSpec> load(const std::string& text) {
    if (!size_allowed(text.size())) return std::nullopt;
    YAML::Node root;
    try {
      root = YAML::Load(text);
    } catch (const YAML::Exception& e) {
      report(loc_of(e.mark), "YAML syntax error: " + e.msg,
             "fix the YAML near this position (indentation, brackets, quotes, `key: value`)");
      return std::nullopt;
    }
    try {
      read_root(root);
      if (stages_read_) check_across_stages();
    } catch (const YAML::Exception& e) {
      report(loc_of(e.mark), "cannot read the definition: " + e.msg, {});
    }
    sort_diagnostics();
    if (diagnostics_.size() > first_diagnostic_) return std::nullopt;
    return std::move(spec_);
  }

 private:
  // -- diagnostics ---

  void report(SourceLoc where, std::string message, std::string hint) {
    diagnostics_.push_back(Diagnostic{file_, where.line, where.column, std::move(message), std::move(hint)});
  }

  void sort_diagnostics() {
    std::stable_sort(diagnostics_.begin() + static_cast<std::ptrdiff_t>(first_diagnostic_),
                     diagnostics_.end(), [](const Diagnostic& a, const Diagnostic& b) {
                       return std::tie(a.line, a.column) < std::tie(b.line, b.column);
                     });
  }

  // -- generic readers ---

  /// The entries of a map node. Reports a node that is not a map, unknown keys
  /// (when `known` is not empty) and keys given twice; those are left out.
  std::optional<Entries> read_map(const YAML::Node& node, SourceLoc where, const std::string& what,
                                  const std::vector<std::string>& known) {
    if (!node.IsMap()) {
      report(where, what + " must be a map, got " + shown(node),
             "write it as `key: value` lines, or `{key: value, ...}`");
      return std::nullopt;
    }
    Entries entries;
    for (auto it = node.begin(); it != node.end(); ++it) {
      Entry entry{{}, it->first, it->second};
      if (!entry.key.IsScalar()) {
        report(entry.key_loc(), "a key of " + what + " is not a name", "write keys as plain names");
        continue;
      }
      entry.name = entry.key.Scalar();
      if (!known.empty() && std::find(known.begin(), known.end(), entry.name) == known.end()) {
        report(entry.key_loc(), "unknown key " + in_quotes(entry.name) + " in " + what,
               suggest(entry.name, known, "known keys: "));
        continue;
      }
      if (const Entry* first = entries.find(entry.name)) {
        report(entry.key_loc(), in_quotes(entry.name) + " is given twice in " + what,
               "remove one of them; the first is at line " + std::to_string(first->key_loc().line));
        continue;
      }
      entries.add(std::move(entry));
    }
    return entries;
  }

  std::optional<std::string> read_string(const Entry& e, const std::string& what) {
    if (!e.value.IsScalar()) {
      report(e.value_loc(), what + " must be a string, got " + shown(e.value), "write a single value");
      return std::nullopt;
    }
    return e.value.Scalar();
  }

  std::optional<std::int64_t> read_integer(const Entry& e, const std::string& what, std::int64_t min,
                                           std::int64_t max, const std::string& hint) {
    std::optional<std::int64_t> value;
    if (e.value.IsScalar() && !is_quoted(e.value)) value = parse_integer(e.value.Scalar());
    if (!value) {
      report(e.value_loc(), what + " must be an integer, got " + shown(e.value), hint);
      return std::nullopt;
    }
    if (*value < min || *value > max) {
      report(e.value_loc(),
             what + " must be between " + std::to_string(min) + " and " + std::to_string(max) + ", got " +
                 std::to_string(*value),
             hint);
      return std::nullopt;
    }
    return value;
  }

  /// Reports `asked` (what the file asks for, e.g. "units: 4096") as over `limit`.
  void report_limit(SourceLoc where, const std::string& asked, std::int64_t limit, const std::string& per,
                    const std::string& hint) {
    report(where, asked + " is over the limit of " + std::to_string(limit) + " " + per,
           hint + "; docs/pipelines.md lists the limits");
  }

  /// A count the file asks for: an integer of at least `min`, and at most
  /// `limit`. Above it the message reads "NAME: VALUE OF is over the limit of
  /// LIMIT PER", e.g. "replicas: 5000 of stage 'a' ... 1024 replicas per stage".
  std::optional<std::int64_t> read_count(const Entry& e, const std::string& what, const std::string& name,
                                         const std::string& of, std::int64_t min, std::int64_t limit,
                                         const std::string& per, const std::string& hint,
                                         const std::string& limit_hint) {
    auto value = read_integer(e, what, std::numeric_limits<std::int64_t>::min(),
                              std::numeric_limits<std::int64_t>::max(), hint);
    if (!value) return std::nullopt;
    if (*value < min) {
      report(e.value_loc(),
             what + " must be between " + std::to_string(min) + " and " + std::to_string(limit) + ", got " +
                 std::to_string(*value),
             hint);
      return std::nullopt;
    }
    if (*value > limit) {
      report_limit(e.value_loc(), name + ": " + std::to_string(*value) + of, limit, per, limit_hint);
      return std::nullopt;
    }
    return value;
  }

  std::optional<double> read_number(const Entry& e, const std::string& what, const std::string& hint) {
    std::optional<double> value;
    if (e.value.IsScalar() && !is_quoted(e.value)) value = parse_number(e.value.Scalar());
    if (!value) report(e.value_loc(), what + " must be a number, got " + shown(e.value), hint);
    return value;
  }

  std::optional<bool> read_boolean(const Entry& e, const std::string& what) {
    bool value = false;
    if (e.value.IsScalar() && !is_quoted(e.value) && YAML::convert<bool>::decode(e.value, value)) {
      return value;
    }
    report(e.value_loc(), what + " must be true or false, got " + shown(e.value),
           "write `" + e.name + ": true` or `" + e.name + ": false`");
    return std::nullopt;
  }

  // -- top level ---

  static bool is_tcp(const std::string& endpoint) { return endpoint.rfind("tcp://", 0) == 0; }

  void read_root(const YAML::Node& root) {
    if (!root.IsDefined() || root.IsNull()) {
      report({1, 1}, "the pipeline definition is empty", "start with `pipeline: NAME` and a `stages:` list");
      return;
    }
    auto entries = read_map(root, loc_of(root), "the pipeline definition", kTopKeys);
    if (!entries) return;
    read_name(*entries, root);
    const Entry* coordinator = entries->find("coordinator");
    if (coordinator != nullptr) {
      if (auto endpoint = read_string(*coordinator, "'coordinator'")) spec_.coordinator = *endpoint;
    }
    if (const Entry* e = entries->find("coordinator_key")) {
      if (auto key = read_string(*e, "'coordinator_key'")) spec_.coordinator_key = *key;
    }
    read_units(entries->find("units"));
    if (coordinator != nullptr && is_tcp(spec_.coordinator) && spec_.coordinator_key.empty()) {
      report(coordinator->value_loc(), "a tcp coordinator needs `coordinator_key`",
             "tcp endpoints use CURVE: make a key pair with `swarmflow keygen` and give its public key (or .pub file)");
    }
    // Plugins first: the stages may use the types they add.
    if (const Entry* e = entries->find("plugins")) read_plugins(*e);
    read_stages(entries->find("stages"), root);
    if (const Entry* e = entries->find("placement")) read_placement(*e);
    if (const Entry* e = entries->find("transport")) read_transport(*e);
    if (const Entry* e = entries->find("failure")) read_failure(*e);
    if (const Entry* e = entries->find("opencv")) read_opencv(*e);
    if (const Entry* e = entries->find("scenario")) read_scenario(*e);
  }

  /// `plugins: [lib/libmine.so, ...]` (or one path): shared libraries of
  /// stage packs, relative to the definition's folder.
  void read_plugins(const Entry& e) {
    const char* const hint = "list the plugin files, e.g. `plugins: [build/libmine.so]`, relative to this file";
    std::vector<YAML::Node> items;
    if (e.value.IsScalar()) {
      items.push_back(e.value);
    } else if (e.value.IsSequence()) {
      for (const auto& item : e.value) items.push_back(item);
    } else {
      report(e.value_loc(), "'plugins' must be a list of files, got " + shown(e.value), hint);
      return;
    }
    const std::filesystem::path folder = std::filesystem::path(file_).parent_path();
    for (const auto& item : items) {
      if (!item.IsScalar() || item.Scalar().empty()) {
        report(loc_of(item), "a plugin must be a file name, got " + shown(item), hint);
        continue;
      }
      std::filesystem::path path(item.Scalar());
      if (path.is_relative()) path = folder / path;
      const std::string resolved = path.lexically_normal().string();
      std::error_code ec;
      if (!std::filesystem::is_regular_file(resolved, ec)) {
        report(loc_of(item), "plugin file not found: " + resolved,
               "a relative path starts at the folder of this file; build the plugin or fix the path");
        continue;
      }
      if (load_plugin_) {
        if (Status s = load_plugin_(resolved); !s.ok()) {
          report(loc_of(item), s.message(), "rebuild the plugin against this swarmflow, or remove it from `plugins:`");
          continue;
        }
      }
      spec_.plugins.push_back(resolved);
    }
  }

  void read_name(const Entries& entries, const YAML::Node& root) {
    const Entry* e = entries.find("pipeline");
    if (e == nullptr) {
      report(loc_of(root), "the pipeline has no name", "add `pipeline: NAME` at the top");
      return;
    }
    auto name = read_string(*e, "'pipeline'");
    if (!name) return;
    if (name->empty()) {
      report(e->value_loc(), "the pipeline name is empty", "write `pipeline: NAME`");
      return;
    }
    spec_.name = *name;
  }

  // -- units ---

  void read_units(const Entry* e) {
    const std::size_t errors = diagnostics_.size();
    if (e == nullptr) {
      spec_.units.push_back(UnitDecl{"u0", {}, 0, 1.0, {}});
    } else if (e->value.IsScalar()) {
      auto count = read_count(*e, "'units'", "units", "", 1, kMaxUnits, "units per pipeline",
                              "give a number of units, or a list of `{id, endpoint, threads, speed}`",
                              kUnitsLimitHint);
      for (std::int64_t i = 0; count && i < *count; ++i) {
        spec_.units.push_back(UnitDecl{"u" + std::to_string(i), {}, 0, 1.0, {}});
      }
    } else if (e->value.IsSequence() && e->value.size() > static_cast<std::size_t>(kMaxUnits)) {
      report_limit(e->value_loc(), "units: a list of " + std::to_string(e->value.size()), kMaxUnits,
                   "units per pipeline", kUnitsLimitHint);
    } else if (e->value.IsSequence() && e->value.size() > 0) {
      std::size_t i = 0;
      for (const auto& unit : e->value) read_unit(unit, i++);
    } else {
      report(e->value_loc(), "'units' must be a number or a list of units, got " + shown(e->value),
             "write `units: 4`, or a list of `{id, endpoint, threads, speed}`");
    }
    units_ok_ = diagnostics_.size() == errors;
  }

  void read_unit(const YAML::Node& node, std::size_t index) {
    const std::string what = "unit " + std::to_string(index + 1);
    auto entries = read_map(node, loc_of(node), what, kUnitKeys);
    if (!entries) return;
    UnitDecl unit{"u" + std::to_string(index), {}, 0, 1.0, {}};
    if (const Entry* e = entries->find("id")) {
      auto id = read_string(*e, what + " id");
      if (id && !is_identifier(*id)) {
        report(e->value_loc(), "unit id " + in_quotes(*id) + " is not a valid name",
               "use letters, digits, '_' and '-' only");
      } else if (id) {
        unit.id = *id;
      }
    }
    for (const auto& other : spec_.units) {
      if (other.id == unit.id) {
        const Entry* e = entries->find("id");
        report(e != nullptr ? e->value_loc() : loc_of(node),
               "unit id " + in_quotes(unit.id) + " is used twice", "give every unit its own id");
      }
    }
    if (const Entry* e = entries->find("endpoint")) {
      if (auto endpoint = read_string(*e, what + " endpoint")) unit.endpoint = *endpoint;
    }
    if (const Entry* e = entries->find("threads")) {
      if (auto threads = read_integer(*e, what + " threads", 0, kMaxThreads,
                                      "worker threads of the unit; 0 = the machine's cores")) {
        unit.threads = static_cast<int>(*threads);
      }
    }
    if (const Entry* e = entries->find("speed")) {
      auto speed = read_number(*e, what + " speed", "a positive factor; 1 = nominal speed");
      if (speed && *speed <= 0) {
        report(e->value_loc(), what + " speed must be positive, got " + format_number(*speed),
               "a positive factor; 1 = nominal speed");
      } else if (speed) {
        unit.speed = *speed;
      }
    }
    if (const Entry* e = entries->find("public_key")) {
      if (auto key = read_string(*e, what + " public_key")) unit.public_key = *key;
    }
    if (is_tcp(unit.endpoint) && unit.public_key.empty()) {
      const Entry* e = entries->find("endpoint");
      report(e != nullptr ? e->value_loc() : loc_of(node), what + " has a tcp endpoint but no public_key",
             "tcp endpoints use CURVE: make a key pair with `swarmflow keygen` and give its public key (or .pub file)");
    }
    spec_.units.push_back(std::move(unit));
  }

  // -- stages ---

  void read_stages(const Entry* e, const YAML::Node& root) {
    if (e == nullptr) {
      report(loc_of(root), "the pipeline has no 'stages'", "add a `stages:` list with at least one stage");
      return;
    }
    if (!e->value.IsSequence()) {
      report(e->value_loc(), "'stages' must be a list, got " + shown(e->value),
             "write each stage as a list item starting with `- id:`");
      return;
    }
    if (e->value.size() == 0) {
      report(e->value_loc(), "'stages' is empty", "add at least one stage");
      return;
    }
    if (e->value.size() > static_cast<std::size_t>(kMaxStages)) {
      report_limit(e->key_loc(), "stages: a list of " + std::to_string(e->value.size()), kMaxStages,
                   "stages per pipeline", "split the pipeline, or give a stage more replicas instead of copies");
      return;
    }
    spec_.stages.reserve(e->value.size());
    facts_.reserve(e->value.size());
    std::size_t i = 0;
    for (const auto& stage : e->value) read_stage(stage, i++);
    stages_read_ = true;
    check_totals();
  }

  /// The limits on the whole pipeline: replicas and edges of all stages.
  void check_totals() {
    std::int64_t replicas = 0;
    std::int64_t edges = 0;
    bool replicas_reported = false;
    for (std::size_t i = 0; i < spec_.stages.size(); ++i) {
      const StageDecl& decl = spec_.stages[i];
      replicas += decl.max_replicas;
      if (replicas > kMaxTotalReplicas && !replicas_reported) {
        replicas_reported = true;
        std::int64_t total = 0;
        for (const auto& d : spec_.stages) total += d.max_replicas;
        report_limit(decl.loc, "replicas: " + std::to_string(total) + " in all stages", kMaxTotalReplicas,
                     "replicas per pipeline",
                     "the total passes the limit at " + stage_name(decl, i) + "; give stages fewer replicas");
      }
      const auto before = edges;
      edges += static_cast<std::int64_t>(decl.inputs.size());
      if (before <= kMaxEdges && edges > kMaxEdges) {
        std::int64_t total = 0;
        for (const auto& d : spec_.stages) total += static_cast<std::int64_t>(d.inputs.size());
        const InputDecl& crossing = decl.inputs[static_cast<std::size_t>(kMaxEdges - before)];
        report_limit(crossing.loc, "edges: " + std::to_string(total) + " producers named in all inputs",
                     kMaxEdges, "edges per pipeline",
                     "the total passes the limit here, at " + stage_name(decl, i) +
                         "; connect fewer producers to each input");
      }
    }
  }

  void read_stage(const YAML::Node& node, std::size_t index) {
    StageDecl decl;
    StageFacts facts;
    decl.loc = loc_of(node);
    auto entries = read_map(node, decl.loc, provisional_stage_name(node, index), kStageKeys);
    if (!entries) return;
    read_stage_id(*entries, decl, facts, index);
    const std::string what = stage_name(decl, index);
    read_stage_type(*entries, decl, facts, what);
    if (const Entry* e = entries->find("replicas")) read_replicas(*e, decl, what);
    if (const Entry* e = entries->find("params")) read_params(*e, decl, what);
    if (const Entry* e = entries->find("inputs")) read_inputs(*e, decl, facts, what);
    if (const Entry* e = entries->find("queue")) read_queue(*e, decl, what);
    if (const Entry* e = entries->find("key")) read_key(*e, decl, what);
    if (const Entry* e = entries->find("join")) read_join(*e, decl, facts, what);
    if (const Entry* e = entries->find("feedback")) {
      if (auto feedback = read_boolean(*e, "'feedback' of " + what)) decl.feedback = *feedback;
    }
    if (const Entry* e = entries->find("placement")) read_stage_placement(*e, decl, what);
    if (const Entry* e = entries->find("fanout")) read_fanout(*e, decl, what);
    if (facts.type_known && facts.ports->requires_join() && !decl.join.enabled && facts.named_inputs.size() >= 2) {
      report(facts.inputs_loc.line > 0 ? facts.inputs_loc : decl.loc,
             what + " needs its inputs together in one step, but without `join:` it would see each alone (and do "
                    "nothing)",
             "add `join: {key: seq}` (or `key: part_id` when its inputs come from different cameras of one part)");
    }
    spec_.stages.push_back(std::move(decl));
    facts_.push_back(std::move(facts));
  }

  /// How to name a stage before its id is checked: by its id if it has one.
  static std::string provisional_stage_name(const YAML::Node& node, std::size_t index) {
    if (node.IsMap()) {
      const YAML::Node id = node["id"];
      if (id.IsDefined() && id.IsScalar() && is_identifier(id.Scalar())) {
        return "stage " + in_quotes(id.Scalar());
      }
    }
    return "stage " + std::to_string(index + 1);
  }

  static std::string stage_name(const StageDecl& decl, std::size_t index) {
    return decl.id.empty() ? "stage " + std::to_string(index + 1) : "stage " + in_quotes(decl.id);
  }

  void read_stage_id(const Entries& entries, StageDecl& decl, StageFacts& facts, std::size_t index) {
    const Entry* e = entries.find("id");
    if (e == nullptr) {
      report(decl.loc, "stage " + std::to_string(index + 1) + " has no 'id'",
             "add `id: NAME`; other stages name it in their inputs");
      return;
    }
    auto id = read_string(*e, "the stage id");
    if (!id) return;
    if (!is_identifier(*id)) {
      report(e->value_loc(), "stage id " + in_quotes(*id) + " is not a valid name",
             "use letters, digits, '_' and '-' only");
      return;
    }
    decl.id = *id;
    auto [it, inserted] = first_stage_.emplace(*id, spec_.stages.size());
    if (!inserted) {
      report(e->value_loc(), "duplicate stage id " + in_quotes(*id),
             "stage ids must be unique; " + in_quotes(*id) + " is first defined at line " +
                 std::to_string(spec_.stages[it->second].loc.line) + "; rename one of them");
      return;
    }
    facts.id_ok = true;
  }

  void read_stage_type(const Entries& entries, StageDecl& decl, StageFacts& facts, const std::string& what) {
    const Entry* e = entries.find("type");
    if (e == nullptr) {
      report(decl.loc, what + " has no 'type'",
             "add `type: TYPE`; `swarmflow describe` lists the stage types");
      return;
    }
    auto type = read_string(*e, "the type of " + what);
    if (!type) return;
    decl.type = *type;
    if (registry_.find(*type) == nullptr) {
      const std::string best = registry_.nearest(*type);
      report(e->value_loc(), "unknown stage type " + in_quotes(*type),
             (best.empty() ? std::string() : "did you mean " + in_quotes(best) + "? ") +
                 "`swarmflow describe` lists the registered types");
      return;
    }
    auto known = ports_of_type_.find(*type);
    if (known == ports_of_type_.end()) {
      StageSpec ports;
      if (!registry_.describe(*type, ports).ok()) return;
      known = ports_of_type_.emplace(*type, std::move(ports)).first;
    }
    facts.ports = &known->second;
    facts.type_known = true;
  }

  void read_replicas(const Entry& e, StageDecl& decl, const std::string& what) {
    const std::string hint = "give a number of replicas (1 or more), or `{min: N, max: M}`";
    if (!e.value.IsMap()) {
      if (auto n = read_count(e, "'replicas' of " + what, "replicas", " of " + what, 1, kMaxReplicas,
                              "replicas per stage", hint, kReplicasLimitHint)) {
        decl.replicas = decl.min_replicas = decl.max_replicas = static_cast<int>(*n);
      }
      return;
    }
    auto entries = read_map(e.value, e.value_loc(), "'replicas' of " + what, kReplicaKeys);
    if (!entries) return;
    std::optional<std::int64_t> min = 1;
    std::optional<std::int64_t> max;
    if (const Entry* m = entries->find("min")) {
      min = read_count(*m, "'min' replicas of " + what, "min replicas", " of " + what, 1, kMaxReplicas,
                       "replicas per stage", hint, kReplicasLimitHint);
    }
    if (const Entry* m = entries->find("max")) {
      max = read_count(*m, "'max' replicas of " + what, "max replicas", " of " + what, 1, kMaxReplicas,
                       "replicas per stage", hint, kReplicasLimitHint);
    }
    if (!min || (entries->find("max") != nullptr && !max)) return;
    if (!max) max = min;
    if (*min > *max) {
      report(
          entries->find("max")->value_loc(),
          "'replicas' of " + what + " has min " + std::to_string(*min) + " above max " + std::to_string(*max),
          "make min at most max");
      return;
    }
    // Every replica up to max exists from the start; those past min stand
    // by until the placement adds them (docs/placement.md).
    decl.min_replicas = static_cast<int>(*min);
    decl.replicas = decl.max_replicas = static_cast<int>(*max);
    decl.replicas_loc = e.value_loc();
  }

  // -- parameters ---

  void read_params(const Entry& e, StageDecl& decl, const std::string& what) {
    auto entries = read_map(e.value, e.value_loc(), "'params' of " + what, {});
    const StageType* type = registry_.find(decl.type);
    if (!entries || type == nullptr) return;
    // A fresh instance whose fields StageSpec::set writes, so that ranges and
    // choices are checked exactly as at run time.
    auto stage = type->make();
    StageSpec spec;
    stage->setup(spec);
    for (const auto& entry : entries->items) read_param(entry, decl, spec);
  }

  void read_param(const Entry& e, StageDecl& decl, StageSpec& spec) {
    const ParamInfo* info = spec.find_param(e.name);
    if (info == nullptr) {
      std::vector<std::string> names;
      for (const auto& p : spec.params()) names.push_back(p.name);
      report(e.key_loc(), "unknown parameter " + in_quotes(e.name) + " of " + decl.type,
             names.empty() ? decl.type + " takes no parameters; remove it"
                           : suggest(e.name, names, decl.type + " takes: "));
      return;
    }
    auto value = convert_param(e.value, info->kind);
    if (!value) {
      report(e.value_loc(),
             "parameter " + in_quotes(e.name) + " must be " + kind_phrase(info->kind) + ", got " +
                 shown(e.value),
             param_hint(*info));
      return;
    }
    if (!spec.set(e.name, *value).ok()) {
      report(e.value_loc(),
             "parameter " + in_quotes(e.name) + " = " + swarmflow::to_string(*value) +
                 (info->choices.empty() ? " is out of range" : " is not one of the allowed values"),
             param_hint(*info));
      return;
    }
    decl.params.push_back(ParamDecl{e.name, *value, e.value_loc()});
  }

  // -- inputs ---

  void read_inputs(const Entry& e, StageDecl& decl, StageFacts& facts, const std::string& what) {
    facts.inputs_loc = e.key_loc();
    auto entries = read_map(e.value, e.value_loc(), "'inputs' of " + what, {});
    if (!entries) return;
    for (const auto& entry : entries->items) {
      facts.named_inputs.insert(entry.name);
      if (facts.type_known && facts.ports->input_index(entry.name) < 0) {
        const auto& inputs = facts.ports->inputs();
        report(entry.key_loc(), decl.type + " has no input " + in_quotes(entry.name),
               inputs.empty() ? decl.type + " is a source and takes no inputs; remove `inputs:`"
                              : decl.type + " inputs: " + join(port_names(inputs)));
      }
      read_input(entry, decl, what);
    }
  }

  void read_input(const Entry& e, StageDecl& decl, const std::string& what) {
    if (e.value.IsSequence() && e.value.size() > 0) {
      // Fan-in: several producers feed one port, each once.
      const std::size_t first = decl.inputs.size();
      for (const auto& item : e.value) read_input_source(e.name, item, decl);
      refuse_repeated_producers(decl, first, what);
      return;
    }
    read_input_source(e.name, e.value, decl);
  }

  /// A producer listed twice on one input would deliver each envelope twice.
  /// Reports and drops every repeat among decl.inputs[first..].
  void refuse_repeated_producers(StageDecl& decl, std::size_t first, const std::string& what) {
    std::unordered_map<std::string, SourceLoc> seen;
    std::size_t kept = first;
    for (std::size_t i = first; i < decl.inputs.size(); ++i) {
      InputDecl& in = decl.inputs[i];
      const std::string source = in.from_stage + "/" + in.from_port;
      auto [it, inserted] = seen.emplace(source, in.loc);
      if (!inserted) {
        report(in.loc,
               "input " + in_quotes(in.port) + " of " + what + " lists producer " + in_quotes(source) + " twice",
               "list each producer once: twice would deliver each of its envelopes twice; the first is at line " +
                   std::to_string(it->second.line) + ", column " + std::to_string(it->second.column));
        continue;
      }
      if (kept != i) decl.inputs[kept] = std::move(in);
      ++kept;
    }
    decl.inputs.resize(kept);
  }

  void read_input_source(const std::string& port, const YAML::Node& value, StageDecl& decl) {
    const Entry e{port, YAML::Node(), value};
    const std::string hint = "write the source as `stage/port` (or a list of them), e.g. `" + e.name +
                             ": camera/out`";
    if (!e.value.IsScalar()) {
      report(e.value_loc(),
             "input " + in_quotes(e.name) + " must name its source as `stage/port`, got " + shown(e.value),
             hint);
      return;
    }
    const std::string& text = e.value.Scalar();
    const auto slash = text.find('/');
    const std::string from_stage = text.substr(0, slash);
    const std::string from_port = slash == std::string::npos ? std::string() : text.substr(slash + 1);
    if (!is_identifier(from_stage) || !is_identifier(from_port)) {
      report(e.value_loc(),
             "input " + in_quotes(e.name) + " has source " + in_quotes(text) + ", not `stage/port`", hint);
      return;
    }
    decl.inputs.push_back(InputDecl{e.name, from_stage, from_port, e.value_loc()});
  }

  // -- queue, key, stage placement ---

  void read_queue(const Entry& e, StageDecl& decl, const std::string& what) {
    auto entries = read_map(e.value, e.value_loc(), "'queue' of " + what, kQueueKeys);
    if (!entries) return;
    if (const Entry* c = entries->find("capacity")) {
      if (auto capacity = read_integer(*c, "queue capacity of " + what, 1, kMaxCapacity,
                                       "the number of envelopes each replica may hold, 1 or more")) {
        decl.queue.capacity = static_cast<int>(*capacity);
      }
    }
    if (const Entry* o = entries->find("overflow")) {
      auto policy = read_string(*o, "overflow policy of " + what);
      if (!policy) return;
      if (*policy == "block") {
        decl.queue.overflow = Overflow::block;
      } else if (*policy == "drop_oldest") {
        decl.queue.overflow = Overflow::drop_oldest;
      } else if (*policy == "drop_newest") {
        decl.queue.overflow = Overflow::drop_newest;
      } else {
        const std::string best = nearest_of(*policy, kOverflows);
        report(o->value_loc(), "unknown overflow policy " + in_quotes(*policy),
               (best.empty() ? std::string() : "did you mean " + in_quotes(best) + "? ") +
                   "use one of: " + join(kOverflows));
      }
    }
  }

  void read_key(const Entry& e, StageDecl& decl, const std::string& what) {
    auto key = read_string(e, "'key' of " + what);
    if (!key) return;
    if (*key == "stream") {
      decl.key = KeyField::stream;
    } else if (*key == "part_id") {
      decl.key = KeyField::part_id;
    } else {
      report(e.value_loc(), "unknown routing key " + in_quotes(*key) + " of " + what,
             "use `stream` (each stream stays on one replica) or `part_id` (each part does); remove `key:` "
             "otherwise");
      return;
    }
    decl.keyed = true;
  }

  void read_fanout(const Entry& e, StageDecl& decl, const std::string& what) {
    auto fanout = read_string(e, "'fanout' of " + what);
    if (!fanout) return;
    if (*fanout == "one") return;
    if (*fanout != "all") {
      report(e.value_loc(), "unknown fanout " + in_quotes(*fanout) + " of " + what,
             "use `all` (each envelope goes to every replica, for a voter to compare) or `one` (the default: "
             "each goes to one replica)");
      return;
    }
    decl.fanout_all = true;
    decl.fanout_loc = e.key_loc();
    if (decl.keyed) {
      report(e.key_loc(), "`fanout: all` and `key: " + std::string(to_string(decl.key)) + "` of " + what +
                              " contradict each other: a key sends each envelope to one replica, fanout to all",
             "remove `key:` (every replica sees every stream anyway) or `fanout:`");
    }
  }

  void read_join(const Entry& e, StageDecl& decl, const StageFacts& facts, const std::string& what) {
    auto entries = read_map(e.value, e.value_loc(), "'join' of " + what, kJoinKeys);
    if (!entries) return;
    decl.join.enabled = true;
    decl.join.loc = e.key_loc();
    if (const Entry* k = entries->find("key")) {
      auto key = read_string(*k, "join key of " + what);
      if (key && *key == "seq") {
        decl.join.key = KeyField::seq;
      } else if (key && *key == "part_id") {
        decl.join.key = KeyField::part_id;
      } else if (key) {
        report(k->value_loc(), "unknown join key " + in_quotes(*key) + " of " + what,
               "use `seq` (same sequence number) or `part_id` (same part)");
      }
    }
    if (const Entry* t = entries->find("timeout_ms")) {
      if (auto ms = read_integer(*t, "join timeout of " + what, 1, 3'600'000,
                                 "how long an incomplete set may wait, in ms")) {
        decl.join.timeout_ms = static_cast<int>(*ms);
      }
    }
    if (facts.type_known && facts.ports->inputs().size() < 2) {
      report(e.key_loc(), what + " has fewer than two inputs, so there is nothing to join", "remove `join:`");
    }
  }

  void read_stage_placement(const Entry& e, StageDecl& decl, const std::string& what) {
    auto entries = read_map(e.value, e.value_loc(), "'placement' of " + what, kStagePlacementKeys);
    if (!entries) return;
    if (const Entry* s = entries->find("spread")) {
      if (auto spread = read_boolean(*s, "'spread' of " + what)) decl.spread = *spread;
    }
    const Entry* u = entries->find("units");
    if (u == nullptr) return;
    if (!u->value.IsSequence()) {
      report(u->value_loc(),
             "'units' of the placement of " + what + " must be a list, got " + shown(u->value),
             "write `units: [u0, u1]`");
      return;
    }
    if (unit_ids_.empty()) {
      for (const auto& unit : spec_.units) {
        unit_ids_.push_back(unit.id);
        unit_id_set_.insert(unit.id);
      }
    }
    for (const auto& item : u->value) {
      if (!item.IsScalar()) {
        report(loc_of(item), "a unit of the placement of " + what + " is " + shown(item) + ", not a unit id",
               "write `units: [u0, u1]`");
        continue;
      }
      const std::string& id = item.Scalar();
      if (units_ok_ && unit_id_set_.count(id) == 0) {
        report(loc_of(item), what + " is pinned to unknown unit " + in_quotes(id),
               suggest_within_budget(id, unit_ids_, "units are: "));
        continue;
      }
      decl.pin_units.push_back(id);
    }
  }

  // -- pipeline placement ---

  void read_placement(const Entry& e) {
    auto entries = read_map(e.value, e.value_loc(), "'placement'", kPlacementKeys);
    if (!entries) return;
    if (const Entry* p = entries->find("policy")) {
      auto policy = read_string(*p, "the placement policy");
      if (policy && std::find(kPolicies.begin(), kPolicies.end(), *policy) == kPolicies.end()) {
        report(p->value_loc(), "unknown placement policy " + in_quotes(*policy),
               "use `static` (replicas stay where they start) or `adaptive` (follow the load)");
      } else if (policy) {
        spec_.placement.policy = *policy;
      }
    }
    if (const Entry* r = entries->find("rebalance_above")) {
      const std::string hint = "the utilisation above which replicas move, in (0, 1]";
      auto above = read_number(*r, "'rebalance_above'", hint);
      if (above && (*above <= 0 || *above > 1)) {
        report(r->value_loc(), "'rebalance_above' must be in (0, 1], got " + format_number(*above), hint);
      } else if (above) {
        spec_.placement.rebalance_above = *above;
      }
    }
    if (const Entry* i = entries->find("interval_ms")) {
      if (auto interval = read_integer(*i, "'interval_ms'", 1, std::numeric_limits<int>::max(),
                                       "how often units report their load, in milliseconds (1 or more)")) {
        spec_.placement.interval_ms = static_cast<int>(*interval);
      }
    }
    if (const Entry* h = entries->find("hysteresis")) {
      const std::string hint = "how far below rebalance_above a move must leave its target, in [0, 0.5]";
      auto v = read_number(*h, "'hysteresis'", hint);
      if (v && (*v < 0 || *v > 0.5)) {
        report(h->value_loc(), "'hysteresis' must be in [0, 0.5], got " + format_number(*v), hint);
      } else if (v) {
        spec_.placement.hysteresis = *v;
      }
    }
    if (const Entry* w = entries->find("sustain_ms")) {
      if (auto v = read_integer(*w, "'sustain_ms'", 0, 3'600'000,
                                "how long a condition must hold before anything moves, in milliseconds")) {
        spec_.placement.sustain_ms = static_cast<int>(*v);
      }
    }
    if (const Entry* c = entries->find("cooldown_ms")) {
      if (auto v = read_integer(*c, "'cooldown_ms'", 0, 3'600'000,
                                "how long nothing moves after a move, in milliseconds")) {
        spec_.placement.cooldown_ms = static_cast<int>(*v);
      }
    }
  }

  void read_transport(const Entry& e) {
    auto entries = read_map(e.value, e.value_loc(), "'transport'", kTransportKeys);
    if (!entries) return;
    TransportDecl& t = spec_.transport;
    if (const Entry* m = entries->find("max_message_bytes")) {
      if (auto v = read_integer(*m, "'max_message_bytes'", kMinMessageBytes, kMaxMessageBytes,
                                "the largest payload one message between units may carry, in bytes "
                                "(default 67108864, 64 MiB)")) {
        t.max_message_bytes = *v;
      }
    }
    if (const Entry* h = entries->find("high_water_mark")) {
      if (auto v = read_integer(*h, "'high_water_mark'", 1, std::numeric_limits<int>::max(),
                                "messages each socket queues each way (default 10000); credits bound the rest")) {
        t.high_water_mark = *v;
      }
    }
    if (const Entry* l = entries->find("linger_ms")) {
      if (auto v = read_integer(*l, "'linger_ms'", 0, 60000,
                                "how long closing a socket may wait to send to a peer, in ms (default 200)")) {
        t.linger_ms = *v;
      }
    }
    if (const Entry* b = entries->find("pack_below_bytes")) {
      if (auto v = read_integer(*b, "'pack_below_bytes'", 0, kMaxPackBelowBytes,
                                "payloads up to this many bytes travel many to a frame; 0 packs none "
                                "(default 1024)")) {
        if (*v >= t.max_message_bytes) {
          report(b->value_loc(),
                 "'pack_below_bytes' must be below 'max_message_bytes' (" + std::to_string(t.max_message_bytes) +
                     "), got " + std::to_string(*v),
                 "a pack must fit in one message");
        } else {
          t.pack_below_bytes = *v;
        }
      }
    }
    if (const Entry* p = entries->find("in_process")) {
      auto how = read_string(*p, "'in_process'");
      if (how && (*how == "zeromq" || *how == "direct")) {
        t.in_process_direct = *how == "direct";
      } else if (how) {
        const std::string best = nearest_of(*how, kInProcess);
        report(p->value_loc(), "unknown 'in_process' " + in_quotes(*how),
               (best.empty() ? std::string() : "did you mean " + in_quotes(best) + "? ") +
                   "use `zeromq` (units of one process talk over inproc://, as a cluster's do) or `direct` "
                   "(straight to the replicas' actors)");
      }
    }
  }

  /// `opencv: {threads: N | auto}`: OpenCV's worker threads during the run.
  void read_opencv(const Entry& e) {
    OpenCvDecl& cv = spec_.opencv;
    cv.given = true;
    cv.loc = e.key_loc();
    auto entries = read_map(e.value, e.value_loc(), "'opencv'", kOpenCvKeys);
    if (!entries) return;
    const Entry* t = entries->find("threads");
    if (t == nullptr) return;
    cv.loc = t->value_loc();
    const char* const hint =
        "OpenCV's own worker threads in this process while the run lasts: 1 (the default: the units' "
        "workers run its loops themselves) up to 256, or `auto` (OpenCV's default, a thread a core)";
    if (t->value.IsScalar() && !is_quoted(t->value) && t->value.Scalar() == "auto") {
      cv.threads = 0;
    } else if (auto v = read_integer(*t, "'opencv.threads'", 1, 256, hint)) {
      cv.threads = static_cast<int>(*v);
    }
  }

  /// A number in [min, max], finite, with the same diagnostics as an integer's.
  std::optional<double> read_number_in(const Entry& e, const std::string& what, double min, double max,
                                       const std::string& hint) {
    auto v = read_number(e, what, hint);
    if (!v) return std::nullopt;
    if (!std::isfinite(*v) || *v < min || *v > max) {
      report(e.value_loc(),
             what + " must be between " + format_number(min) + " and " + format_number(max) + ", got " +
                 format_number(*v),
             hint);
      return std::nullopt;
    }
    return v;
  }

  /// `scenario:`, a list of `{at_s, unit, speed}`: emulated load changes.
  void read_scenario(const Entry& e) {
    if (!e.value.IsSequence()) {
      report(e.value_loc(), "'scenario' must be a list, got " + shown(e.value),
             "write a list of `{at_s: 2.0, unit: u1, speed: 0.25}`");
      return;
    }
    std::size_t index = 0;
    for (const auto& node : e.value) {
      const std::string what = "scenario step " + std::to_string(++index);
      auto entries = read_map(node, loc_of(node), what, kScenarioKeys);
      if (!entries) continue;
      ScenarioStep step;
      step.loc = loc_of(node);
      bool ok = true;
      const Entry* at = entries->find("at_s");
      const Entry* unit = entries->find("unit");
      const Entry* speed = entries->find("speed");
      if (at == nullptr || unit == nullptr || speed == nullptr) {
        report(loc_of(node), what + " needs `at_s`, `unit` and `speed`", "write `{at_s: 2.0, unit: u1, speed: 0.25}`");
        continue;
      }
      if (auto v = read_number_in(*at, what + " at_s", 0, 1e7, "seconds into the run, 0 or more")) {
        step.at_s = *v;
      } else {
        ok = false;
      }
      if (auto id = read_string(*unit, what + " unit")) {
        bool known = false;
        for (const auto& u : spec_.units) known = known || u.id == *id;
        if (!known) {
          report(unit->value_loc(), what + ": no unit " + in_quotes(*id) + " in the pipeline",
                 "name a unit of `units:`");
          ok = false;
        }
        step.unit = *id;
      } else {
        ok = false;
      }
      if (auto v = read_number_in(*speed, what + " speed", 0.001, 1000, "the unit's new speed factor; 1 = nominal")) {
        step.speed = *v;
      } else {
        ok = false;
      }
      if (ok) spec_.scenario.push_back(std::move(step));
    }
  }

  void read_failure(const Entry& e) {
    auto entries = read_map(e.value, e.value_loc(), "'failure'", kFailureKeys);
    if (!entries) return;
    FailureDecl& f = spec_.failure;
    if (const Entry* h = entries->find("heartbeat_ms")) {
      if (auto v = read_integer(*h, "'heartbeat_ms'", 1, 10000,
                                "how often units and the coordinator send heartbeats, in ms (default 25)")) {
        f.heartbeat_ms = static_cast<int>(*v);
      }
    }
    if (const Entry* p = entries->find("phi_threshold")) {
      if (auto v = read_number_in(*p, "'phi_threshold'", 1, 100,
                                  "the suspicion at which a silent peer is declared dead; 8 means odds of 1 in "
                                  "10^8 that it is only late (default 8)")) {
        f.phi_threshold = *v;
      }
    }
    if (const Entry* m = entries->find("min_std_ms")) {
      if (auto v = read_number_in(*m, "'min_std_ms'", 0.1, 60000,
                                  "the least standard deviation of heartbeat intervals assumed, in ms "
                                  "(default 5)")) {
        f.min_std_ms = *v;
      }
    }
    if (const Entry* a = entries->find("acceptable_pause_ms")) {
      if (auto v = read_integer(*a, "'acceptable_pause_ms'", 0, 600000,
                                "a silence this much longer than the usual interval is not yet suspicious, in ms "
                                "(default 200)")) {
        f.acceptable_pause_ms = static_cast<int>(*v);
      }
    }
    if (const Entry* n = entries->find("snapshot_every")) {
      if (auto v = read_integer(*n, "'snapshot_every'", 1, 1000000,
                                "a stateful replica snapshots its state after this many inputs (default 64)")) {
        f.snapshot_every = static_cast<int>(*v);
      }
    }
    if (const Entry* t = entries->find("snapshot_ms")) {
      if (auto v = read_integer(*t, "'snapshot_ms'", 1, 600000,
                                "a stateful replica snapshots its state at least this often while it works, in ms "
                                "(default 100)")) {
        f.snapshot_ms = static_cast<int>(*v);
      }
    }
    if (const Entry* w = entries->find("window")) {
      if (auto v = read_integer(*w, "'window'", 2, 10000,
                                "how many heartbeat intervals the detector remembers (default 200)")) {
        f.window = static_cast<int>(*v);
      }
    }
  }

  // -- checks across stages ---

  void check_across_stages() {
    // A range asks for replicas added and removed while the run goes on:
    // not where a replica cannot join or leave mid-stream.
    for (const auto& s : spec_.stages) {
      if (s.min_replicas == s.max_replicas) continue;
      std::string why;
      if (s.inputs.empty()) {
        why = "it is a source (its data comes from where each replica runs)";
      } else if (s.join.enabled) {
        why = "it joins its inputs (a replica leaving would split its open sets)";
      } else if (s.fanout_all) {
        why = "it takes `fanout: all` (a replica added would miss what the others were sent)";
      } else if (s.feedback || feeds_feedback(s.id)) {
        why = "it is in a cycle (draining a replica would wait on itself)";
      }
      if (why.empty()) continue;
      report(s.replicas_loc,
             "'replicas' of stage '" + s.id + "' is a range (" + std::to_string(s.min_replicas) + " to " +
                 std::to_string(s.max_replicas) + "), but " + why,
             "give a number of replicas, e.g. `replicas: " + std::to_string(s.max_replicas) + "`");
    }
    std::vector<Link> links = check_sources();
    check_unconnected();
    check_cycles(links);
    check_frame_regions(links);
  }

  /// Whether a stage with `feedback: true` takes input from stage `id`.
  bool feeds_feedback(const std::string& id) const {
    for (const auto& s : spec_.stages) {
      if (!s.feedback) continue;
      for (const auto& in : s.inputs) {
        if (in.from_stage == id) return true;
      }
    }
    return false;
  }

  /// An integer parameter of `decl` as written, else its declared default;
  /// `where` is the value's place, or the stage's when it is the default.
  static std::optional<std::int64_t> integer_param(const StageDecl& decl, const StageSpec& spec,
                                                   const std::string& name, SourceLoc* where) {
    const ParamValue* value = nullptr;
    *where = decl.loc;
    for (const auto& p : decl.params) {
      if (p.name == name) {
        value = &p.value;
        *where = p.loc;
      }
    }
    if (value == nullptr) {
      const ParamInfo* info = spec.find_param(name);
      if (info == nullptr) return std::nullopt;
      value = &info->default_value;
    }
    if (const auto* i = std::get_if<std::int64_t>(value)) return *i;
    if (const auto* d = std::get_if<double>(value)) return static_cast<std::int64_t>(*d);
    return std::nullopt;
  }

  /// A region a stage reads (StageSpec::frame_region) that lies outside the
  /// frames its producer says it makes (StageSpec::frame_size): every frame
  /// would miss, so it is refused now rather than failing at run time.
  void check_frame_regions(const std::vector<Link>& links) {
    for (const Link& link : links) {
      const StageFacts& to_facts = facts_[link.to];
      const StageFacts& from_facts = facts_[link.from];
      if (!to_facts.type_known || !from_facts.type_known) continue;
      if (to_facts.ports->frame_regions().empty() || from_facts.ports->frame_sizes().empty()) continue;
      const StageDecl& consumer = spec_.stages[link.to];
      const StageDecl& producer = spec_.stages[link.from];
      const InputDecl& in = consumer.inputs[link.input];
      const int in_port = to_facts.ports->input_index(in.port);
      const int out_port = from_facts.ports->output_index(in.from_port);
      for (const auto& size : from_facts.ports->frame_sizes()) {
        if (size.port != out_port) continue;
        SourceLoc unused;
        const auto w = integer_param(producer, *from_facts.ports, size.width, &unused);
        const auto h = integer_param(producer, *from_facts.ports, size.height, &unused);
        if (!w || !h || *w <= 0 || *h <= 0) continue;
        for (const auto& region : to_facts.ports->frame_regions()) {
          if (region.port == in_port) check_region(consumer, *to_facts.ports, region, in, producer, *w, *h);
        }
      }
    }
  }

  void check_region(const StageDecl& consumer, const StageSpec& spec, const FrameRegionDecl& region,
                    const InputDecl& in, const StageDecl& producer, std::int64_t frame_w, std::int64_t frame_h) {
    SourceLoc x_loc, y_loc, w_loc, h_loc;
    const auto x = integer_param(consumer, spec, region.x, &x_loc);
    const auto y = integer_param(consumer, spec, region.y, &y_loc);
    const auto w = integer_param(consumer, spec, region.width, &w_loc);
    const auto h = integer_param(consumer, spec, region.height, &h_loc);
    if (!x || !y || !w || !h) return;
    const std::string frames = "the " + std::to_string(frame_w) + "x" + std::to_string(frame_h) + " frames of " +
                               in_quotes(in.from_stage + "/" + in.from_port) + " (its " +
                               in_quotes(producer.type) + " width and height)";
    const std::string what = "the region of stage " + in_quotes(consumer.id);
    const std::string hint = "keep " + region.x + " + " + region.width + " within " + std::to_string(frame_w) + " and " +
                             region.y + " + " + region.height + " within " + std::to_string(frame_h) +
                             " (0 = to the edge), or change the size of the frames upstream";
    if (*x >= frame_w || *y >= frame_h) {
      report(*x >= frame_w ? x_loc : y_loc,
             what + " starts at " + region.x + " " + std::to_string(*x) + ", " + region.y + " " + std::to_string(*y) +
                 ", outside " + frames,
             hint);
      return;
    }
    if (*w > 0 && *x + *w > frame_w) {
      report(w_loc,
             what + " ends at " + region.x + " + " + region.width + " = " + std::to_string(*x + *w) +
                 ", beyond the right edge of " + frames,
             hint);
    }
    if (*h > 0 && *y + *h > frame_h) {
      report(h_loc,
             what + " ends at " + region.y + " + " + region.height + " = " + std::to_string(*y + *h) +
                 ", beyond the bottom edge of " + frames,
             hint);
    }
  }

  /// "did you mean" among `candidates` while the file's budget of name
  /// comparisons lasts; then, or with none close, a short list of them.
  std::string suggest_within_budget(const std::string& name, const std::vector<std::string>& candidates,
                                    const std::string& list_intro) {
    if (candidates.size() <= nearest_budget_) {
      nearest_budget_ -= candidates.size();
      return suggest(name, candidates, list_intro);
    }
    return list_intro + join_some(candidates);
  }

  /// Stage ids in sorted order, made once.
  const std::vector<std::string>& stage_ids() {
    if (stage_ids_.empty()) {
      stage_ids_.reserve(first_stage_.size());
      for (const auto& [id, index] : first_stage_) stage_ids_.push_back(id);
    }
    return stage_ids_;
  }

  /// Resolves every `stage/port` source and checks port names and types.
  std::vector<Link> check_sources() {
    std::vector<Link> links;
    for (std::size_t to = 0; to < spec_.stages.size(); ++to) {
      const StageDecl& consumer = spec_.stages[to];
      for (std::size_t k = 0; k < consumer.inputs.size(); ++k) {
        const InputDecl& in = consumer.inputs[k];
        auto it = first_stage_.find(in.from_stage);
        if (it == first_stage_.end()) {
          report(in.loc,
                 "input " + in_quotes(in.port) + " of stage " + in_quotes(consumer.id) +
                     " comes from unknown stage " + in_quotes(in.from_stage),
                 suggest_within_budget(in.from_stage, stage_ids(), "stages are: "));
          continue;
        }
        links.push_back(Link{it->second, to, k});
        check_ports(in, consumer, facts_[to], spec_.stages[it->second], facts_[it->second]);
      }
    }
    return links;
  }

  void check_ports(const InputDecl& in, const StageDecl& consumer, const StageFacts& consumer_facts,
                   const StageDecl& producer, const StageFacts& producer_facts) {
    if (!producer_facts.type_known) return;
    const int out = producer_facts.ports->output_index(in.from_port);
    if (out < 0) {
      const auto& outputs = producer_facts.ports->outputs();
      report(in.loc,
             "stage " + in_quotes(producer.id) + " (" + producer.type + ") has no output " +
                 in_quotes(in.from_port),
             outputs.empty() ? producer.type + " is a sink and has no outputs"
                             : producer.type + " outputs: " + join(port_names(outputs)));
      return;
    }
    if (!consumer_facts.type_known) return;
    const int index = consumer_facts.ports->input_index(in.port);
    if (index < 0) return;
    PortInfo output = producer_facts.ports->outputs()[static_cast<std::size_t>(out)];
    const PortInfo& input = consumer_facts.ports->inputs()[static_cast<std::size_t>(index)];
    if (output.type == "*" && input.type != "*") output.type = carried_type(producer_facts, producer, out, 0);
    if (!accepts(input, output)) {
      report(in.loc,
             "port type mismatch: " + producer.id + "/" + output.name + " carries " + output.type +
                 " but input " + in_quotes(input.name) + " of stage " + in_quotes(consumer.id) + " takes " +
                 input.type,
             "connect an output of type " + input.type + compatible_outputs(input, consumer.id) +
                 ", or add a stage that converts");
    }
  }

  /// The type output `out` of `producer` carries: the declared one, or for
  /// an output that passes on an input (StageSpec::passes_type) the type of
  /// what feeds that input, when every producer of it agrees; "*" when that
  /// cannot be told (so only an input of any type takes it).
  std::string carried_type(const StageFacts& facts, const StageDecl& producer, int out, int depth) {
    const StageSpec& ports = *facts.ports;
    const std::string& declared = ports.outputs()[static_cast<std::size_t>(out)].type;
    if (declared != "*" || depth > 16) return declared;
    for (const auto& [o, i] : ports.pass_through()) {
      if (o != out) continue;
      std::string type;
      for (const auto& in : producer.inputs) {
        if (ports.input_index(in.port) != i) continue;
        auto it = first_stage_.find(in.from_stage);
        if (it == first_stage_.end() || !facts_[it->second].type_known) return "*";
        const int from = facts_[it->second].ports->output_index(in.from_port);
        if (from < 0) return "*";
        const std::string t = carried_type(facts_[it->second], spec_.stages[it->second], from, depth + 1);
        if (t == "*" || (!type.empty() && t != type)) return "*";
        type = t;
      }
      return type.empty() ? declared : type;
    }
    return declared;
  }

  /// " (e.g. a/out, b/out)" for up to kExampleOutputs outputs that `input`
  /// accepts, in file order, or nothing.
  std::string compatible_outputs(const PortInfo& input, const std::string& consumer_id) {
    if (!outputs_indexed_) index_outputs();
    const std::vector<std::string>& candidates = input.type == "*" ? any_outputs_ : outputs_by_type_[input.type];
    std::vector<std::string> names;
    const std::string own = consumer_id + "/";
    for (const auto& name : candidates) {
      if (name.compare(0, own.size(), own) == 0) continue;
      if (names.size() < kExampleOutputs) names.push_back(name);
    }
    return names.empty() ? std::string() : " (e.g. " + join(names) + ")";
  }

  /// The first outputs of each type (one more than a hint shows, in case one
  /// is the consumer's own), so that a hint costs nothing per stage.
  void index_outputs() {
    outputs_indexed_ = true;
    for (std::size_t i = 0; i < spec_.stages.size(); ++i) {
      if (!facts_[i].type_known || !facts_[i].id_ok) continue;
      for (const auto& output : facts_[i].ports->outputs()) {
        const std::string name = spec_.stages[i].id + "/" + output.name;
        auto& of_type = outputs_by_type_[output.type];
        if (of_type.size() <= kExampleOutputs) of_type.push_back(name);
        if (any_outputs_.size() <= kExampleOutputs) any_outputs_.push_back(name);
      }
    }
  }

  /// Every declared input of a stage must be connected.
  void check_unconnected() {
    for (std::size_t i = 0; i < spec_.stages.size(); ++i) {
      const StageDecl& decl = spec_.stages[i];
      const StageFacts& facts = facts_[i];
      if (!facts.type_known) continue;
      for (const auto& input : facts.ports->inputs()) {
        if (input.optional || facts.named_inputs.count(input.name) != 0) continue;
        report(facts.inputs_loc.line > 0 ? facts.inputs_loc : decl.loc,
               "input " + in_quotes(input.name) + " of stage " + in_quotes(decl.id) + " is not connected",
               "add `inputs: {" + input.name + ": STAGE/PORT}` with an output of type " + input.type +
                   compatible_outputs(input, decl.id));
      }
    }
  }

  /// A cycle is legal only when one of its stages is marked `feedback: true`:
  /// with the links into such stages left out, no cycle may remain.
  void check_cycles(const std::vector<Link>& links) {
    const std::size_t n = spec_.stages.size();
    std::vector<std::vector<std::size_t>> next(n);
    for (const auto& link : links) {
      if (!spec_.stages[link.to].feedback) next[link.from].push_back(link.to);
    }
    std::vector<std::size_t> parent(n, std::numeric_limits<std::size_t>::max());
    for (const auto& component : cycles_of(next)) report_cycle(component, next, parent);
  }

  /// Strongly connected components that contain a cycle (Tarjan's algorithm
  /// with an explicit stack, so that no chain is too long for it), each
  /// sorted by stage index; components in order of their first stage.
  static std::vector<std::vector<std::size_t>> cycles_of(const std::vector<std::vector<std::size_t>>& next) {
    const std::size_t n = next.size();
    const std::size_t unvisited = std::numeric_limits<std::size_t>::max();
    std::vector<std::size_t> order(n, unvisited);
    std::vector<std::size_t> low(n, 0);
    std::vector<bool> on_stack(n, false);
    std::vector<std::size_t> stack;                           // Tarjan's stack of open stages
    std::vector<std::pair<std::size_t, std::size_t>> path;    // (stage, next successor to look at)
    std::vector<std::vector<std::size_t>> out;
    std::size_t counter = 0;
    auto open = [&](std::size_t v) {
      order[v] = low[v] = counter++;
      stack.push_back(v);
      on_stack[v] = true;
      path.emplace_back(v, 0);
    };
    for (std::size_t root = 0; root < n; ++root) {
      if (order[root] != unvisited) continue;
      open(root);
      while (!path.empty()) {
        auto& [v, k] = path.back();
        if (k < next[v].size()) {
          const std::size_t w = next[v][k++];
          if (order[w] == unvisited) {
            open(w);  // invalidates v and k; the loop reads them afresh
          } else if (on_stack[w]) {
            low[v] = std::min(low[v], order[w]);
          }
          continue;
        }
        const std::size_t done = v;
        path.pop_back();
        if (!path.empty()) {
          const std::size_t parent = path.back().first;
          low[parent] = std::min(low[parent], low[done]);
        }
        if (low[done] != order[done]) continue;
        std::vector<std::size_t> component;
        std::size_t w = 0;
        do {
          w = stack.back();
          stack.pop_back();
          on_stack[w] = false;
          component.push_back(w);
        } while (w != done);
        const bool self_loop = std::find(next[done].begin(), next[done].end(), done) != next[done].end();
        if (component.size() > 1 || self_loop) {
          std::sort(component.begin(), component.end());
          out.push_back(std::move(component));
        }
      }
    }
    std::sort(out.begin(), out.end(),
              [](const std::vector<std::size_t>& a, const std::vector<std::size_t>& b) { return a.front() < b.front(); });
    return out;
  }

  /// Reports one cycle of `component`: the shortest one through its first
  /// stage. `parent` is scratch space of one entry per stage, all `none`.
  void report_cycle(const std::vector<std::size_t>& component, const std::vector<std::vector<std::size_t>>& next,
                    std::vector<std::size_t>& parent) {
    const std::size_t start = component.front();
    const std::size_t none = std::numeric_limits<std::size_t>::max();
    std::vector<std::size_t> queue{start};
    std::size_t last = none;  // the stage whose output closes the cycle into `start`
    for (std::size_t head = 0; head < queue.size() && last == none; ++head) {
      const std::size_t v = queue[head];
      for (std::size_t w : next[v]) {
        if (w == start) {
          last = v;
          break;
        }
        if (parent[w] == none && std::binary_search(component.begin(), component.end(), w)) {
          parent[w] = v;
          queue.push_back(w);
        }
      }
    }
    std::vector<std::size_t> path;
    for (std::size_t v = last; v != start; v = parent[v]) path.push_back(v);
    path.push_back(start);
    std::reverse(path.begin(), path.end());
    for (std::size_t v : queue) parent[v] = none;
    report(closing_input(start, last), "cycle " + cycle_text(path) + " without `feedback: true`",
           "mark the stage that takes the loop-back input with `feedback: true` (here " +
               in_quotes(spec_.stages[start].id) + "), or remove an edge of the cycle");
  }

  /// Where `last` feeds `start`: that input's `stage/port`, else the stage.
  SourceLoc closing_input(std::size_t start, std::size_t last) const {
    for (const auto& in : spec_.stages[start].inputs) {
      auto it = first_stage_.find(in.from_stage);
      if (it != first_stage_.end() && it->second == last) return in.loc;
    }
    return spec_.stages[start].loc;
  }

  /// "a -> b -> a"; a long cycle names its first and last stages and how
  /// many lie between.
  std::string cycle_text(const std::vector<std::size_t>& path) const {
    std::string text;
    const std::size_t head = kCycleStagesShown / 2;
    for (std::size_t i = 0; i < path.size(); ++i) {
      if (path.size() > kCycleStagesShown && i == head) {
        const std::size_t skipped = path.size() - kCycleStagesShown;
        text += "... (" + std::to_string(skipped) + " more stages) -> ";
        i += skipped - 1;
        continue;
      }
      text += spec_.stages[path[i]].id + " -> ";
    }
    return text + spec_.stages[path.front()].id;
  }

  std::string file_;
  const Registry& registry_;
  PluginLoader load_plugin_;
  std::vector<Diagnostic>& diagnostics_;
  std::size_t first_diagnostic_;
  PipelineSpec spec_;
  std::vector<StageFacts> facts_;                   ///< parallel to spec_.stages
  std::map<std::string, std::size_t> first_stage_;  ///< stage id -> index of its first definition
  std::unordered_map<std::string, StageSpec> ports_of_type_;  ///< type -> its declared ports
  std::vector<std::string> stage_ids_;              ///< first_stage_'s keys, once needed
  std::size_t nearest_budget_ = kNearestComparisons;
  bool outputs_indexed_ = false;
  std::unordered_map<std::string, std::vector<std::string>> outputs_by_type_;  ///< type -> first outputs
  std::vector<std::string> any_outputs_;                                        ///< first outputs of any type
  std::vector<std::string> unit_ids_;                                           ///< once stages pin units
  std::unordered_set<std::string> unit_id_set_;
  bool units_ok_ = false;
  bool stages_read_ = false;
};

}  // namespace

std::optional<PipelineSpec> load_pipeline_string(const std::string& text, const std::string& name,
                                                 const Registry& registry,
                                                 std::vector<Diagnostic>& diagnostics,
                                                 const PluginLoader& load_plugin) {
  return Loader(name, registry, diagnostics, load_plugin).load(text);
}

std::optional<PipelineSpec> load_pipeline_file(const std::string& path, const Registry& registry,
                                               std::vector<Diagnostic>& diagnostics,
                                               const PluginLoader& load_plugin) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    const bool missing = !std::filesystem::exists(path, ec);
    diagnostics.push_back(
        Diagnostic{path, 0, 0, missing ? "pipeline file not found: " + path : "not a pipeline file: " + path,
                   "check the path; a relative path starts at the current directory"});
    return std::nullopt;
  }
  // A file too large to parse is refused before it is read.
  const std::uintmax_t bytes = std::filesystem::file_size(path, ec);
  if (!ec && !Loader(path, registry, diagnostics).size_allowed(bytes)) return std::nullopt;
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in) {
    diagnostics.push_back(
        Diagnostic{path, 0, 0, "cannot read pipeline file: " + path, "check that the file is readable"});
    return std::nullopt;
  }
  return load_pipeline_string(text.str(), path, registry, diagnostics, load_plugin);
}

}  // namespace swarmflow::config
