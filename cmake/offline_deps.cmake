# The libraries hzp builds with, from the folder scripts/offline-deps prepares
# (HZP_DEPS_DIR) instead of the system: nlohmann-json, CLI11 and fmt as header
# libraries (fmt with FMT_HEADER_ONLY), GoogleTest and GoogleMock from their
# sources. For a GPU machine that has a compiler, CMake, CUDA and NCCL and
# nothing else (the runtime-only build, HZP_RUNTIME_ONLY).
get_filename_component(HZP_DEPS_DIR "${HZP_DEPS_DIR}" ABSOLUTE BASE_DIR "${CMAKE_SOURCE_DIR}")
foreach(needed include/nlohmann/json.hpp include/CLI/CLI.hpp include/fmt/format.h googletest/CMakeLists.txt)
  if(NOT EXISTS "${HZP_DEPS_DIR}/${needed}")
    message(FATAL_ERROR "HZP_DEPS_DIR=${HZP_DEPS_DIR}: expected ${needed} (prepare the folder with "
                        "scripts/offline-deps where Debian's package archive is reachable)")
  endif()
endforeach()
message(STATUS "hzp: header libraries and GoogleTest from ${HZP_DEPS_DIR}")

# SYSTEM: their headers' own warnings are not ours (CI builds with -Werror).
add_library(hzp_dep_json INTERFACE)
target_include_directories(hzp_dep_json SYSTEM INTERFACE "${HZP_DEPS_DIR}/include")
add_library(nlohmann_json::nlohmann_json ALIAS hzp_dep_json)

add_library(hzp_dep_cli11 INTERFACE)
target_include_directories(hzp_dep_cli11 SYSTEM INTERFACE "${HZP_DEPS_DIR}/include")
add_library(CLI11::CLI11 ALIAS hzp_dep_cli11)

add_library(hzp_dep_fmt INTERFACE)
target_include_directories(hzp_dep_fmt SYSTEM INTERFACE "${HZP_DEPS_DIR}/include")
target_compile_definitions(hzp_dep_fmt INTERFACE FMT_HEADER_ONLY=1)
add_library(fmt::fmt ALIAS hzp_dep_fmt)

if(HZP_BUILD_TESTS)
  set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
  set(BUILD_GMOCK ON CACHE BOOL "" FORCE)
  # googletest's CMakeLists asks for CMake 3.5; CMake 4 refuses older policies
  # unless told the minimum it may assume.
  set(CMAKE_POLICY_VERSION_MINIMUM 3.5)
  add_subdirectory("${HZP_DEPS_DIR}/googletest" "${CMAKE_BINARY_DIR}/googletest" EXCLUDE_FROM_ALL SYSTEM)
  unset(CMAKE_POLICY_VERSION_MINIMUM)
endif()
