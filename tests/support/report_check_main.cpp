// swarmflow_report_check REPORT.json [SCHEMA.json]: checks a run report
// written by `swarmflow run --report` (see report_check.hpp) and, given a
// schema (docs/report.schema.json), that it conforms to it (json_schema.hpp).
// Exit 0 when it holds, 1 with one line per problem on stderr when not, 2
// when a file cannot be read.

#include <cstdio>
#include <fstream>
#include <iostream>

#include "support/json_schema.hpp"
#include "support/report_check.hpp"

namespace {

bool read_json(const char* path, nlohmann::json& out) {
  std::ifstream in(path);
  if (!in) {
    std::cerr << path << ": cannot open\n";
    return false;
  }
  try {
    out = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    std::cerr << path << ": not JSON: " << e.what() << '\n';
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 && argc != 3) {
    std::cerr << "usage: swarmflow_report_check REPORT.json [SCHEMA.json]\n";
    return 2;
  }
  nlohmann::json report;
  if (!read_json(argv[1], report)) return 2;
  auto problems = swarmflow::testing::report_problems(report);
  if (argc == 3) {
    nlohmann::json schema;
    if (!read_json(argv[2], schema)) return 2;
    for (auto& p : swarmflow::testing::schema_problems(schema, report)) {
      problems.push_back(std::string("does not conform to ") + argv[2] + ": " + p);
    }
  }
  for (const auto& p : problems) std::cerr << argv[1] << ": " << p << '\n';
  if (!problems.empty()) return 1;
  std::cout << argv[1] << ": ok; " << report["edges"].size() << " edges conserved, " << report["sinks"].size()
            << " sinks, each processed some" << (argc == 3 ? "; conforms to the schema" : "") << '\n';
  return 0;
}
