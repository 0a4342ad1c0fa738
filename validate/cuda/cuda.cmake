# The cuda backend (validate/cuda/), included from validate/CMakeLists.txt
# when the CUDA toolkit was found: the busy-work kernel needs nvcc, the green
# contexts the driver API (CUDA 12.4+), reached through the runtime's
# entry-point lookup so nothing links libcuda.
include(CheckLanguage)
check_language(CUDA)
if(CMAKE_CUDA_COMPILER)
  enable_language(CUDA)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 80 90)
  endif()
  # The kernel in its own library: nvcc takes C++17, the rest is C++20.
  add_library(pipecast_validate_kernels STATIC ${CMAKE_CURRENT_SOURCE_DIR}/cuda/spin_kernel.cu)
  set_target_properties(pipecast_validate_kernels PROPERTIES CUDA_STANDARD 17)
  # Static cudart: it opens the driver at run time, so a machine without one
  # still runs the cpu and mpi backends (and cuda says "no CUDA device").
  target_link_libraries(pipecast_validate_kernels PUBLIC CUDA::cudart_static)
  target_sources(pipecast_validate PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/cuda/cuda_backend.cc)
  target_link_libraries(pipecast_validate
    PRIVATE pipecast_validate_kernels CUDA::cudart_static)
else()
  message(STATUS "pipecast: no nvcc found; the validator's cuda backend is not built")
  target_sources(pipecast_validate PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/cuda_unavailable.cc)
endif()
