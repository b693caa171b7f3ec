#include <cmath>
#include <sstream>

#include <swarmflow/params.hpp>
#include <swarmflow/stage.hpp>

namespace swarmflow {

const char* to_string(ParamKind kind) {
  switch (kind) {
    case ParamKind::boolean: return "boolean";
    case ParamKind::integer: return "integer";
    case ParamKind::number: return "number";
    case ParamKind::string: return "string";
  }
  return "?";
}

std::string to_string(const ParamValue& value) {
  struct Visitor {
    std::string operator()(bool v) const { return v ? "true" : "false"; }
    std::string operator()(std::int64_t v) const { return std::to_string(v); }
    std::string operator()(double v) const {
      std::ostringstream os;
      os << v;
      return os.str();
    }
    std::string operator()(const std::string& v) const { return '"' + v + '"'; }
  };
  return std::visit(Visitor{}, value);
}

namespace {

std::string range_text(const ParamRange& r) {
  std::ostringstream os;
  os << '[' << (r.min ? std::to_string(*r.min) : std::string("-inf")) << ", "
     << (r.max ? std::to_string(*r.max) : std::string("inf")) << ']';
  return os.str();
}

bool in_range(const ParamRange& r, double v) {
  return !(r.min && v < *r.min) && !(r.max && v > *r.max);
}

std::string format_number(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace

int StageSpec::add_input(std::string name, std::string type, std::string description) {
  inputs_.push_back(PortInfo{std::move(name), std::move(type), std::move(description)});
  return static_cast<int>(inputs_.size()) - 1;
}

int StageSpec::add_output(std::string name, std::string type, std::string description) {
  outputs_.push_back(PortInfo{std::move(name), std::move(type), std::move(description)});
  return static_cast<int>(outputs_.size()) - 1;
}

void StageSpec::add_param(ParamInfo info, void* field) {
  params_.push_back(std::move(info));
  fields_.push_back(field);
}

void StageSpec::param(bool& field, std::string name, std::string description, bool default_value) {
  field = default_value;
  add_param(ParamInfo{std::move(name), std::move(description), ParamKind::boolean, default_value, {}, {}},
            &field);
}

void StageSpec::param(std::int64_t& field, std::string name, std::string description,
                      std::int64_t default_value, ParamRange range) {
  field = default_value;
  add_param(ParamInfo{std::move(name), std::move(description), ParamKind::integer, default_value, range, {}},
            &field);
}

void StageSpec::param(double& field, std::string name, std::string description, double default_value,
                      ParamRange range) {
  field = default_value;
  add_param(ParamInfo{std::move(name), std::move(description), ParamKind::number, default_value, range, {}},
            &field);
}

void StageSpec::param(std::string& field, std::string name, std::string description,
                      std::string default_value, std::vector<std::string> choices) {
  field = default_value;
  add_param(ParamInfo{std::move(name), std::move(description), ParamKind::string, std::move(default_value),
                      {}, std::move(choices)},
            &field);
}

Status StageSpec::set(const std::string& name, const ParamValue& value) {
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const ParamInfo& info = params_[i];
    if (info.name != name) continue;
    void* field = fields_[i];
    auto wrong_type = [&] {
      return Status::error("parameter '" + name + "' must be " + to_string(info.kind) + ", got " +
                               to_string(value),
                           StatusCode::invalid_argument);
    };
    switch (info.kind) {
      case ParamKind::boolean:
        if (!std::holds_alternative<bool>(value)) return wrong_type();
        *static_cast<bool*>(field) = std::get<bool>(value);
        return {};
      case ParamKind::integer: {
        if (!std::holds_alternative<std::int64_t>(value)) return wrong_type();
        auto v = std::get<std::int64_t>(value);
        if (!in_range(info.range, static_cast<double>(v))) {
          return Status::error("parameter '" + name + "' = " + std::to_string(v) + " is outside " +
                                   range_text(info.range),
                               StatusCode::invalid_argument);
        }
        *static_cast<std::int64_t*>(field) = v;
        return {};
      }
      case ParamKind::number: {
        double v = 0;
        if (std::holds_alternative<double>(value)) {
          v = std::get<double>(value);
        } else if (std::holds_alternative<std::int64_t>(value)) {
          v = static_cast<double>(std::get<std::int64_t>(value));
        } else {
          return wrong_type();
        }
        if (!std::isfinite(v) || !in_range(info.range, v)) {
          return Status::error("parameter '" + name + "' = " + format_number(v) + " is outside " +
                                   range_text(info.range),
                               StatusCode::invalid_argument);
        }
        *static_cast<double*>(field) = v;
        return {};
      }
      case ParamKind::string: {
        if (!std::holds_alternative<std::string>(value)) return wrong_type();
        const auto& v = std::get<std::string>(value);
        if (!info.choices.empty()) {
          bool found = false;
          for (const auto& c : info.choices) found = found || c == v;
          if (!found) {
            std::string list;
            for (const auto& c : info.choices) list += (list.empty() ? "" : ", ") + c;
            return Status::error("parameter '" + name + "' = \"" + v + "\" is not one of: " + list,
                                 StatusCode::invalid_argument);
          }
        }
        *static_cast<std::string*>(field) = v;
        return {};
      }
    }
  }
  return Status::error("unknown parameter '" + name + "'", StatusCode::not_found);
}

int StageSpec::input_index(std::string_view name) const {
  for (std::size_t i = 0; i < inputs_.size(); ++i) {
    if (inputs_[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

int StageSpec::output_index(std::string_view name) const {
  for (std::size_t i = 0; i < outputs_.size(); ++i) {
    if (outputs_[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

const ParamInfo* StageSpec::find_param(std::string_view name) const {
  for (const auto& p : params_) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

}  // namespace swarmflow
