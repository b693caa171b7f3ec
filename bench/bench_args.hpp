#pragma once
// Command-line options of the benchmarks: each declares its flags in a
// table; parse_flags reads them strictly (a number must be a whole number,
// an unknown flag is an error) and prints the usage, from the same table,
// for --help.

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace swarmflow::bench {

struct Flag {
  std::string name;  ///< with its dashes: "--n"
  std::string value;  ///< what its value is called in the usage ("N"); empty for a switch
  std::string help;   ///< one or more lines, without the flag's name
  /// Takes the value (a switch gets ""); false when it cannot be read.
  std::function<bool(const char*)> set;
};

template <class Int>
Flag integer_flag(std::string name, std::string value, Int& field, std::string help) {
  return Flag{std::move(name), std::move(value), std::move(help), [&field](const char* text) {
                const std::string_view s(text);
                Int v{};
                auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
                if (ec != std::errc() || end != s.data() + s.size()) return false;
                field = v;
                return true;
              }};
}

inline Flag number_flag(std::string name, std::string value, double& field, std::string help) {
  return Flag{std::move(name), std::move(value), std::move(help), [&field](const char* text) {
                char* end = nullptr;
                const double v = std::strtod(text, &end);
                if (end == text || *end != '\0') return false;
                field = v;
                return true;
              }};
}

inline Flag text_flag(std::string name, std::string value, std::string& field, std::string help) {
  return Flag{std::move(name), std::move(value), std::move(help), [&field](const char* text) {
                field = text;
                return true;
              }};
}

inline Flag switch_flag(std::string name, bool& field, std::string help) {
  return Flag{std::move(name), "", std::move(help), [&field](const char*) {
                field = true;
                return true;
              }};
}

inline void print_usage(const char* argv0, const std::vector<Flag>& flags) {
  std::printf("usage: %s [options]\n", argv0);
  for (const auto& f : flags) {
    const std::string left = f.name + (f.value.empty() ? "" : " " + f.value);
    std::string help = f.help;
    std::string indent(24, ' ');
    for (std::size_t at = help.find('\n'); at != std::string::npos; at = help.find('\n', at + 1 + indent.size())) {
      help.insert(at + 1, indent);
    }
    std::printf("  %-21s %s\n", left.c_str(), help.c_str());
  }
}

/// Reads argv into the flags' fields. --help prints the usage and exits 0;
/// a mistake is reported on stderr and returns false.
inline bool parse_flags(int argc, char** argv, const std::vector<Flag>& flags) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      print_usage(argv[0], flags);
      std::exit(0);
    }
    const Flag* flag = nullptr;
    for (const auto& f : flags) {
      if (f.name == a) flag = &f;
    }
    if (flag == nullptr) {
      std::fprintf(stderr, "unknown option %s (--help lists them)\n", a.c_str());
      return false;
    }
    const char* value = "";
    if (!flag->value.empty()) {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value (%s)\n", a.c_str(), flag->value.c_str());
        return false;
      }
      value = argv[++i];
    }
    if (!flag->set(value)) {
      std::fprintf(stderr, "%s: cannot read '%s' as %s\n", a.c_str(), value, flag->value.c_str());
      return false;
    }
  }
  return true;
}

}  // namespace swarmflow::bench
