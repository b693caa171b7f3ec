#pragma once
// A JSON Schema validator for the subset the project's schemas use (the run
// report, docs/report.schema.json): type, required, properties,
// additionalProperties, items, enum, minimum, maximum, and the annotations
// $schema, $id, title and description. A schema using any other keyword is
// itself reported, so nothing is silently left unchecked.

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace swarmflow::testing {

namespace json_schema_detail {

inline bool has_type(const nlohmann::json& value, const std::string& type) {
  if (type == "object") return value.is_object();
  if (type == "array") return value.is_array();
  if (type == "string") return value.is_string();
  if (type == "boolean") return value.is_boolean();
  if (type == "null") return value.is_null();
  if (type == "number") return value.is_number();
  if (type == "integer") {
    if (value.is_number_integer()) return true;
    if (!value.is_number_float()) return false;
    const double d = value.get<double>();
    return std::isfinite(d) && std::floor(d) == d;
  }
  return false;
}

inline void validate(const nlohmann::json& schema, const nlohmann::json& value, const std::string& where,
                     std::vector<std::string>& problems) {
  static const std::set<std::string> kKnown = {"$schema", "$id", "title", "description", "type", "required",
                                               "properties", "additionalProperties", "items", "enum", "minimum",
                                               "maximum"};
  if (schema.is_boolean()) {
    if (!schema.get<bool>()) problems.push_back(where + ": not allowed here");
    return;
  }
  if (!schema.is_object()) {
    problems.push_back(where + ": schema is neither an object nor a boolean");
    return;
  }
  for (const auto& [keyword, unused] : schema.items()) {
    if (kKnown.count(keyword) == 0) problems.push_back(where + ": schema keyword '" + keyword + "' is not supported");
  }
  if (const auto t = schema.find("type"); t != schema.end()) {
    std::vector<std::string> types;
    if (t->is_array()) {
      for (const auto& x : *t) types.push_back(x.get<std::string>());
    } else {
      types.push_back(t->get<std::string>());
    }
    bool any = false;
    for (const auto& type : types) any = any || has_type(value, type);
    if (!any) {
      problems.push_back(where + ": is " + std::string(value.type_name()) + ", expected " + t->dump());
      return;
    }
  }
  if (const auto e = schema.find("enum"); e != schema.end()) {
    bool found = false;
    for (const auto& option : *e) found = found || option == value;
    if (!found) problems.push_back(where + ": " + value.dump() + " is not one of " + e->dump());
  }
  if (value.is_number()) {
    const double v = value.get<double>();
    if (const auto m = schema.find("minimum"); m != schema.end() && v < m->get<double>()) {
      problems.push_back(where + ": " + value.dump() + " is below the minimum " + m->dump());
    }
    if (const auto m = schema.find("maximum"); m != schema.end() && v > m->get<double>()) {
      problems.push_back(where + ": " + value.dump() + " is above the maximum " + m->dump());
    }
  }
  if (value.is_object()) {
    if (const auto r = schema.find("required"); r != schema.end()) {
      for (const auto& name : *r) {
        if (!value.contains(name.get<std::string>())) {
          problems.push_back(where + ": lacks required '" + name.get<std::string>() + "'");
        }
      }
    }
    const auto props = schema.find("properties");
    const auto extra = schema.find("additionalProperties");
    for (const auto& [name, member] : value.items()) {
      const std::string at = where + "." + name;
      if (props != schema.end() && props->contains(name)) {
        validate((*props)[name], member, at, problems);
      } else if (extra != schema.end()) {
        validate(*extra, member, at, problems);
      }
    }
  }
  if (value.is_array()) {
    if (const auto items = schema.find("items"); items != schema.end()) {
      for (std::size_t i = 0; i < value.size(); ++i) {
        validate(*items, value[i], where + "[" + std::to_string(i) + "]", problems);
      }
    }
  }
}

}  // namespace json_schema_detail

/// Every way `value` departs from `schema`, one line each, naming the place
/// (`$.edges[0].sent: is string, expected "integer"`); empty when it conforms.
inline std::vector<std::string> schema_problems(const nlohmann::json& schema, const nlohmann::json& value) {
  std::vector<std::string> problems;
  json_schema_detail::validate(schema, value, "$", problems);
  return problems;
}

/// Fields of `schema` (at any depth) that lack a `description`, by path.
inline std::vector<std::string> undescribed_fields(const nlohmann::json& schema, const std::string& where = "$") {
  std::vector<std::string> out;
  if (!schema.is_object()) return out;
  if (!schema.contains("description")) out.push_back(where);
  if (const auto props = schema.find("properties"); props != schema.end()) {
    for (const auto& [name, sub] : props->items()) {
      for (auto& p : undescribed_fields(sub, where + "." + name)) out.push_back(std::move(p));
    }
  }
  if (const auto extra = schema.find("additionalProperties"); extra != schema.end() && extra->is_object()) {
    for (auto& p : undescribed_fields(*extra, where + ".*")) out.push_back(std::move(p));
  }
  if (const auto items = schema.find("items"); items != schema.end()) {
    for (auto& p : undescribed_fields(*items, where + "[]")) out.push_back(std::move(p));
  }
  return out;
}

}  // namespace swarmflow::testing
