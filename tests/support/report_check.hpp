#pragma once
// The invariants every run report must hold, checked on its JSON (what
// `swarmflow run --report FILE` writes), so that a run can be judged from
// the file alone: by the pipeline smoke tests (swarmflow_report_check) and
// by unit tests.

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace swarmflow::testing {

/// What is wrong with a run report, one line each; empty when nothing is:
/// - `ok` and `finished` are true;
/// - every edge conserves its envelopes: sent == delivered + dropped. An
///   envelope still waiting for credit, or sent and never accepted, is in
///   `sent` and in neither of the others, so this also says nothing was left
///   waiting; a `waiting` figure, where the report has one, must be 0;
/// - there is at least one sink, and every sink processed something.
inline std::vector<std::string> report_problems(const nlohmann::json& report) {
  std::vector<std::string> problems;
  if (!report.is_object()) return {"the report is not a JSON object"};
  auto is_true = [&](const char* key) {
    return report.contains(key) && report[key].is_boolean() && report[key].get<bool>();
  };
  for (const char* key : {"ok", "finished"}) {
    if (!is_true(key)) {
      problems.push_back(std::string("'") + key + "' is not true" +
                         (report.contains("error") ? ": " + report["error"].dump() : std::string()));
    }
  }
  // A count: an integer of at least 0.
  auto count = [](const nlohmann::json& object, const char* key, std::uint64_t* out) {
    if (!object.is_object() || !object.contains(key) || !object[key].is_number_integer()) return false;
    if (object[key].is_number_unsigned()) {
      *out = object[key].get<std::uint64_t>();
      return true;
    }
    const auto value = object[key].get<std::int64_t>();
    *out = static_cast<std::uint64_t>(value);
    return value >= 0;
  };

  if (!report.contains("edges") || !report["edges"].is_array()) {
    problems.emplace_back("no 'edges' list");
  } else {
    for (const auto& e : report["edges"]) {
      const bool named = e.is_object() && e.contains("from") && e["from"].is_string() && e.contains("to") &&
                         e["to"].is_string();
      const std::string name =
          named ? e["from"].get<std::string>() + " -> " + e["to"].get<std::string>() : e.dump();
      std::uint64_t sent = 0;
      std::uint64_t delivered = 0;
      std::uint64_t dropped = 0;
      if (!count(e, "sent", &sent) || !count(e, "delivered", &delivered) || !count(e, "dropped", &dropped)) {
        problems.push_back("edge " + name + ": sent, delivered and dropped are not all counts");
        continue;
      }
      if (sent != delivered + dropped) {
        problems.push_back("edge " + name + ": sent " + std::to_string(sent) + " != delivered " +
                           std::to_string(delivered) + " + dropped " + std::to_string(dropped));
      }
      std::uint64_t waiting = 0;
      if (e.contains("waiting") && (!count(e, "waiting", &waiting) || waiting != 0)) {
        problems.push_back("edge " + name + ": " + e["waiting"].dump() + " still waiting");
      }
    }
  }

  if (!report.contains("sinks") || !report["sinks"].is_object() || report["sinks"].empty()) {
    problems.emplace_back("no sinks");
  } else {
    for (const auto& [id, sink] : report["sinks"].items()) {
      std::uint64_t processed = 0;
      const bool known = report.contains("stages") && report["stages"].contains(id) &&
                         count(report["stages"][id], "processed", &processed);
      if (!known) {
        problems.push_back("sink " + id + ": no 'processed' count in 'stages'");
      } else if (processed == 0) {
        problems.push_back("sink " + id + " processed nothing");
      }
    }
  }
  return problems;
}

}  // namespace swarmflow::testing
