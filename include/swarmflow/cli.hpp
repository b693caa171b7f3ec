#pragma once
/// \file cli.hpp
/// The stock `swarmflow` command as a function, for an application that has
/// stages of its own: its `main` calls `cli_main` with them and gets every
/// subcommand (run with progress, the summary and Ctrl-C handling, unit,
/// validate, graph, describe, keygen, completion) for its stages as well.
///
/// ```cpp
/// int main(int argc, char** argv) {
///   swarmflow::CliOptions options;
///   options.program = "mytool";
///   options.stage_packs.push_back([](swarmflow::Registry& r) { return r.add<MyStage>("my.stage", "..."); });
///   return swarmflow::cli_main(argc, argv, options);
/// }
/// ```

#include <functional>
#include <string>
#include <vector>

#include <swarmflow/registry.hpp>
#include <swarmflow/status.hpp>

namespace swarmflow {

/// What an application adds to the stock command.
struct CliOptions {
  /// Add stage types to every registry the command makes, after the built-in
  /// packs and before plugins. An error ends the command with exit code 2.
  std::vector<std::function<Status(Registry&)>> stage_packs;
  /// The command's name in its help, version and completion script.
  std::string program = "swarmflow";
};

/// Runs the `swarmflow` command on `argv` and returns its exit code: 0 ok,
/// 1 runtime failure, 2 invalid pipeline or usage.
int cli_main(int argc, char** argv, const CliOptions& options = {});

}  // namespace swarmflow
