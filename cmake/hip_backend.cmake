# The "hip" backend: backends/gpu's kernels and device compiled for the HIP API, and
# backends/hip's registration. DING_HIP_PLATFORM chooses the compiler:
#   amd     hipcc for each of DING_HIP_ARCHITECTURES (Debian's hipcc, ROCm 5.2: gfx908, gfx90a,
#           gfx940, gfx1030); the host sources by the C++ compiler against HIP's AMD headers.
#   nvidia  nvcc for CMAKE_CUDA_ARCHITECTURES through HIP's NVIDIA headers, copied from the
#           installed libamdhip64-dev into the build tree and made to compile against CUDA 12/13 by
#           cmake/hip_nvidia_headers.cmake: the HIP build, run on an NVIDIA GPU.
# Either way only the portable kernel paths and, on NVIDIA hardware, mma.sync are compiled: the
# sm_90a cores (wgmma, TMA) stay the cuda backend's.
find_path(DING_HIP_INCLUDE hip/hip_runtime.h PATHS /opt/rocm/include DOC "HIP headers (apt-get install libamdhip64-dev)")
if(NOT DING_HIP_INCLUDE)
  message(FATAL_ERROR "DING_HIP: hip/hip_runtime.h not found (apt-get install libamdhip64-dev, or set DING_HIP_INCLUDE)")
endif()
file(GLOB DING_HIP_KERNELS CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/backends/gpu/*.cu)
file(GLOB DING_HIP_HOST CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/backends/gpu/*.cpp ${PROJECT_SOURCE_DIR}/backends/hip/*.cpp)

if(DING_HIP_PLATFORM STREQUAL "nvidia")
  set(patched ${PROJECT_BINARY_DIR}/hip-nvidia/include)
  execute_process(COMMAND ${CMAKE_COMMAND} -DSOURCE=${DING_HIP_INCLUDE}/hip -DDEST=${patched}/hip
                          -P ${PROJECT_SOURCE_DIR}/cmake/hip_nvidia_headers.cmake
                  RESULT_VARIABLE failed)
  if(failed)
    message(FATAL_ERROR "DING_HIP_PLATFORM=nvidia: cmake/hip_nvidia_headers.cmake could not patch ${DING_HIP_INCLUDE}/hip")
  endif()
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/cmake/hip_nvidia_headers.cmake)
  # The host sources too: HIP's NVIDIA headers declare part of the API (graphs, launches) for
  # nvcc alone.
  set_source_files_properties(${DING_HIP_HOST} PROPERTIES LANGUAGE CUDA)
  add_library(ding_gpu_hip OBJECT ${DING_HIP_KERNELS} ${DING_HIP_HOST})
  ding_gpu_objects(ding_gpu_hip)
  target_compile_definitions(ding_gpu_hip PRIVATE __HIP_PLATFORM_NVIDIA__)
  # Ahead of every other include folder, so the patched copy wins over the installed one.
  target_include_directories(ding_gpu_hip SYSTEM BEFORE PRIVATE ${patched})
  target_include_directories(ding_gpu_hip PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
  target_sources(ding PRIVATE $<TARGET_OBJECTS:ding_gpu_hip>)
  target_link_libraries(ding PRIVATE CUDA::cudart)
elseif(DING_HIP_PLATFORM STREQUAL "amd")
  find_program(DING_HIPCC hipcc PATHS /opt/rocm/bin REQUIRED)
  find_library(DING_AMDHIP64 amdhip64 PATHS /opt/rocm/lib REQUIRED)
  set(DING_HIP_ARCHITECTURES gfx90a gfx1030 CACHE STRING "AMD GPU architectures the hip backend is compiled for")
  # The host sources: the C++ compiler, HIP's headers for the AMD platform.
  add_library(ding_gpu_hip OBJECT ${DING_HIP_HOST})
  ding_gpu_objects(ding_gpu_hip)
  target_compile_definitions(ding_gpu_hip PRIVATE __HIP_PLATFORM_AMD__)
  target_include_directories(ding_gpu_hip SYSTEM PRIVATE ${DING_HIP_INCLUDE})
  target_sources(ding PRIVATE $<TARGET_OBJECTS:ding_gpu_hip>)
  # The kernels: hipcc (clang) per file, for every architecture at once. Its default is C++11.
  # -Wno-pass-failed: clang reports each `#pragma unroll` loop it leaves rolled (bounds that depend
  # on the wavefront size); the code is right either way, and the notes drown real warnings.
  # A compile check (DING_HIP_CHECK_ONLY) at -O0: its errors (parsing, templates, static_asserts,
  # instruction selection for each architecture) come without the optimiser, four fifths of the time
  # (backends/gpu/gemv_f32.cu for gfx90a and gfx1030: 72 s at -O3, 57 s at -O1, 14 s at -O0).
  set(optimize -O3)
  if(DING_HIP_CHECK_ONLY)
    set(optimize -O0)
  endif()
  set(arch_flags "")
  foreach(arch IN LISTS DING_HIP_ARCHITECTURES)
    list(APPEND arch_flags --offload-arch=${arch})
  endforeach()
  foreach(source ${DING_HIP_KERNELS})
    get_filename_component(stem ${source} NAME_WE)
    set(object ${PROJECT_BINARY_DIR}/hip/${stem}.o)
    add_custom_command(OUTPUT ${object}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${PROJECT_BINARY_DIR}/hip
      COMMAND ${DING_HIPCC} -std=c++17 ${arch_flags} -x hip ${optimize} -DNDEBUG -fPIC -Wall -Wno-pass-failed -I${PROJECT_SOURCE_DIR}/runtime/include
              -I${DING_GENERATED_INCLUDE} -MD -MF ${object}.d -c ${source} -o ${object}
      DEPENDS ${source}
      DEPFILE ${object}.d
      COMMENT "hipcc (${DING_HIP_ARCHITECTURES}): backends/gpu/${stem}.cu"
      VERBATIM)
    target_sources(ding PRIVATE ${object})
  endforeach()
  target_link_libraries(ding PRIVATE ${DING_AMDHIP64})
else()
  message(FATAL_ERROR "DING_HIP_PLATFORM is '${DING_HIP_PLATFORM}': amd or nvidia")
endif()
target_compile_definitions(ding PUBLIC DING_HAVE_HIP)
