# Resolves ALPHA_DASHBOARD into ALPHA_WITH_DASHBOARD: the HTTP server of `alpha dashboard` and
# `alpha train --dashboard`, over cpp-httplib (Debian: libcpp-httplib-dev, found through pkg-config).
# AUTO builds it where cpp-httplib is found; ON requires it (CI); OFF never builds it. Without it the
# dashboard commands fail with one line; `alpha report` needs no HTTP and is always built.
set(ALPHA_DASHBOARD "AUTO" CACHE STRING "Build the dashboard server: AUTO, ON or OFF")
set_property(CACHE ALPHA_DASHBOARD PROPERTY STRINGS AUTO ON OFF)
set(ALPHA_WITH_DASHBOARD OFF)
if(ALPHA_DASHBOARD STREQUAL "ON" OR ALPHA_DASHBOARD STREQUAL "AUTO")
  pkg_check_modules(HTTPLIB QUIET IMPORTED_TARGET cpp-httplib)
  if(HTTPLIB_FOUND)
    set(ALPHA_WITH_DASHBOARD ON)
  elseif(ALPHA_DASHBOARD STREQUAL "ON")
    message(FATAL_ERROR "ALPHA_DASHBOARD=ON but cpp-httplib was not found; install libcpp-httplib-dev or use -DALPHA_DASHBOARD=OFF")
  endif()
elseif(NOT ALPHA_DASHBOARD STREQUAL "OFF")
  message(FATAL_ERROR "ALPHA_DASHBOARD must be AUTO, ON or OFF, got '${ALPHA_DASHBOARD}'")
endif()
if(ALPHA_WITH_DASHBOARD)
  find_package(Threads REQUIRED)
endif()
message(STATUS "Alpha dashboard server: ${ALPHA_WITH_DASHBOARD} (ALPHA_DASHBOARD=${ALPHA_DASHBOARD})")

# The page's files (src/alpha/dashboard/assets) compiled into the binary as string literals, so the
# server and the reports need no files beside the executable and nothing from the network.
function(alpha_embed_assets out_cpp)
  file(GLOB assets CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/alpha/dashboard/assets/*)
  add_custom_command(
    OUTPUT ${out_cpp}
    COMMAND ${CMAKE_COMMAND} -DOUT=${out_cpp} "-DASSETS=${assets}" -P ${PROJECT_SOURCE_DIR}/cmake/EmbedAssets.cmake
    DEPENDS ${assets} ${PROJECT_SOURCE_DIR}/cmake/EmbedAssets.cmake
    COMMENT "Embedding the dashboard's assets"
    VERBATIM)
endfunction()

# Compiles `source` against httplib.h with the package's flags (it is built with TLS, zlib and brotli
# support, which change its classes' layout), and marks it ALPHA_WITH_DASHBOARD. Per file, so that the
# rest of the target keeps its flags and is not rebuilt when the dashboard is switched on or off.
function(alpha_use_httplib source)
  set_source_files_properties(${source} PROPERTIES
    COMPILE_DEFINITIONS ALPHA_WITH_DASHBOARD=1 COMPILE_OPTIONS "${HTTPLIB_CFLAGS_OTHER}"
    SKIP_PRECOMPILE_HEADERS ON)  # its definitions differ from the target's precompiled header's
endfunction()
