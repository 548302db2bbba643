# FindPCRE2: the 8-bit PCRE2 library as the imported target PCRE2::pcre2-8.
# Searched by header and library name (CMAKE_PREFIX_PATH applies), so it needs no pkg-config and
# works with packages unpacked into a folder (the GPU machine's carried .deps/usr).
find_path(PCRE2_INCLUDE_DIR pcre2.h)
find_library(PCRE2_LIBRARY NAMES pcre2-8)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(PCRE2 REQUIRED_VARS PCRE2_LIBRARY PCRE2_INCLUDE_DIR)
if(PCRE2_FOUND AND NOT TARGET PCRE2::pcre2-8)
  add_library(PCRE2::pcre2-8 UNKNOWN IMPORTED)
  set_target_properties(PCRE2::pcre2-8 PROPERTIES IMPORTED_LOCATION "${PCRE2_LIBRARY}"
                        INTERFACE_INCLUDE_DIRECTORIES "${PCRE2_INCLUDE_DIR}")
endif()
mark_as_advanced(PCRE2_INCLUDE_DIR PCRE2_LIBRARY)
