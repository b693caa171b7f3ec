# cmake -DRUNTIME=<libswarmflow_runtime.so> -P runtime_links.cmake
#
# An application that embeds the runtime must not get the packs on OpenCV
# and GStreamer with it: the runtime library needs none of them.
cmake_minimum_required(VERSION 3.25)
execute_process(COMMAND readelf -d "${RUNTIME}" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "readelf -d ${RUNTIME} failed:\n${out}")
endif()
string(REGEX MATCHALL "NEEDED[^\n]*" needed "${out}")
foreach(line IN LISTS needed)
  if(line MATCHES "opencv|gst|swarmflow_actors_(video|vision|inspection)")
    message(FATAL_ERROR "${RUNTIME} links a media library: ${line}")
  endif()
endforeach()
message(STATUS "${RUNTIME} needs: ${needed}")
