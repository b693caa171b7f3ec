# cmake -DCLI=<swarmflow> -DCHECK=<swarmflow_report_check> -DPIPELINE=<file.yaml>
#       -DREPORT=<report.json> -DSCHEMA=<report.schema.json> -DDURATION=<seconds>
#       -P run_pipeline.cmake
#
# Runs a pipeline briefly through the CLI with --report, then checks the
# report (report_check.hpp): ok, every edge conserved, every sink fed, and
# it conforms to docs/report.schema.json. Any failing step stops the script
# with that step's output.
cmake_minimum_required(VERSION 3.25)

foreach(var CLI CHECK PIPELINE REPORT SCHEMA DURATION)
  if(NOT ${var})
    message(FATAL_ERROR "run_pipeline.cmake: pass -D${var}=...")
  endif()
endforeach()

# No report from an earlier run may stand in for this one's.
get_filename_component(report_dir "${REPORT}" DIRECTORY)
file(MAKE_DIRECTORY "${report_dir}")
file(REMOVE "${REPORT}")

execute_process(COMMAND "${CLI}" run "${PIPELINE}" --quiet --duration "${DURATION}" --report "${REPORT}"
  RESULT_VARIABLE rc
  OUTPUT_VARIABLE out
  ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "swarmflow run ${PIPELINE} failed (${rc}):\n${out}")
endif()
message(STATUS "${out}")

execute_process(COMMAND "${CHECK}" "${REPORT}" "${SCHEMA}"
  RESULT_VARIABLE rc
  OUTPUT_VARIABLE out
  ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the report of ${PIPELINE} does not hold (${rc}):\n${out}")
endif()
message(STATUS "${out}")
