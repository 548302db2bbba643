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
endfunction()
