# Installs headers, libraries, the CLI and a package config, so that an
# application does find_package(swarmflow CONFIG) and links swarmflow::runtime.
include(CMakePackageConfigHelpers)

install(DIRECTORY "${PROJECT_SOURCE_DIR}/include/swarmflow" DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}")
# The headers of the packs this build has.
set(_swarmflow_packs sim io lm consensus)
foreach(pack VIDEO VISION INSPECTION ULTRASOUND)
  if(SWARMFLOW_WITH_${pack})
    string(TOLOWER ${pack} name)
    list(APPEND _swarmflow_packs ${name})
  endif()
endforeach()
set(_swarmflow_pack_targets)
foreach(pack IN LISTS _swarmflow_packs)
  install(DIRECTORY "${PROJECT_SOURCE_DIR}/actors/${pack}"
          DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/swarmflow/actors"
          FILES_MATCHING PATTERN "*.hpp")
  list(APPEND _swarmflow_pack_targets swarmflow_actors_${pack})
endforeach()
install(DIRECTORY "${PROJECT_SOURCE_DIR}/pipelines/" DESTINATION "${CMAKE_INSTALL_DATADIR}/swarmflow/pipelines")
install(DIRECTORY "${PROJECT_SOURCE_DIR}/models/" DESTINATION "${CMAKE_INSTALL_DATADIR}/swarmflow/models")

install(TARGETS swarmflow_schemas swarmflow_core swarmflow_runtime swarmflow_cli ${_swarmflow_pack_targets}
        EXPORT swarmflowTargets
        LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}"
        ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}"
        RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}"
        INCLUDES DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}")
install(TARGETS swarmflow RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}")

# Installed binaries find swarmflow's libraries relative to themselves, so any
# prefix works (`cmake --install build --prefix DIR`), not only the one that
# CMAKE_INSTALL_RPATH named at configure time.
file(RELATIVE_PATH _bin_to_lib "${CMAKE_INSTALL_FULL_BINDIR}" "${CMAKE_INSTALL_FULL_LIBDIR}")
set_target_properties(swarmflow_core swarmflow_runtime swarmflow_cli ${_swarmflow_pack_targets}
  PROPERTIES INSTALL_RPATH "$ORIGIN")
set_target_properties(swarmflow PROPERTIES INSTALL_RPATH "$ORIGIN/${_bin_to_lib}")

set(_cfg_dir "${CMAKE_INSTALL_LIBDIR}/cmake/swarmflow")
install(EXPORT swarmflowTargets NAMESPACE swarmflow:: DESTINATION "${_cfg_dir}")
configure_package_config_file("${PROJECT_SOURCE_DIR}/cmake/swarmflowConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/swarmflowConfig.cmake" INSTALL_DESTINATION "${_cfg_dir}")
write_basic_package_version_file("${PROJECT_BINARY_DIR}/swarmflowConfigVersion.cmake"
  COMPATIBILITY SameMinorVersion)
install(FILES "${PROJECT_BINARY_DIR}/swarmflowConfig.cmake"
              "${PROJECT_BINARY_DIR}/swarmflowConfigVersion.cmake"
        DESTINATION "${_cfg_dir}")
