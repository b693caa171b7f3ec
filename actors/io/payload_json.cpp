#include "io/payload_json.hpp"

#include <cctype>
#include <cstdint>
#include <cstdio>

#include <flatbuffers/idl.h>
#include <flatbuffers/reflection.h>

namespace swarmflow::io {

namespace {

// Limits of the verification of a payload against its schema.
constexpr flatbuffers::uoffset_t kMaxDepth = 64;
constexpr flatbuffers::uoffset_t kMaxTables = 1000000;

std::string unknown_json(std::string_view identifier, std::size_t bytes) {
  return "{\"unknown_type\": " + json_quote(identifier) + ", \"bytes\": " + std::to_string(bytes) +
         "}";
}

std::string failed_json(std::string_view identifier, std::size_t bytes, std::string_view why) {
  return "{\"type\": " + json_quote(identifier) + ", \"bytes\": " + std::to_string(bytes) +
         ", \"error\": " + json_quote(why) + "}";
}

bool is_word_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_'; }

// FlatBuffers prints non-finite floats as the bare words nan, inf and -inf,
// which JSON does not have; they become null. Outside strings, the generated
// text holds no other bare words than true and false.
void replace_non_finite(std::string* text) {
  if (text->find("nan") == std::string::npos && text->find("inf") == std::string::npos) return;
  std::string out;
  out.reserve(text->size());
  bool in_string = false;
  const std::string& s = *text;
  for (std::size_t i = 0; i < s.size();) {
    const char c = s[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < s.size()) {
        out += s[i + 1];
        i += 2;
        continue;
      }
      if (c == '"') in_string = false;
      ++i;
      continue;
    }
    if (c == '"') {
      in_string = true;
      out += c;
      ++i;
      continue;
    }
    if (c == '-' || std::isalpha(static_cast<unsigned char>(c)) != 0) {
      std::size_t end = i + 1;
      while (end < s.size() && is_word_char(s[end])) ++end;
      std::string_view word(s.data() + i, end - i);
      if (word == "nan" || word == "-nan" || word == "inf" || word == "-inf") {
        out += "null";
        i = end;
        continue;
      }
      out.append(word);
      i = end;
      continue;
    }
    out += c;
    ++i;
  }
  text->swap(out);
}

}  // namespace

struct PayloadPrinter::Schema {
  explicit Schema(const flatbuffers::IDLOptions& options) : parser(options) {}

  flatbuffers::Parser parser;
  std::vector<std::uint8_t> reflection_bytes;  // the parsed schema in reflection form
  const reflection::Schema* reflection = nullptr;
  const reflection::Object* root = nullptr;
  std::string file;
};

const PayloadPrinter& PayloadPrinter::instance() {
  static const PayloadPrinter printer(embedded_schemas());
  return printer;
}

PayloadPrinter::PayloadPrinter(
    const std::vector<std::pair<std::string_view, std::string_view>>& schemas) {
  flatbuffers::IDLOptions options;
  options.strict_json = true;
  options.indent_step = -1;
  options.output_default_scalars_in_json = true;
  for (const auto& [file, text] : schemas) {
    auto schema = std::make_unique<Schema>(options);
    schema->file = std::string(file);
    const std::string source(text);
    if (!schema->parser.Parse(source.c_str(), nullptr, schema->file.c_str())) {
      errors_.push_back(schema->file + ": " + schema->parser.error_);
      continue;
    }
    const std::string identifier = schema->parser.file_identifier_;
    if (identifier.size() != flatbuffers::kFileIdentifierLength ||
        schema->parser.root_struct_def_ == nullptr) {
      errors_.push_back(schema->file + ": needs both root_type and file_identifier");
      continue;
    }
    if (by_identifier_.count(identifier) != 0) {
      errors_.push_back(schema->file + ": file_identifier \"" + identifier + "\" is also declared by " +
                        by_identifier_[identifier]->file);
      continue;
    }
    schema->parser.Serialize();
    const flatbuffers::FlatBufferBuilder& built = schema->parser.builder_;
    schema->reflection_bytes.assign(built.GetBufferPointer(), built.GetBufferPointer() + built.GetSize());
    schema->reflection = reflection::GetSchema(schema->reflection_bytes.data());
    schema->root = schema->reflection->root_table();
    if (schema->root == nullptr) {
      errors_.push_back(schema->file + ": no root table in its reflection data");
      continue;
    }
    by_identifier_.emplace(identifier, std::move(schema));
  }
}

PayloadPrinter::~PayloadPrinter() = default;

bool PayloadPrinter::to_json(const Payload& p, std::string* out) const {
  const std::string_view identifier = p.identifier();
  auto it = by_identifier_.find(identifier);
  if (it == by_identifier_.end()) {
    *out = unknown_json(identifier, p.size());
    return false;
  }
  const Schema& schema = *it->second;
  if (!flatbuffers::Verify(*schema.reflection, *schema.root, p.data(), p.size(), kMaxDepth, kMaxTables)) {
    *out = failed_json(identifier, p.size(), "buffer fails verification against " + schema.file);
    return false;
  }
  out->clear();
  if (!flatbuffers::GenerateText(schema.parser, p.data(), out)) {
    *out = failed_json(identifier, p.size(), "holds text that is not valid UTF-8");
    return false;
  }
  replace_non_finite(out);
  return true;
}

bool PayloadPrinter::knows(std::string_view identifier) const {
  return by_identifier_.find(identifier) != by_identifier_.end();
}

std::string PayloadPrinter::root_type(std::string_view identifier) const {
  auto it = by_identifier_.find(identifier);
  if (it == by_identifier_.end()) return {};
  return it->second->root->name()->str();
}

std::vector<std::string> PayloadPrinter::identifiers() const {
  std::vector<std::string> ids;
  ids.reserve(by_identifier_.size());
  for (const auto& entry : by_identifier_) ids.push_back(entry.first);
  return ids;
}

std::string json_quote(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out += '"';
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (u < 0x20 || u >= 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", u);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  out += '"';
  return out;
}

}  // namespace swarmflow::io
