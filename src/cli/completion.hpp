#pragma once
// Shell completion for the `swarmflow` command, generated from its own
// command-line definition so the two cannot drift apart.

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace swarmflow::cli {

/// What a value on the command line names, told by its option's type name
/// (`->type_name(...)`); decides what the completion offers for it.
inline constexpr const char* kPipelineValue = "PIPELINE";  ///< a pipeline file: *.yaml, *.yml and folders
inline constexpr const char* kFileValue = "FILE";          ///< any file
inline constexpr const char* kStageTypeValue = "STAGE";    ///< a stage type from the registry
inline constexpr const char* kShellValue = "SHELL";        ///< a shell completion can be written for

/// A bash completion script for `app` (the `swarmflow` command): its
/// subcommands, each one's flags, and for values the kind their type name
/// says (pipeline files, files, `stage_types`, shells; nothing for numbers).
/// Defines `_swarmflow` and registers it with `complete` for `swarmflow`.
std::string bash_completion(const CLI::App& app, const std::vector<std::string>& stage_types);

}  // namespace swarmflow::cli
