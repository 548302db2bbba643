# Installs the built ding into a scratch prefix and builds + runs a consumer project with
# find_package(ding). Run by ctest as install.find_package_consumer.
file(REMOVE_RECURSE ${DING_SCRATCH})
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  message("${out}")
endfunction()
run(${CMAKE_COMMAND} --install ${DING_BUILD_DIR} --prefix ${DING_SCRATCH}/prefix)
# The prefix path goes through the environment (':'-separated): a ';' list inside one -D argument
# would be split into separate arguments on its way through run()'s ARGN.
string(REPLACE ";" ":" prefixes "${DING_SCRATCH}/prefix;${DING_PREFIX_PATH}")
set(ENV{CMAKE_PREFIX_PATH} "${prefixes}")
# The compiler that built ding: a sanitizer build's library needs its own compiler's runtimes.
run(${CMAKE_COMMAND} -S ${DING_CONSUMER_SOURCE} -B ${DING_SCRATCH}/build -G ${DING_GENERATOR} -DCMAKE_BUILD_TYPE=Release
    -DCMAKE_CXX_COMPILER=${DING_CXX_COMPILER})
run(${CMAKE_COMMAND} --build ${DING_SCRATCH}/build)
run(${DING_SCRATCH}/build/consumer)
