#pragma once
// The stage catalogue as `swarmflow describe` prints it: text, JSON and the
// Markdown pages of docs/stages/, each with an example YAML entry generated
// from the stage's declared ports and parameters.

#include <string>
#include <vector>

#include <swarmflow/registry.hpp>

namespace swarmflow::cli {

/// One stage type with what its `setup` declares.
struct CatalogueEntry {
  const StageType* type = nullptr;
  StageSpec spec;
};

/// The pack of a stage type: the part of its name before the first dot.
std::string pack_of(const std::string& type);

/// The packs of `registry`, sorted.
std::vector<std::string> packs(const Registry& registry);

/// The stages `what` names: every stage when empty, one stage by its type, or
/// every stage of a pack. Empty, with a message in `error`, when it names none.
std::vector<CatalogueEntry> select_stages(const Registry& registry, const std::string& what, std::string* error);

/// The stage's example, a `stages:` list entry (indented two spaces): its
/// inputs connected to `example_producer` placeholders (optional ones
/// commented out), for several inputs `kExampleJoin` commented out, and
/// every parameter at its default.
std::string example_yaml(const CatalogueEntry& entry);

/// The `join:` line an example of a stage with several inputs suggests.
extern const char* const kExampleJoin;

/// The stage id the example gives a stage type (`vision.resize` -> `resize`).
std::string example_id(const std::string& type);

/// The producer stage an example connects `input` to; its output port is `out`.
std::string example_producer(const StageSpec& spec, const PortInfo& input);

/// One stage for a terminal: ports (optional inputs marked), parameters, example.
std::string describe_text(const CatalogueEntry& entry);

/// The stages as a JSON document: {"stages": [{type, pack, description,
/// inputs, outputs, parameters, example}]}.
std::string describe_json(const std::vector<CatalogueEntry>& entries);

/// The Markdown page of one pack (docs/stages/<pack>.md).
std::string describe_markdown(const std::string& pack, const std::vector<CatalogueEntry>& entries);

}  // namespace swarmflow::cli
