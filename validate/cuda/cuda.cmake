# The cuda backend (validate/cuda/), included from validate/CMakeLists.txt
# when the CUDA toolkit was found. Placeholder until the backend lands.
target_sources(pipecast_validate PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/cuda_unavailable.cc)
