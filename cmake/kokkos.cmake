# The Kokkos backend (backends/kokkos/): its sources compile against the user's Kokkos into an
# object library that only `ding` links, so ding::cpu stays free of Kokkos.
#
# Any Kokkos 3.4+ works: Debian's libtrilinos-kokkos-dev (3.4.1, Serial only) or a user's own
# (-DKokkos_ROOT=...), built for OpenMP, CUDA or HIP (a HIP Kokkos wants CMAKE_CXX_COMPILER=hipcc).
find_package(Kokkos REQUIRED)
if(NOT TARGET Kokkos::kokkos)
  message(FATAL_ERROR "DING_KOKKOS: find_package(Kokkos) defined no Kokkos::kokkos target (Kokkos ${Kokkos_VERSION} "
                      "from ${Kokkos_DIR})")
endif()
message(STATUS "Kokkos ${Kokkos_VERSION} from ${Kokkos_DIR}, devices: ${Kokkos_DEVICES}")
include(${CMAKE_CURRENT_LIST_DIR}/kokkos_include_fix.cmake)

file(GLOB DING_KOKKOS_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/backends/kokkos/*.cpp)
add_library(ding_kokkos OBJECT ${DING_KOKKOS_SOURCES})
# A CUDA Kokkos compiles its users' sources with nvcc_wrapper: kokkos_compilation routes these
# sources (only) through it when CMAKE_CXX_COMPILER is the host compiler.
if(Kokkos_ENABLE_CUDA AND COMMAND kokkos_compilation)
  kokkos_compilation(SOURCE ${DING_KOKKOS_SOURCES})
endif()
# C++17: what every Kokkos and its device compilers (nvcc, hipcc) take.
set_target_properties(ding_kokkos PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON CXX_EXTENSIONS OFF)
target_include_directories(ding_kokkos PRIVATE ${PROJECT_SOURCE_DIR}/runtime/include ${DING_GENERATED_INCLUDE})
target_link_libraries(ding_kokkos PRIVATE Kokkos::kokkos fmt::fmt)
target_compile_options(ding_kokkos PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-missing-field-initializers>)
# A Kokkos on the host (Serial, OpenMP, Threads) runs these kernels on the CPU that the cpu backend
# is built for, so they get its instruction set (DING_CPU_FLAGS: AVX2, FMA, F16C by default) to
# vectorise with; a device Kokkos compiles them through its own compiler and flags.
if(NOT Kokkos_ENABLE_CUDA AND NOT Kokkos_ENABLE_HIP AND NOT Kokkos_ENABLE_SYCL)
  target_compile_options(ding_kokkos PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${DING_CPU_FLAGS}>)
endif()

target_sources(ding PRIVATE $<TARGET_OBJECTS:ding_kokkos>)
target_link_libraries(ding PRIVATE Kokkos::kokkos)
target_compile_definitions(ding PUBLIC DING_HAVE_KOKKOS)
