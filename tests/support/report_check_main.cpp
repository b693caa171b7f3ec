// swarmflow_report_check REPORT.json: checks a run report written by
// `swarmflow run --report` (see report_check.hpp). Exit 0 when it holds,
// 1 with one line per problem on stderr when not, 2 when it cannot be read.

#include <cstdio>
#include <fstream>
#include <iostream>

#include "support/report_check.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: swarmflow_report_check REPORT.json\n";
    return 2;
  }
  std::ifstream in(argv[1]);
  if (!in) {
    std::cerr << argv[1] << ": cannot open\n";
    return 2;
  }
  nlohmann::json report;
  try {
    report = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    std::cerr << argv[1] << ": not JSON: " << e.what() << '\n';
    return 2;
  }
  const auto problems = swarmflow::testing::report_problems(report);
  for (const auto& p : problems) std::cerr << argv[1] << ": " << p << '\n';
  if (!problems.empty()) return 1;
  std::cout << argv[1] << ": ok; " << report["edges"].size() << " edges conserved, " << report["sinks"].size()
            << " sinks, each processed some\n";
  return 0;
}
