# ds_add_model_plugin(NAME source...): builds a dsworker model plugin, the shared module
# `libds_model_<NAME>.so`, into ${CMAKE_BINARY_DIR}/plugins (CMake target: ds_model_<NAME>).
#
# The module exports exactly one symbol, `ds_plugin_entry` (defined by DS_PLUGIN(...) from
# runtime/plugin/ds_plugin_sdk.h): a linker version script hides everything else, including
# what static libraries linked into it bring, so two plugins (or a plugin and dsworker) never
# interpose each other's symbols. The target gets the SDK's include directory and nlohmann::json;
# link anything else it needs (e.g. ds_kernels_cpu in this tree) with target_link_libraries.
#
# In this tree: models/CMakeLists.txt includes this file; see models/mlp/CMakeLists.txt.
#
# Out of tree (your own model, built against a dsrun checkout or an install, whose
# PREFIX/lib/cmake/dsrun/DsPlugin.cmake finds PREFIX/include/dsrun):
#   cmake_minimum_required(VERSION 3.25)
#   project(mymodel LANGUAGES CXX)
#   set(CMAKE_CXX_STANDARD 20)
#   include(/path/to/dsrun/cmake/DsPlugin.cmake)     # finds the SDK headers relative to itself
#   ds_add_model_plugin(mymodel mymodel.cpp)        # -> build/plugins/libds_model_mymodel.so
# then run it by path (`--model /abs/path/build/plugins/libds_model_mymodel.so`) or by name with
# DSWORKER_PLUGIN_PATH=/abs/path/build/plugins (dsworker --model mymodel). Set DS_PLUGIN_INCLUDE_DIR
# beforehand if the headers live elsewhere (it must contain plugin/ds_plugin_sdk.h).
include_guard(GLOBAL)

# The headers sit in the source tree's runtime/, or, once installed, in PREFIX/include/dsrun.
if(EXISTS "${CMAKE_CURRENT_LIST_DIR}/../runtime/plugin/ds_plugin_sdk.h")
  set(_ds_plugin_headers "${CMAKE_CURRENT_LIST_DIR}/../runtime")
else()
  set(_ds_plugin_headers "${CMAKE_CURRENT_LIST_DIR}/../../../include/dsrun")
endif()
set(DS_PLUGIN_INCLUDE_DIR "${_ds_plugin_headers}" CACHE PATH
    "Directory holding plugin/ds_plugin.h and plugin/ds_plugin_sdk.h")
if(NOT TARGET nlohmann_json::nlohmann_json)
  find_package(nlohmann_json 3 REQUIRED)
endif()

function(ds_add_model_plugin NAME)
  # Export list shared by every plugin: ds_plugin_entry, nothing else (written only if changed).
  set(version_script "${CMAKE_BINARY_DIR}/ds_plugin_exports.map")
  file(CONFIGURE OUTPUT "${version_script}" CONTENT "{\n  global: ds_plugin_entry;\n  local: *;\n};\n")
  if(NOT NAME MATCHES "^[A-Za-z0-9_-]+$")
    message(FATAL_ERROR "ds_add_model_plugin: '${NAME}' is not a plugin name (letters, digits, '_', '-')")
  endif()
  if(NOT ARGN)
    message(FATAL_ERROR "ds_add_model_plugin(${NAME}): no sources")
  endif()
  set(target ds_model_${NAME})
  add_library(${target} MODULE ${ARGN})
  set_target_properties(${target} PROPERTIES
    PREFIX "lib"
    OUTPUT_NAME "ds_model_${NAME}"
    SUFFIX ".so"
    # $<0:> keeps multi-config generators from appending a per-configuration subdirectory.
    LIBRARY_OUTPUT_DIRECTORY "${CMAKE_BINARY_DIR}/plugins$<0:>"
    CXX_VISIBILITY_PRESET hidden
    C_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    LINK_DEPENDS "${version_script}")
  target_include_directories(${target} PRIVATE "${DS_PLUGIN_INCLUDE_DIR}")
  target_link_libraries(${target} PRIVATE nlohmann_json::nlohmann_json)
  target_link_options(${target} PRIVATE "LINKER:--version-script=${version_script}")
endfunction()
