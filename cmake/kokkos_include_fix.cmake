# Debian's Trilinos packaging of Kokkos (libtrilinos-kokkos-dev) gives the imported Kokkos::kokkos
# target the include directory <prefix>/include, which does not exist (/usr/lib/include), while
# the headers are in /usr/include/trilinos, as Kokkos_INCLUDE_DIRS says. CMake refuses a target
# with a missing include directory, so the target is corrected in the including project's scope
# (the system's files stay as they are). A Kokkos whose target is right is left alone. Included
# by ding's build after find_package(Kokkos) and by the installed dingConfig.cmake.
if(TARGET Kokkos::kokkos)
  get_target_property(_ding_kokkos_includes Kokkos::kokkos INTERFACE_INCLUDE_DIRECTORIES)
  set(_ding_kokkos_fixed_includes "")
  set(_ding_kokkos_header_found OFF)
  foreach(_dir IN LISTS _ding_kokkos_includes)
    if(EXISTS "${_dir}")
      list(APPEND _ding_kokkos_fixed_includes "${_dir}")
      if(EXISTS "${_dir}/Kokkos_Core.hpp")
        set(_ding_kokkos_header_found ON)
      endif()
    endif()
  endforeach()
  if(NOT _ding_kokkos_header_found)
    find_path(DING_KOKKOS_INCLUDE_DIR Kokkos_Core.hpp HINTS ${Kokkos_INCLUDE_DIRS} PATH_SUFFIXES trilinos)
    if(NOT DING_KOKKOS_INCLUDE_DIR)
      message(FATAL_ERROR "Kokkos::kokkos names no directory with Kokkos_Core.hpp (it names '${_ding_kokkos_includes}', "
                          "Kokkos_INCLUDE_DIRS is '${Kokkos_INCLUDE_DIRS}')")
    endif()
    list(APPEND _ding_kokkos_fixed_includes "${DING_KOKKOS_INCLUDE_DIR}")
    set_property(TARGET Kokkos::kokkos PROPERTY INTERFACE_INCLUDE_DIRECTORIES "${_ding_kokkos_fixed_includes}")
  endif()
endif()
