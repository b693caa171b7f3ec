# cmake -DBUILD_DIR=<swarmflow build> -DSOURCE_DIR=<swarmflow source> -P run_plugin_example.cmake
#
# Checks that a stage pack built as a plugin against the installed package
# only is used by the installed stock CLI: installs the build into
# BUILD_DIR/_install_plugin, builds examples/plugin against that prefix in
# BUILD_DIR/_plugin, then, with SWARMFLOW_PLUGIN_PATH naming the plugin's
# folder, `describe example.brightness` and a `run --quiet` of
# examples/plugin/brightness.yaml whose stdout must be only the brightened
# frames as JSON lines. Last, find_package(swarmflow) next to a FlatBuffers of
# another release must fail naming both versions. Any failing step stops the
# script with its output.
cmake_minimum_required(VERSION 3.25)

foreach(var BUILD_DIR SOURCE_DIR)
  if(NOT ${var})
    message(FATAL_ERROR "run_plugin_example.cmake: pass -D${var}=...")
  endif()
endforeach()

# Its own prefix and tree: the embed example's test may run at the same time.
set(install_dir "${BUILD_DIR}/_install_plugin")
set(plugin_dir "${BUILD_DIR}/_plugin")

load_cache("${BUILD_DIR}" READ_WITH_PREFIX MAIN_
  CMAKE_GENERATOR CMAKE_MAKE_PROGRAM CMAKE_CXX_COMPILER CMAKE_BUILD_TYPE)
if(NOT MAIN_CMAKE_GENERATOR)
  set(MAIN_CMAKE_GENERATOR Ninja)
endif()
set(configure_args -G "${MAIN_CMAKE_GENERATOR}")
foreach(var CMAKE_MAKE_PROGRAM CMAKE_CXX_COMPILER CMAKE_BUILD_TYPE)
  if(MAIN_${var})
    list(APPEND configure_args "-D${var}=${MAIN_${var}}")
  endif()
endforeach()
find_program(CCACHE_PROGRAM ccache)
if(CCACHE_PROGRAM)
  list(APPEND configure_args "-DCMAKE_CXX_COMPILER_LAUNCHER=${CCACHE_PROGRAM}")
endif()

# Runs one step; stops with its output when it fails. Leaves stdout in
# step_output and stderr in step_error.
function(run_step name)
  execute_process(COMMAND ${ARGN}
    RESULT_VARIABLE rc
    OUTPUT_VARIABLE out
    ERROR_VARIABLE err
    TIMEOUT 600)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "plugin example: ${name} failed (${rc}):\n${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "plugin example: ${name}: ok")
  set(step_output "${out}" PARENT_SCOPE)
  set(step_error "${err}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE "${install_dir}" "${plugin_dir}")

run_step("install" "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${install_dir}")
run_step("configure" "${CMAKE_COMMAND}" -S "${SOURCE_DIR}/examples/plugin" -B "${plugin_dir}"
  ${configure_args} "-DCMAKE_PREFIX_PATH=${install_dir}")
run_step("build" "${CMAKE_COMMAND}" --build "${plugin_dir}")
if(NOT EXISTS "${plugin_dir}/libswarmflow_example_plugin.so")
  message(FATAL_ERROR "plugin example: the build made no ${plugin_dir}/libswarmflow_example_plugin.so")
endif()

set(cli "${install_dir}/bin/swarmflow")
set(env "${CMAKE_COMMAND}" -E env "SWARMFLOW_PLUGIN_PATH=${plugin_dir}")
run_step("describe" ${env} "${cli}" describe example.brightness)
if(NOT step_output MATCHES "example.brightness" OR NOT step_output MATCHES "gain")
  message(FATAL_ERROR "plugin example: describe does not show the stage:\n${step_output}")
endif()

run_step("run" ${env} "${cli}" run "${SOURCE_DIR}/examples/plugin/brightness.yaml" --quiet)
# stdout is data alone: five JSON lines, each a 4x2 BGR frame of 7s.
string(REGEX REPLACE "\n$" "" lines "${step_output}")
string(REPLACE "\n" ";" lines "${lines}")
list(LENGTH lines count)
if(NOT count EQUAL 5)
  message(FATAL_ERROR "plugin example: expected 5 lines on stdout, got ${count}:\n${step_output}\n${step_error}")
endif()
foreach(line IN LISTS lines)
  string(JSON pixels ERROR_VARIABLE json_error GET "${line}" payload pixels)
  if(json_error)
    message(FATAL_ERROR "plugin example: not a frame as JSON (${json_error}):\n${line}")
  endif()
  string(JSON n LENGTH "${pixels}")
  if(NOT n EQUAL 24)
    message(FATAL_ERROR "plugin example: expected 24 samples, got ${n}:\n${line}")
  endif()
  math(EXPR last "${n} - 1")
  foreach(i RANGE ${last})
    string(JSON v GET "${pixels}" ${i})
    if(NOT v EQUAL 7)
      message(FATAL_ERROR "plugin example: sample ${i} is ${v}, not 7:\n${line}")
    endif()
  endforeach()
endforeach()
message(STATUS "plugin example: 5 frames brightened to 7 through the stock CLI")

# A FlatBuffers of another release than the one the schema headers were
# generated with is refused by the package config, naming both.
set(fake_fb "${plugin_dir}/fake-flatbuffers")
file(WRITE "${fake_fb}/FlatBuffersConfig.cmake" "# a FlatBuffers of another release, for the test\n")
file(WRITE "${fake_fb}/FlatBuffersConfigVersion.cmake"
  "set(PACKAGE_VERSION 99.1.2)\nset(PACKAGE_VERSION_COMPATIBLE TRUE)\n")
execute_process(COMMAND "${CMAKE_COMMAND}" -S "${SOURCE_DIR}/examples/plugin" -B "${plugin_dir}/fake-build"
    ${configure_args} "-DCMAKE_PREFIX_PATH=${install_dir}" "-DFlatBuffers_DIR=${fake_fb}"
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(rc EQUAL 0 OR NOT out MATCHES "generated for FlatBuffers [0-9.]+, but[ \n]+FlatBuffers 99.1.2")
  message(FATAL_ERROR "plugin example: a FlatBuffers of another release was not refused clearly (${rc}):\n${out}")
endif()
message(STATUS "plugin example: find_package(swarmflow) refuses FlatBuffers 99.1.2 naming both versions")
