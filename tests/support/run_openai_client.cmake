# The `openai` npm client against `swarmflow serve` (tests/clients/openai.test.mjs).
# Installs the client once, from tests/clients/package-lock.json, into WORK_DIR.
file(MAKE_DIRECTORY "${WORK_DIR}")
foreach(f package.json package-lock.json openai.test.mjs)
  configure_file("${SOURCE_DIR}/tests/clients/${f}" "${WORK_DIR}/${f}" COPYONLY)
endforeach()
if(NOT EXISTS "${WORK_DIR}/node_modules/openai/package.json")
  execute_process(COMMAND npm ci --no-audit --no-fund WORKING_DIRECTORY "${WORK_DIR}" RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "npm ci of the test clients failed (${rc}); the npm registry must be reachable")
  endif()
endif()
execute_process(COMMAND node openai.test.mjs "${CLI}" "${SOURCE_DIR}/pipelines/tokens.yaml"
  WORKING_DIRECTORY "${WORK_DIR}" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the openai client test failed (${rc})")
endif()
