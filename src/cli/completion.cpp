#include "cli/completion.hpp"

#include <algorithm>
#include <utility>

namespace swarmflow::cli {
namespace {

/// The kind part of an option's type name ("FILE" of "FILE:..." with validators).
std::string value_kind(const CLI::Option& option) {
  const std::string name = option.get_type_name();
  return name.substr(0, name.find(':'));
}

/// Every spelling of a named option: -h --help ...
std::vector<std::string> spellings(const CLI::Option& option) {
  std::vector<std::string> out;
  for (const auto& s : option.get_snames()) out.push_back("-" + s);
  for (const auto& l : option.get_lnames()) out.push_back("--" + l);
  return out;
}

std::string joined(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : " ") + w;
  return out;
}

/// The bash that fills COMPREPLY with values of `kind` for the word "$cur".
std::string complete_value(const std::string& kind, const std::vector<std::string>& stage_types) {
  if (kind == kPipelineValue) return "_swarmflow_files \"$cur\" yaml";
  if (kind == kFileValue) return "_swarmflow_files \"$cur\"";
  if (kind == kStageTypeValue) return "COMPREPLY=($(compgen -W \"" + joined(stage_types) + "\" -- \"$cur\"))";
  if (kind == kShellValue) return "COMPREPLY=($(compgen -W \"bash\" -- \"$cur\"))";
  return ":";  // a number or a name: nothing to offer
}

}  // namespace

std::string bash_completion(const CLI::App& app, const std::vector<std::string>& stage_types) {
  // Not app.get_name(): CLI11 fills that in from argv[0], a path.
  const std::string name = "swarmflow";
  std::string s;
  s += "# bash completion for " + name + "\n";
  s += "# Load it in this shell:   source <(" + name + " completion bash)\n";
  s += "# or for every new one:    " + name +
       " completion bash > ~/.local/share/bash-completion/completions/" + name + "\n\n";

  // "$1": the word so far; "$2" = yaml: only *.yaml / *.yml files (and folders).
  s += "_swarmflow_files() {\n";
  s += "  local f\n";
  s += "  compopt -o filenames 2> /dev/null\n";
  s += "  while IFS= read -r f; do\n";
  s += "    if [[ -d \"$f\" || \"$2\" != yaml || \"$f\" == *.yaml || \"$f\" == *.yml ]]; then\n";
  s += "      COMPREPLY+=(\"$f\")\n";
  s += "    fi\n";
  s += "  done < <(compgen -f -- \"$1\")\n";
  s += "}\n\n";

  s += "_swarmflow() {\n";
  s += "  local cur=\"${COMP_WORDS[COMP_CWORD]}\" prev=\"\" command=\"\" i\n";
  s += "  ((COMP_CWORD > 0)) && prev=\"${COMP_WORDS[COMP_CWORD - 1]}\"\n";
  s += "  COMPREPLY=()\n";
  s += "  for ((i = 1; i < COMP_CWORD; i++)); do\n";
  s += "    if [[ \"${COMP_WORDS[i]}\" != -* ]]; then\n";
  s += "      command=\"${COMP_WORDS[i]}\"\n";
  s += "      break\n";
  s += "    fi\n";
  s += "  done\n";
  s += "  case \"$command\" in\n";

  std::vector<std::string> top;
  const auto subcommands = app.get_subcommands([](const CLI::App*) { return true; });
  for (const CLI::App* sub : subcommands) top.push_back(sub->get_name());
  for (const CLI::Option* o : app.get_options()) {
    for (auto& w : spellings(*o)) top.push_back(std::move(w));
  }
  s += "    \"\")\n";
  s += "      COMPREPLY=($(compgen -W \"" + joined(top) + "\" -- \"$cur\"))\n";
  s += "      ;;\n";

  for (const CLI::App* sub : subcommands) {
    std::vector<std::string> flags;
    // After an option that takes a value: what to offer, and those options.
    std::vector<std::pair<std::string, std::string>> after_option;
    std::string positional = ":";
    for (const CLI::Option* o : sub->get_options()) {
      if (o->get_positional() && !o->nonpositional()) {
        positional = complete_value(value_kind(*o), stage_types);
        continue;
      }
      const std::vector<std::string> names = spellings(*o);
      flags.insert(flags.end(), names.begin(), names.end());
      if (o->get_items_expected_max() > 0) {  // takes a value (flags take none)
        const std::string action = complete_value(value_kind(*o), stage_types);
        auto arm = std::find_if(after_option.begin(), after_option.end(),
                                [&](const auto& a) { return a.first == action; });
        if (arm == after_option.end()) arm = after_option.insert(after_option.end(), {action, ""});
        for (const auto& n : names) arm->second += (arm->second.empty() ? "" : "|") + n;
      }
    }
    s += "    " + sub->get_name() + ")\n";
    if (!after_option.empty()) {
      s += "      case \"$prev\" in\n";
      for (const auto& [action, pattern] : after_option) {
        s += "        " + pattern + ")\n          " + action + "\n          return 0\n          ;;\n";
      }
      s += "      esac\n";
    }
    s += "      if [[ \"$cur\" == -* ]]; then\n";
    s += "        COMPREPLY=($(compgen -W \"" + joined(flags) + "\" -- \"$cur\"))\n";
    s += "      else\n";
    s += "        " + positional + "\n";
    s += "      fi\n";
    s += "      ;;\n";
  }
  s += "  esac\n";
  s += "  return 0\n";
  s += "}\n\n";
  s += "complete -F _swarmflow " + name + "\n";
  return s;
}

}  // namespace swarmflow::cli
