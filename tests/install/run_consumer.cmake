# Builds and runs tests/install/consumer, a project outside the ding tree that links ding::cpu,
# in one of two ways (DING_CONSUMER_MODE):
#   find_package      install the built ding into a scratch prefix, compile every installed header
#                     on its own, and build the consumer against the prefix;
#   add_subdirectory  configure the consumer with ding's source tree as a subproject and compile
#                     the consumer's own unit against it. What this mode tests is the CMake wiring
#                     (targets, include paths, link line); linking would compile ding's CPU code a
#                     second time (~10 minutes of a 2-core CI machine) to test the compiler again.
#                     Under a generator other than Ninja, which cannot name one object file, the
#                     consumer is built and run.
# The consumer's link command may name no CUDA or Kokkos library; where it is linked, it must run
# and ldd may name none either.
# Run by ctest as install.find_package_consumer and install.add_subdirectory_consumer.
file(REMOVE_RECURSE ${DING_SCRATCH})
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  set(run_output "${out}" PARENT_SCOPE)
endfunction()

set(configure_args -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=${DING_CXX_COMPILER})
if(DING_CONSUMER_MODE STREQUAL "find_package")
  run(${CMAKE_COMMAND} --install ${DING_BUILD_DIR} --prefix ${DING_SCRATCH}/prefix)
  # Each installed header, included alone first in a unit of its own, would be one unit per
  # header; one unit including them all still fails on any header that needs one not installed.
  file(GLOB_RECURSE headers RELATIVE ${DING_SCRATCH}/prefix/include ${DING_SCRATCH}/prefix/include/*.h)
  if(NOT headers)
    message(FATAL_ERROR "no headers installed under ${DING_SCRATCH}/prefix/include")
  endif()
  set(includes "")
  foreach(header IN LISTS headers)
    string(APPEND includes "#include <${header}>\n")
  endforeach()
  file(WRITE ${DING_SCRATCH}/all_headers.cpp "${includes}")
  list(APPEND configure_args -DDING_HEADER_CHECK=${DING_SCRATCH}/all_headers.cpp)
  # The prefix path goes through the environment (':'-separated): a ';' list inside one -D
  # argument would be split into separate arguments on its way through run()'s ARGN.
  string(REPLACE ";" ":" prefixes "${DING_SCRATCH}/prefix;${DING_PREFIX_PATH}")
  set(ENV{CMAKE_PREFIX_PATH} "${prefixes}")
  set(targets consumer consumer_headers)
  set(linked TRUE)
elseif(DING_CONSUMER_MODE STREQUAL "add_subdirectory")
  # No build type, so no optimisation where ding's code is compiled (other generators).
  list(APPEND configure_args -DDING_SOURCE_DIR=${DING_SOURCE_DIR} -DCMAKE_BUILD_TYPE=)
  string(REPLACE ";" ":" prefixes "${DING_PREFIX_PATH}")
  set(ENV{CMAKE_PREFIX_PATH} "${prefixes}")
  if(DING_GENERATOR MATCHES "Ninja")
    set(targets CMakeFiles/consumer.dir/main.cpp.o)
    set(linked FALSE)
  else()
    set(targets consumer)
    set(linked TRUE)
  endif()
else()
  message(FATAL_ERROR "DING_CONSUMER_MODE must be find_package or add_subdirectory, not '${DING_CONSUMER_MODE}'")
endif()

# The compiler that built ding: a sanitizer build's library needs its own compiler's runtimes.
run(${CMAKE_COMMAND} -S ${DING_CONSUMER_SOURCE} -B ${DING_SCRATCH}/build -G ${DING_GENERATOR} ${configure_args})
run(${CMAKE_COMMAND} --build ${DING_SCRATCH}/build --parallel 2 --target ${targets})
if(linked)
  run(${DING_SCRATCH}/build/consumer)
  message("${run_output}")
endif()

# No CUDA library on the consumer's link line (a static libding would carry them there) nor
# among the shared libraries it loads (a shared one would); no Kokkos either (ding::ding's alone).
set(forbidden_libraries "cudart|cublas|libcuda\\.|/cuda/|CUDA::|kokkoscore|Kokkos::")
if(DING_GENERATOR MATCHES "Ninja")
  run(${DING_MAKE_PROGRAM} -C ${DING_SCRATCH}/build -t commands consumer)
  string(REGEX MATCH "[^\n]*-o consumer [^\n]*" link_line "${run_output}")
  if(NOT link_line)
    message(FATAL_ERROR "the consumer's link command was not found in:\n${run_output}")
  endif()
  if(link_line MATCHES "${forbidden_libraries}")
    message(FATAL_ERROR "the cpu-only consumer links a CUDA or Kokkos library (${CMAKE_MATCH_0}):\n${link_line}")
  endif()
endif()
if(linked)
  run(ldd ${DING_SCRATCH}/build/consumer)
  if(run_output MATCHES "${forbidden_libraries}")
    message(FATAL_ERROR "the cpu-only consumer loads a CUDA or Kokkos library (${CMAKE_MATCH_0}):\n${run_output}")
  endif()
endif()
message("consumer (${DING_CONSUMER_MODE}): no CUDA or Kokkos library linked")
