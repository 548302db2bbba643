# Compiles every backends/gpu/*.cu as HIP for gfx90a (MI200) with hipcc, so the kernels stay
# single-source while the HIP host glue does not exist yet. Part of `all`: a HIP-only compile
# error fails the build like any other.
find_program(DING_HIPCC hipcc REQUIRED)
set(DING_HIP_ARCH gfx90a CACHE STRING "AMD architecture for the HIP compile check")
file(GLOB DING_HIP_CHECK_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/backends/gpu/*.cu)
set(DING_HIP_CHECK_OBJECTS "")
foreach(source ${DING_HIP_CHECK_SOURCES})
  get_filename_component(stem ${source} NAME_WE)
  set(object ${PROJECT_BINARY_DIR}/hip_check/${stem}.o)
  add_custom_command(OUTPUT ${object}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${PROJECT_BINARY_DIR}/hip_check
    # ROCm 5.2's clang 15 with its HIP headers: C++17; the ding headers the kernels include stay C++17.
    COMMAND ${DING_HIPCC} -std=c++17 --offload-arch=${DING_HIP_ARCH} -x hip -O2 -Wall
            -I${PROJECT_SOURCE_DIR}/runtime/include -I${DING_GENERATED_INCLUDE} -MD -MF ${object}.d -c ${source} -o ${object}
    DEPENDS ${source}
    DEPFILE ${object}.d
    COMMENT "HIP compile check (${DING_HIP_ARCH}): backends/gpu/${stem}.cu"
    VERBATIM)
  list(APPEND DING_HIP_CHECK_OBJECTS ${object})
endforeach()
add_custom_target(ding_hip_compile_check ALL DEPENDS ${DING_HIP_CHECK_OBJECTS})
