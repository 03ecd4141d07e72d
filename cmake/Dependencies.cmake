# System libraries, all from Debian's packages (scripts/install-deps.sh installs them).
find_package(OpenMP REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(OPENBLAS REQUIRED IMPORTED_TARGET openblas)
pkg_check_modules(SENTENCEPIECE REQUIRED IMPORTED_TARGET sentencepiece)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(CLI11 REQUIRED)
if(ALPHA_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()

# Precompiled headers for a target's C++ files (not nvcc's .cu files): the standard library and the
# third-party headers named after the target (gtest/gtest.h, CLI/CLI.hpp) were parsed again for every file;
# precompiled, the C++ build takes about a fifth less CPU time on CI's two cores (docs/SECURITY.md, "Time in
# CI"). nlohmann/json.hpp only with clang, which loads a PCH lazily: GCC loads all of it, about 0.6 s in every
# file, more than it saves where only a fifth of the files include it.
function(alpha_precompile_headers target)
  set(headers algorithm array atomic chrono cmath cstdint cstdio cstdlib cstring filesystem fstream functional
      limits map memory mutex numeric optional set span sstream string string_view thread tuple type_traits
      unordered_map utility vector ${ARGN})
  if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    list(APPEND headers nlohmann/json.hpp)
  endif()
  list(TRANSFORM headers REPLACE "^(.+)$" "$<$<COMPILE_LANGUAGE:CXX>:<\\1$<ANGLE-R>>")
  target_precompile_headers(${target} PRIVATE ${headers})
endfunction()
