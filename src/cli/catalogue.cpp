#include "cli/catalogue.hpp"

#include <cstdio>
#include <cstdlib>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

namespace swarmflow::cli {

namespace {

using Json = nlohmann::ordered_json;

/// The shortest decimal text that reads back as `v`.
std::string number_text(double v) {
  for (int precision = 6; precision <= 17; ++precision) {
    std::ostringstream os;
    os.precision(precision);
    os << v;
    if (std::strtod(os.str().c_str(), nullptr) == v) return os.str();
  }
  std::ostringstream os;
  os.precision(17);
  os << v;
  return os.str();
}

/// A string as a double-quoted YAML (and JSON) scalar.
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + '"';
}

/// A parameter value as the pipeline file writes it.
std::string yaml_value(const ParamValue& value) {
  struct Visitor {
    std::string operator()(bool v) const { return v ? "true" : "false"; }
    std::string operator()(std::int64_t v) const { return std::to_string(v); }
    std::string operator()(double v) const { return number_text(v); }
    std::string operator()(const std::string& v) const { return quoted(v); }
  };
  return std::visit(Visitor{}, value);
}

Json json_value(const ParamValue& value) {
  struct Visitor {
    Json operator()(bool v) const { return v; }
    Json operator()(std::int64_t v) const { return v; }
    Json operator()(double v) const { return v; }
    Json operator()(const std::string& v) const { return v; }
  };
  return std::visit(Visitor{}, value);
}

/// `[min, max]` of a number, `a|b|c` of a string with choices, else empty.
std::string range_text(const ParamInfo& p) {
  std::string out;
  if (p.range.min || p.range.max) {
    out = "[" + (p.range.min ? number_text(*p.range.min) : std::string("-inf")) + ", " +
          (p.range.max ? number_text(*p.range.max) : std::string("inf")) + "]";
  }
  for (const auto& c : p.choices) out += (out.empty() ? "" : "|") + c;
  return out;
}

std::string format_line(const char* fmt, const std::string& a, const std::string& b, const std::string& c) {
  char buf[1024];
  std::snprintf(buf, sizeof buf, fmt, a.c_str(), b.c_str(), c.c_str());
  return buf;
}

Json port_json(const PortInfo& p, bool input) {
  Json j = Json::object();
  j["name"] = p.name;
  j["type"] = p.type;
  j["description"] = p.description;
  if (input) j["optional"] = p.optional;
  return j;
}

Json param_json(const ParamInfo& p) {
  Json j = Json::object();
  j["name"] = p.name;
  j["type"] = to_string(p.kind);
  j["description"] = p.description;
  j["default"] = json_value(p.default_value);
  if (p.range.min || p.range.max) {
    Json range = Json::object();
    range["min"] = p.range.min ? Json(*p.range.min) : Json(nullptr);
    range["max"] = p.range.max ? Json(*p.range.max) : Json(nullptr);
    j["range"] = std::move(range);
  } else {
    j["range"] = nullptr;
  }
  j["choices"] = p.choices;
  return j;
}

/// A Markdown table cell: no pipes, no line breaks.
std::string cell(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '|') {
      out += "\\|";
    } else if (c == '\n') {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

const char* const kExampleJoin = "join: {key: seq, timeout_ms: 1000}";

std::string pack_of(const std::string& type) { return type.substr(0, type.find('.')); }

std::vector<std::string> packs(const Registry& registry) {
  std::set<std::string> names;
  for (const auto* t : registry.all()) names.insert(pack_of(t->name));
  return {names.begin(), names.end()};
}

std::vector<CatalogueEntry> select_stages(const Registry& registry, const std::string& what, std::string* error) {
  std::vector<CatalogueEntry> out;
  auto add = [&](const StageType* t) {
    CatalogueEntry e;
    e.type = t;
    registry.describe(t->name, e.spec);
    out.push_back(std::move(e));
  };
  if (const StageType* t = what.empty() ? nullptr : registry.find(what)) {
    add(t);
    return out;
  }
  for (const auto* t : registry.all()) {
    if (what.empty() || pack_of(t->name) == what) add(t);
  }
  if (out.empty() && error != nullptr) {
    std::string packs_list;
    for (const auto& p : packs(registry)) packs_list += (packs_list.empty() ? "" : ", ") + p;
    const std::string near = registry.nearest(what);
    *error = "unknown stage type or pack '" + what + "'" +
             (near.empty() ? std::string() : " (did you mean '" + near + "'?)") + "; packs: " + packs_list;
  }
  return out;
}

std::string example_id(const std::string& type) {
  const auto dot = type.find('.');
  std::string id = dot == std::string::npos ? type : type.substr(dot + 1);
  for (char& c : id) {
    if (c == '.') c = '_';
  }
  return id;
}

std::string example_producer(const StageSpec& spec, const PortInfo& input) {
  return spec.inputs().size() == 1 ? std::string("producer") : input.name + "_producer";
}

std::string example_yaml(const CatalogueEntry& entry) {
  const StageSpec& spec = entry.spec;
  std::string out = "  - id: " + example_id(entry.type->name) + "\n";
  out += "    type: " + entry.type->name + "\n";
  bool any_required = false;
  for (const auto& p : spec.inputs()) any_required = any_required || !p.optional;
  if (any_required) out += "    inputs:\n";
  for (const auto& p : spec.inputs()) {
    const std::string line = p.name + ": " + example_producer(spec, p) + "/out";
    out += p.optional ? "    #  " + line + "   # optional\n" : "      " + line + "\n";
  }
  if (spec.requires_join()) {
    out += std::string("    ") + kExampleJoin + "   # needed: one envelope per input as a set (seq or part_id)\n";
  } else if (spec.inputs().size() >= 2) {
    out += std::string("    # ") + kExampleJoin + "   # one envelope per input as a set (seq or part_id)\n";
  }
  if (!spec.params().empty()) out += "    params:\n";
  for (const auto& p : spec.params()) out += "      " + p.name + ": " + yaml_value(p.default_value) + "\n";
  return out;
}

std::string describe_text(const CatalogueEntry& entry) {
  const StageSpec& spec = entry.spec;
  std::string out = entry.type->name + " — " + entry.type->description + "\n";
  out += "\ninputs:\n";
  if (spec.inputs().empty()) out += "  (none: a source)\n";
  for (const auto& p : spec.inputs()) {
    out += format_line("  %-16s %-36s %s\n", p.name, p.type, (p.optional ? "(optional) " : "") + p.description);
  }
  out += "\noutputs:\n";
  if (spec.outputs().empty()) out += "  (none: a sink)\n";
  for (const auto& p : spec.outputs()) out += format_line("  %-16s %-36s %s\n", p.name, p.type, p.description);
  out += "\nparameters:\n";
  if (spec.params().empty()) out += "  (none)\n";
  for (const auto& p : spec.params()) {
    char buf[1024];
    std::snprintf(buf, sizeof buf, "  %-16s %-8s default %-10s %-16s %s\n", p.name.c_str(), to_string(p.kind),
                  yaml_value(p.default_value).c_str(), range_text(p).c_str(), p.description.c_str());
    out += buf;
  }
  out += "\nexample (under `stages:`):\n" + example_yaml(entry);
  return out;
}

std::string describe_json(const std::vector<CatalogueEntry>& entries) {
  Json stages = Json::array();
  for (const auto& e : entries) {
    Json j = Json::object();
    j["type"] = e.type->name;
    j["pack"] = pack_of(e.type->name);
    j["description"] = e.type->description;
    Json inputs = Json::array();
    for (const auto& p : e.spec.inputs()) inputs.push_back(port_json(p, true));
    Json outputs = Json::array();
    for (const auto& p : e.spec.outputs()) outputs.push_back(port_json(p, false));
    Json params = Json::array();
    for (const auto& p : e.spec.params()) params.push_back(param_json(p));
    j["inputs"] = std::move(inputs);
    j["outputs"] = std::move(outputs);
    j["parameters"] = std::move(params);
    j["example"] = example_yaml(e);
    stages.push_back(std::move(j));
  }
  Json doc = Json::object();
  doc["stages"] = std::move(stages);
  return doc.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
}

std::string describe_markdown(const std::string& pack, const std::vector<CatalogueEntry>& entries) {
  std::string out = "# The `" + pack + "` stages\n\n";
  out += "<!-- Generated by `swarmflow describe --markdown " + pack +
         "`; regenerate with `cmake -DCLI=build/src/cli/swarmflow -DDOCS=docs/stages -DUPDATE=ON -P "
         "tests/support/stage_docs.cmake`. -->\n\n";
  out += "Each example is a `stages:` entry with every parameter at its default;\n"
         "connect its inputs to real producers (`producer/out` is a placeholder).\n";
  for (const auto& e : entries) {
    const StageSpec& spec = e.spec;
    out += "\n## `" + e.type->name + "`\n\n" + e.type->description + "\n\n";
    out += "Inputs:";
    if (spec.inputs().empty()) {
      out += " none (a source).\n";
    } else {
      out += "\n\n| port | type | description |\n|---|---|---|\n";
      for (const auto& p : spec.inputs()) {
        out += "| `" + p.name + "` | `" + p.type + "` | " + (p.optional ? "(optional) " : "") +
               cell(p.description) + " |\n";
      }
    }
    out += "\nOutputs:";
    if (spec.outputs().empty()) {
      out += " none (a sink).\n";
    } else {
      out += "\n\n| port | type | description |\n|---|---|---|\n";
      for (const auto& p : spec.outputs()) {
        out += "| `" + p.name + "` | `" + p.type + "` | " + cell(p.description) + " |\n";
      }
    }
    out += "\nParameters:";
    if (spec.params().empty()) {
      out += " none.\n";
    } else {
      out += "\n\n| name | type | default | range | description |\n|---|---|---|---|---|\n";
      for (const auto& p : spec.params()) {
        const std::string range = range_text(p);
        out += "| `" + p.name + "` | " + to_string(p.kind) + " | `" + yaml_value(p.default_value) + "` | " +
               (range.empty() ? std::string() : "`" + cell(range) + "`") + " | " + cell(p.description) + " |\n";
      }
    }
    out += "\n```yaml\n" + example_yaml(e) + "```\n";
  }
  return out;
}

}  // namespace swarmflow::cli
