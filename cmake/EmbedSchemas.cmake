# cmake -DOUT=file.cpp -DSCHEMAS=a.fbs;b.fbs -P EmbedSchemas.cmake
# Writes a C++ file that holds every schema's text, for JSON printing at run time.
set(body "// Generated from schemas/*.fbs. Do not edit.\n#include <string_view>\n#include <utility>\n#include <vector>\n\nnamespace swarmflow {\n\nconst std::vector<std::pair<std::string_view, std::string_view>>& embedded_schemas() {\n  static const std::vector<std::pair<std::string_view, std::string_view>> schemas = {\n")
foreach(fbs IN LISTS SCHEMAS)
  get_filename_component(name "${fbs}" NAME)
  file(READ "${fbs}" text)
  string(APPEND body "    {\"${name}\", R\"swarmflow_fbs(${text})swarmflow_fbs\"},\n")
endforeach()
string(APPEND body "  };\n  return schemas;\n}\n\n}  // namespace swarmflow\n")
file(WRITE "${OUT}.tmp" "${body}")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
