# Generates build_info.h with the git commit (and a dirty flag) and the build flags, refreshed on
# every build so a report never names a stale commit.
set(KDA_BUILD_INFO_DIR ${CMAKE_BINARY_DIR}/generated)
file(MAKE_DIRECTORY ${KDA_BUILD_INFO_DIR}/kda)
set(_flags "CXX=${CMAKE_CXX_COMPILER_ID}-${CMAKE_CXX_COMPILER_VERSION} ${CMAKE_BUILD_TYPE}")
if(KDA_ENABLE_CUDA)
  string(APPEND _flags " CUDA=${CMAKE_CUDA_COMPILER_VERSION} arch=${CMAKE_CUDA_ARCHITECTURES}")
endif()
if(KDA_SANITIZE)
  string(APPEND _flags " asan+ubsan")
endif()
add_custom_target(kda_build_info
  COMMAND ${CMAKE_COMMAND} -DSRC=${CMAKE_SOURCE_DIR} -DOUT=${KDA_BUILD_INFO_DIR}/kda/build_info.h
          "-DFLAGS=${_flags}" -P ${CMAKE_SOURCE_DIR}/cmake/WriteBuildInfo.cmake
  BYPRODUCTS ${KDA_BUILD_INFO_DIR}/kda/build_info.h
  COMMENT "Recording git commit and build flags")
add_library(kda_build_info_headers INTERFACE)
add_dependencies(kda_build_info_headers kda_build_info)
target_include_directories(kda_build_info_headers INTERFACE ${KDA_BUILD_INFO_DIR})
