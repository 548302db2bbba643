# ding_gpu_objects(TARGET): what every object library of GPU code needs, whichever API it is
# compiled for: ding's headers, fmt, and ding's warnings on host code. Host sources are C++20 like
# the rest of ding; the kernels and the headers they include stay C++17 for the GPU compilers.
function(ding_gpu_objects target)
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR}/runtime/include ${DING_GENERATED_INCLUDE})
  target_link_libraries(${target} PRIVATE fmt::fmt)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:${DING_CPU_FLAGS} -Wall -Wextra -Wno-missing-field-initializers>
    # -lineinfo keeps compute-sanitizer and ncu reports at source lines; relaxed constexpr lets
    # device code call constexpr host helpers (dtype sizes).
    $<$<COMPILE_LANGUAGE:CUDA>:-lineinfo --expt-relaxed-constexpr -Xcompiler=-Wall>)
  # A PTX-only build is a compile check (DING_CUDA_PTX_ONLY): NVVM's optimiser at -O1 instead of
  # -O3 halves the time of a unit (its NVVM pass was three quarters of it), and every error the
  # check is for (parsing, templates, static_asserts) comes before optimisation.
  if(DING_CUDA_PTX_ONLY)
    target_compile_options(${target} PRIVATE "$<$<COMPILE_LANGUAGE:CUDA>:SHELL:-Xcicc -O1>")
  endif()
endfunction()
