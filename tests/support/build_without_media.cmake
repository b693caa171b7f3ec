# cmake -DBUILD_DIR=<swarmflow build> -DSOURCE_DIR=<swarmflow source> -P build_without_media.cmake
#
# Checks that swarmflow builds, installs and runs without OpenCV and
# GStreamer: configures the source with SWARMFLOW_WITH_VIDEO, _VISION and
# _INSPECTION off into BUILD_DIR/_no_media (no tests, benchmarks or
# examples), builds only the `swarmflow` target (ccache shares the main
# build's objects), installs it into BUILD_DIR/_no_media_install, checks that
# nothing it loads is OpenCV or GStreamer, and runs pipelines/quickstart.yaml
# with the installed command: its report must say ok. Any failing step stops
# the script with its output.
cmake_minimum_required(VERSION 3.25)

foreach(var BUILD_DIR SOURCE_DIR)
  if(NOT ${var})
    message(FATAL_ERROR "build_without_media.cmake: pass -D${var}=...")
  endif()
endforeach()

set(tree "${BUILD_DIR}/_no_media")
set(prefix "${BUILD_DIR}/_no_media_install")

load_cache("${BUILD_DIR}" READ_WITH_PREFIX MAIN_ CMAKE_GENERATOR CMAKE_MAKE_PROGRAM CMAKE_CXX_COMPILER CMAKE_BUILD_TYPE)
if(NOT MAIN_CMAKE_GENERATOR)
  set(MAIN_CMAKE_GENERATOR Ninja)
endif()
set(configure_args -G "${MAIN_CMAKE_GENERATOR}")
foreach(var CMAKE_MAKE_PROGRAM CMAKE_CXX_COMPILER CMAKE_BUILD_TYPE)
  if(MAIN_${var})
    list(APPEND configure_args "-D${var}=${MAIN_${var}}")
  endif()
endforeach()

function(run_step name)
  execute_process(COMMAND ${ARGN}
    RESULT_VARIABLE rc
    OUTPUT_VARIABLE out
    ERROR_VARIABLE out
    TIMEOUT 1200)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "build without media: ${name} failed (${rc}):\n${ARGN}\n${out}")
  endif()
  message(STATUS "build without media: ${name}: ok")
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

# The build tree is kept between runs (a rebuild is incremental); the prefix
# is made afresh, so nothing stale can hide a missing file.
file(REMOVE_RECURSE "${prefix}")
# Objects are shared with the main build through ccache only when paths are
# taken relative to the source.
set(env "${CMAKE_COMMAND}" -E env "CCACHE_BASEDIR=${SOURCE_DIR}" CCACHE_NOHASHDIR=true)
run_step("configure" ${env} "${CMAKE_COMMAND}" -S "${SOURCE_DIR}" -B "${tree}" ${configure_args}
  -DSWARMFLOW_WITH_VIDEO=OFF -DSWARMFLOW_WITH_VISION=OFF -DSWARMFLOW_WITH_INSPECTION=OFF
  -DSWARMFLOW_BUILD_TESTS=OFF -DSWARMFLOW_BUILD_BENCH=OFF -DSWARMFLOW_BUILD_EXAMPLES=OFF)
run_step("build" ${env} "${CMAKE_COMMAND}" --build "${tree}" --target swarmflow)
run_step("install" "${CMAKE_COMMAND}" --install "${tree}" --prefix "${prefix}")

set(cli "${prefix}/bin/swarmflow")
run_step("ldd" ldd "${cli}")
if(step_output MATCHES "opencv|gst|swarmflow_actors_(video|vision|inspection)")
  message(FATAL_ERROR "build without media: the command still loads media libraries:\n${step_output}")
endif()
file(GLOB media_packs "${prefix}/lib*/libswarmflow_actors_video*" "${prefix}/lib*/libswarmflow_actors_vision*"
  "${prefix}/lib*/libswarmflow_actors_inspection*" "${prefix}/include/swarmflow/actors/video")
if(media_packs)
  message(FATAL_ERROR "build without media: media packs were installed: ${media_packs}")
endif()

set(report "${tree}/quickstart-report.json")
file(REMOVE "${report}")
run_step("run quickstart" "${cli}" run "${SOURCE_DIR}/pipelines/quickstart.yaml" --quiet --report "${report}")
file(READ "${report}" json)
string(JSON ok GET "${json}" ok)
if(NOT ok)
  message(FATAL_ERROR "build without media: the quickstart run is not ok:\n${json}")
endif()
# The media stages are absent, and said so.
execute_process(COMMAND "${cli}" describe video.source RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
if(rc EQUAL 0)
  message(FATAL_ERROR "build without media: `describe video.source` succeeded in a build without the video pack")
endif()
message(STATUS "build without media: the installed command ran pipelines/quickstart.yaml")
