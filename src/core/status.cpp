#include <swarmflow/status.hpp>

namespace swarmflow {

std::string Diagnostic::to_string() const {
  std::string out = file;
  if (line > 0) {
    out += ':' + std::to_string(line) + ':' + std::to_string(column);
  }
  out += ": error: " + message;
  if (!hint.empty()) out += " (" + hint + ")";
  return out;
}

std::string format_diagnostics(const std::vector<Diagnostic>& diagnostics) {
  std::string out;
  for (const auto& d : diagnostics) {
    out += d.to_string();
    out += '\n';
  }
  return out;
}

}  // namespace swarmflow
