# cmake -DBUILD_DIR=<swarmflow build> -DSOURCE_DIR=<swarmflow source> -P run_embed_example.cmake
#
# Checks that an application can use swarmflow through the installed package
# only: installs the build into BUILD_DIR/_install, configures and builds
# examples/embed against that prefix in BUILD_DIR/_embed, and runs it.
# Any failing step stops the script with that step's output.
cmake_minimum_required(VERSION 3.25)

foreach(var BUILD_DIR SOURCE_DIR)
  if(NOT ${var})
    message(FATAL_ERROR "run_embed_example.cmake: pass -D${var}=...")
  endif()
endforeach()

set(install_dir "${BUILD_DIR}/_install")
set(embed_dir "${BUILD_DIR}/_embed")

# Build the example the way the main project was built: same generator,
# compiler and build type, and ccache when there is one.
load_cache("${BUILD_DIR}" READ_WITH_PREFIX MAIN_
  CMAKE_GENERATOR CMAKE_MAKE_PROGRAM CMAKE_CXX_COMPILER CMAKE_BUILD_TYPE CMAKE_INSTALL_LIBDIR)
if(NOT MAIN_CMAKE_INSTALL_LIBDIR)
  set(MAIN_CMAKE_INSTALL_LIBDIR lib)
endif()
if(NOT MAIN_CMAKE_GENERATOR)
  set(MAIN_CMAKE_GENERATOR Ninja)
endif()
set(configure_args -G "${MAIN_CMAKE_GENERATOR}")
if(MAIN_CMAKE_MAKE_PROGRAM)
  list(APPEND configure_args "-DCMAKE_MAKE_PROGRAM=${MAIN_CMAKE_MAKE_PROGRAM}")
endif()
if(MAIN_CMAKE_CXX_COMPILER)
  list(APPEND configure_args "-DCMAKE_CXX_COMPILER=${MAIN_CMAKE_CXX_COMPILER}")
endif()
if(MAIN_CMAKE_BUILD_TYPE)
  list(APPEND configure_args "-DCMAKE_BUILD_TYPE=${MAIN_CMAKE_BUILD_TYPE}")
endif()
find_program(CCACHE_PROGRAM ccache)
if(CCACHE_PROGRAM)
  list(APPEND configure_args "-DCMAKE_CXX_COMPILER_LAUNCHER=${CCACHE_PROGRAM}")
endif()

# Runs one step; stops with its output when it fails.
function(run_step name)
  execute_process(COMMAND ${ARGN}
    RESULT_VARIABLE rc
    OUTPUT_VARIABLE out
    ERROR_VARIABLE out
    TIMEOUT 600)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "embed example: ${name} failed (${rc}):\n${ARGN}\n${out}")
  endif()
  message(STATUS "embed example: ${name}: ok")
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

# Fresh prefix and build tree, so nothing stale can hide a missing file.
file(REMOVE_RECURSE "${install_dir}" "${embed_dir}")

run_step("install" "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${install_dir}")
run_step("configure" "${CMAKE_COMMAND}" -S "${SOURCE_DIR}/examples/embed" -B "${embed_dir}"
  ${configure_args} "-DCMAKE_PREFIX_PATH=${install_dir}")
run_step("build" "${CMAKE_COMMAND}" --build "${embed_dir}")
# The installed libraries' RPATH names the main project's default prefix, not
# this one, so the run is told where they are.
run_step("run" "${CMAKE_COMMAND}" -E env "LD_LIBRARY_PATH=${install_dir}/${MAIN_CMAKE_INSTALL_LIBDIR}"
  "${embed_dir}/embed_example")
message(STATUS "embed example output:\n${step_output}")
