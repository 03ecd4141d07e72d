# Resolves ALPHA_NCCL into ALPHA_WITH_NCCL: multi-GPU training over NCCL (src/alpha/distributed). It needs
# the CUDA backend. AUTO builds it where nccl.h and libnccl are found (the CUDA toolkit's folders, then the
# system's: Debian/NVIDIA's libnccl-dev); ON requires them; OFF never builds it. Without it, training on
# more than one rank fails with one line naming the missing library.
set(ALPHA_NCCL "AUTO" CACHE STRING "Build multi-GPU training over NCCL: AUTO, ON or OFF")
set_property(CACHE ALPHA_NCCL PROPERTY STRINGS AUTO ON OFF)
set(ALPHA_WITH_NCCL OFF)
if(NOT ALPHA_NCCL MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "ALPHA_NCCL must be AUTO, ON or OFF, got '${ALPHA_NCCL}'")
endif()
if(NOT ALPHA_NCCL STREQUAL "OFF")
  if(ALPHA_WITH_CUDA)
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ENV NCCL_HOME PATH_SUFFIXES include)
    find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} ENV NCCL_HOME PATH_SUFFIXES lib lib64)
  endif()
  if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
    set(ALPHA_WITH_NCCL ON)
    add_library(alpha_nccl INTERFACE IMPORTED)
    target_include_directories(alpha_nccl INTERFACE ${NCCL_INCLUDE_DIR})
    target_link_libraries(alpha_nccl INTERFACE ${NCCL_LIBRARY})
  elseif(ALPHA_NCCL STREQUAL "ON")
    message(FATAL_ERROR "ALPHA_NCCL=ON but NCCL was not found (needs the CUDA backend, nccl.h and libnccl: "
                        "install libnccl-dev or set NCCL_HOME), or use -DALPHA_NCCL=OFF")
  endif()
endif()
message(STATUS "Alpha NCCL (multi-GPU): ${ALPHA_WITH_NCCL} (ALPHA_NCCL=${ALPHA_NCCL})")
