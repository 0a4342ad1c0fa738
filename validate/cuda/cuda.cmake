# The cuda backend (validate/cuda/), included from validate/CMakeLists.txt
# when the CUDA toolkit was found: the busy-work kernel needs nvcc, the green
# contexts the driver API (CUDA 12.4+), reached through the runtime's
# entry-point lookup so nothing links libcuda.
#
# NCCL: only nccl.h is needed to build (found in the CUDA toolkit, or
# anywhere CMake looks); libnccl.so.2 is dlopen'ed at run time
# (validate/cuda/nccl_api.h), so the validator still starts where NCCL or a
# GPU is missing. Without nccl.h the build goes on: messages between
# distinct GPUs are then staged through host memory, and the report says so.
# The CUDA language and its architectures are enabled once, at the top level.
if(PIPECAST_HAVE_NVCC)
  # The kernel in its own library: nvcc takes C++17, the rest is C++20.
  add_library(pipecast_validate_kernels STATIC ${CMAKE_CURRENT_SOURCE_DIR}/cuda/spin_kernel.cu)
  set_target_properties(pipecast_validate_kernels PROPERTIES CUDA_STANDARD 17)
  # Static cudart: it opens the driver at run time, so a machine without one
  # still runs the cpu and mpi backends (and cuda says "no CUDA device").
  target_link_libraries(pipecast_validate_kernels PUBLIC CUDA::cudart_static)
  target_sources(pipecast_validate PRIVATE
    ${CMAKE_CURRENT_SOURCE_DIR}/cuda/cuda_backend.cc
    ${CMAKE_CURRENT_SOURCE_DIR}/cuda/device_state.cc
    ${CMAKE_CURRENT_SOURCE_DIR}/cuda/device_tensor_group.cc
    ${CMAKE_CURRENT_SOURCE_DIR}/cuda/device_transport.cc
    ${CMAKE_CURRENT_SOURCE_DIR}/cuda/nccl_api.cc)
  if(MPI_CXX_FOUND)
    target_sources(pipecast_validate PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/cuda/cuda_mpi.cc)
  else()
    target_sources(pipecast_validate PRIVATE
      ${CMAKE_CURRENT_SOURCE_DIR}/cuda/cuda_mpi_unavailable.cc)
  endif()
  target_link_libraries(pipecast_validate
    PRIVATE pipecast_validate_kernels CUDA::cudart_static ${CMAKE_DL_LIBS})

  find_path(PIPECAST_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  find_library(PIPECAST_NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${CUDAToolkit_LIBRARY_DIR})
  if(PIPECAST_NCCL_INCLUDE_DIR)
    message(STATUS "pipecast: validator cuda backend with NCCL (${PIPECAST_NCCL_INCLUDE_DIR}/"
                   "nccl.h; library opened at run time, found at build time: "
                   "${PIPECAST_NCCL_LIBRARY})")
    target_include_directories(pipecast_validate PRIVATE ${PIPECAST_NCCL_INCLUDE_DIR})
    set(_pipecast_nccl_h 1)
  else()
    message(STATUS "pipecast: no nccl.h found; the validator's cuda backend stages messages "
                   "between distinct GPUs through host memory")
    set(_pipecast_nccl_h 0)
  endif()
  if(NOT PIPECAST_NCCL_LIBRARY)
    set(PIPECAST_NCCL_LIBRARY "")
  endif()
  target_compile_definitions(pipecast_validate PRIVATE
    PIPECAST_HAVE_NCCL_H=${_pipecast_nccl_h}
    PIPECAST_NCCL_BUILD_PATH="${PIPECAST_NCCL_LIBRARY}")

  # Needs a GPU: each test skips itself (GTEST_SKIP) when there is none.
  if(PIPECAST_BUILD_TESTS)
    pipecast_add_test(validate_gpu_test
      SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/cuda/cuda_gpu_test.cc
      LIBS pipecast_validate GTest::gmock
      LABEL gpu)
  endif()
else()
  message(STATUS "pipecast: no nvcc found; the validator's cuda backend is not built")
  target_sources(pipecast_validate PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/cuda_unavailable.cc)
endif()
