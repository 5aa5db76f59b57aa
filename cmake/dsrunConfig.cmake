# find_package(dsrun): what an out-of-tree model plugin needs from an installed dsrun — the
# ds_add_model_plugin() function (DsPlugin.cmake) and the interface target dsrun::plugin_sdk (the SDK
# headers and nlohmann_json). See examples/bigram.
include("${CMAKE_CURRENT_LIST_DIR}/DsPlugin.cmake")
if(NOT TARGET dsrun::plugin_sdk)
  add_library(dsrun::plugin_sdk INTERFACE IMPORTED)
  set_target_properties(dsrun::plugin_sdk PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${DS_PLUGIN_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES nlohmann_json::nlohmann_json)
endif()
