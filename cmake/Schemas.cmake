# Generates C++ for every schemas/*.fbs with flatc at build time, and embeds
# the schema texts so that payloads can be printed as JSON at run time.
file(GLOB SWARMFLOW_SCHEMAS CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/schemas/*.fbs")
set(SWARMFLOW_GENERATED_DIR "${PROJECT_BINARY_DIR}/generated")
set(_schema_out "${SWARMFLOW_GENERATED_DIR}/swarmflow/schema")

set(_generated_headers)
foreach(fbs IN LISTS SWARMFLOW_SCHEMAS)
  get_filename_component(name "${fbs}" NAME_WE)
  set(header "${_schema_out}/${name}_generated.h")
  add_custom_command(
    OUTPUT "${header}"
    COMMAND "${FLATC}" --cpp --gen-name-strings --scoped-enums
            -o "${_schema_out}" "${fbs}"
    DEPENDS "${fbs}"
    COMMENT "flatc ${name}.fbs"
    VERBATIM)
  list(APPEND _generated_headers "${header}")
endforeach()

set(_schema_texts "${SWARMFLOW_GENERATED_DIR}/schema_texts.cpp")
add_custom_command(
  OUTPUT "${_schema_texts}"
  COMMAND "${CMAKE_COMMAND}" -DOUT=${_schema_texts} "-DSCHEMAS=${SWARMFLOW_SCHEMAS}"
          -P "${PROJECT_SOURCE_DIR}/cmake/EmbedSchemas.cmake"
  DEPENDS ${SWARMFLOW_SCHEMAS} "${PROJECT_SOURCE_DIR}/cmake/EmbedSchemas.cmake"
  COMMENT "embedding schema texts"
  VERBATIM)
set(SWARMFLOW_SCHEMA_TEXTS_CPP "${_schema_texts}")

# swarmflow/version.hpp: the release the installed headers belong to.
configure_file("${PROJECT_SOURCE_DIR}/cmake/version.hpp.in" "${SWARMFLOW_GENERATED_DIR}/swarmflow/version.hpp" @ONLY)
install(FILES "${SWARMFLOW_GENERATED_DIR}/swarmflow/version.hpp" DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/swarmflow")

add_custom_target(swarmflow_schemas_gen DEPENDS ${_generated_headers} "${_schema_texts}")
add_library(swarmflow_schemas INTERFACE)
add_dependencies(swarmflow_schemas swarmflow_schemas_gen)
target_include_directories(swarmflow_schemas INTERFACE
  $<BUILD_INTERFACE:${SWARMFLOW_GENERATED_DIR}>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
set_target_properties(swarmflow_schemas PROPERTIES EXPORT_NAME schemas)
install(FILES ${_generated_headers} DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/swarmflow/schema")
install(FILES ${SWARMFLOW_SCHEMAS} DESTINATION "${CMAKE_INSTALL_DATADIR}/swarmflow/schemas")
