# The "cuda" backend: backends/gpu's kernels and device compiled by nvcc for
# CMAKE_CUDA_ARCHITECTURES, and backends/cuda's registration. Links the CUDA runtime only:
# cuBLAS is ding-bench's comparison path, linked there (tools/bench).
file(GLOB DING_CUDA_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/backends/gpu/*.cu ${PROJECT_SOURCE_DIR}/backends/gpu/*.cpp
     ${PROJECT_SOURCE_DIR}/backends/cuda/*.cpp)
add_library(ding_gpu_cuda OBJECT ${DING_CUDA_SOURCES})
ding_gpu_objects(ding_gpu_cuda)
target_include_directories(ding_gpu_cuda PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
target_sources(ding PRIVATE $<TARGET_OBJECTS:ding_gpu_cuda>)
target_compile_definitions(ding PUBLIC DING_HAVE_CUDA)
target_link_libraries(ding PRIVATE CUDA::cudart)

# The Hopper matmul cores (backends/gpu/sm90/, outside the glob above: wgmma with cp.async, and
# the persistent TMA core) are sm_90a code: architecture-specific features that no other GPU runs,
# so they get an object library of their own compiled for 90a alone, whenever the build targets
# sm_90 (CUDA_ARCHITECTURES is per target in CMake 3.25). matmul.cu sees DING_GPU_WGMMA and
# checks for a cc 9.0 device before it launches from them. A PTX-only build compiles them too.
set(DING_GPU_WGMMA ${DING_CUDA_PTX_ONLY})
foreach(arch IN LISTS CMAKE_CUDA_ARCHITECTURES)
  if(arch MATCHES "^90")
    set(DING_GPU_WGMMA ON)
  endif()
endforeach()
if(DING_GPU_WGMMA)
  file(GLOB DING_GPU_SM90A_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/backends/gpu/sm90/*.cu)
  if(DING_CUDA_TMA)
    target_compile_definitions(ding_gpu_cuda PRIVATE DING_GPU_TMA)
  else()
    list(FILTER DING_GPU_SM90A_SOURCES EXCLUDE REGEX "/gemm_tma[^/]*\\.cu$")
  endif()
  add_library(ding_gpu_sm90a OBJECT ${DING_GPU_SM90A_SOURCES})
  if(DING_CUDA_PTX_ONLY)
    set_target_properties(ding_gpu_sm90a PROPERTIES CUDA_ARCHITECTURES 90a-virtual)
  else()
    set_target_properties(ding_gpu_sm90a PROPERTIES CUDA_ARCHITECTURES 90a)
  endif()
  ding_gpu_objects(ding_gpu_sm90a)
  target_include_directories(ding_gpu_sm90a PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
  target_sources(ding PRIVATE $<TARGET_OBJECTS:ding_gpu_sm90a>)
  target_compile_definitions(ding_gpu_cuda PRIVATE DING_GPU_WGMMA)
endif()
