#pragma once
/// \file params.hpp
/// Stage parameters: each has a name, a one-line description, a default and,
/// for numbers, an allowed range; strings may list their allowed choices.

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace swarmflow {

/// The type of a parameter as the pipeline definition writes it.
enum class ParamKind { boolean, integer, number, string };

/// A parameter value.
using ParamValue = std::variant<bool, std::int64_t, double, std::string>;

/// Inclusive bounds of a numeric parameter; unset means unbounded.
struct ParamRange {
  std::optional<double> min;
  std::optional<double> max;
};

/// Everything known about one declared parameter.
struct ParamInfo {
  std::string name;
  std::string description;
  ParamKind kind = ParamKind::string;
  ParamValue default_value;
  ParamRange range;
  std::vector<std::string> choices;  ///< allowed values of a string parameter; empty = any
};

/// "boolean", "integer", "number" or "string".
const char* to_string(ParamKind kind);
/// A value as it would be written in YAML.
std::string to_string(const ParamValue& value);

}  // namespace swarmflow
