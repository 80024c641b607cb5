# `cmake --install`: the libraries, the public headers, a CMake package and pkg-config files.
# find_package(replicator) gives replicator::replicator, the core shared library; the components
# extras and envs add replicator::extras and replicator::envs (libreplicator-extras.so,
# libreplicator-envs.so); the component static adds the archives (replicator::replicator_static,
# and with extras or envs replicator::extras_static, replicator::envs_static). pkg-config:
# replicator, replicator-extras, replicator-envs, and each with -static for the archives.
# docs/building.md shows how a program uses each.
include(CMakePackageConfigHelpers)

set(RP_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/replicator)
install(DIRECTORY ${CMAKE_SOURCE_DIR}/include/replicator DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.h")
install(TARGETS replicator_static replicator_extras_static replicator_envs_static
  EXPORT replicatorStaticTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(EXPORT replicatorStaticTargets NAMESPACE replicator:: DESTINATION ${RP_CMAKE_DIR})
if(RP_BUILD_SHARED)
  install(TARGETS replicator_shared replicator_extras_shared replicator_envs_shared
    EXPORT replicatorTargets LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  install(EXPORT replicatorTargets NAMESPACE replicator:: DESTINATION ${RP_CMAKE_DIR})
endif()

if(MPI_C_FOUND)
  set(RP_CONFIG_MPI TRUE)
else()
  set(RP_CONFIG_MPI FALSE)
endif()
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/replicatorConfig.cmake.in
  ${CMAKE_BINARY_DIR}/replicatorConfig.cmake INSTALL_DESTINATION ${RP_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/replicatorConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/replicatorConfig.cmake ${CMAKE_BINARY_DIR}/replicatorConfigVersion.cmake
  DESTINATION ${RP_CMAKE_DIR})

# The libraries behind RP_LINK_DEPS as linker flags, for the pkg-config files: -l<name>, with
# -L<dir> where the directory is not one the linker searches anyway.
function(rp_link_flags out)
  set(flags "")
  set(dirs "")
  foreach(lib ${ARGN})
    if(IS_ABSOLUTE "${lib}")
      get_filename_component(dir "${lib}" DIRECTORY)
      get_filename_component(name "${lib}" NAME_WE)
      string(REGEX REPLACE "^lib" "" name "${name}")
      if(NOT dir IN_LIST CMAKE_C_IMPLICIT_LINK_DIRECTORIES AND NOT dir IN_LIST dirs)
        list(APPEND dirs "${dir}")
        list(APPEND flags "-L${dir}")
      endif()
      list(APPEND flags "-l${name}")
    elseif(lib MATCHES "^-")
      list(APPEND flags "${lib}")
    else()
      list(APPEND flags "-l${lib}")
    endif()
  endforeach()
  list(REMOVE_DUPLICATES flags)
  string(JOIN " " flags ${flags})
  set(${out} "${flags}" PARENT_SCOPE)
endfunction()

set(rp_dep_libs ${DNNL_LIB} ${CJSON_LIB} ${TURBOJPEG_LIB} ${PROTOBUF_C_LIB} ${PNG_LIBRARIES} ${ZLIB_LIBRARIES} ${CMAKE_DL_LIBS})
foreach(name ${OpenMP_C_LIB_NAMES})
  list(APPEND rp_dep_libs ${OpenMP_${name}_LIBRARY})
endforeach()
if(MPI_C_FOUND)
  list(APPEND rp_dep_libs ${MPI_C_LIBRARIES})
endif()
list(APPEND rp_dep_libs ${RP_CUDA_LINK_DEPS} -pthread m)
rp_link_flags(RP_PC_LIBS_PRIVATE ${rp_dep_libs})

# Relative to the prefix, so an installed tree can be moved (pkg-config's ${pcfiledir}).
file(RELATIVE_PATH RP_PC_PREFIX_FROM_PCDIR ${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig ${CMAKE_INSTALL_PREFIX})
string(REGEX REPLACE "/$" "" RP_PC_PREFIX_FROM_PCDIR "${RP_PC_PREFIX_FROM_PCDIR}")
configure_file(${CMAKE_CURRENT_LIST_DIR}/replicator.pc.in ${CMAKE_BINARY_DIR}/replicator.pc @ONLY)
configure_file(${CMAKE_CURRENT_LIST_DIR}/replicator-static.pc.in ${CMAKE_BINARY_DIR}/replicator-static.pc @ONLY)
set(rp_pc_files ${CMAKE_BINARY_DIR}/replicator.pc ${CMAKE_BINARY_DIR}/replicator-static.pc)

# The optional libraries' files, from one pair of templates: Requires names the core's.
rp_link_flags(RP_PC_EXTRAS_LIBS ${CAIRO_LIB} ${GIF_LIBRARIES} ${PROTOBUF_C_LIB} m)
rp_link_flags(RP_PC_ENVS_LIBS ${MUJOCO_LIB} ${EGL_LIB} -pthread m)
foreach(part extras envs)
  set(RP_PC_PART ${part})
  if(part STREQUAL "extras")
    set(RP_PC_DESCRIPTION "replicator's optional outputs: line charts (cairo), animated GIFs (giflib) and TensorBoard event files")
    set(RP_PC_PART_LIBS "${RP_PC_EXTRAS_LIBS}")
  else()
    set(RP_PC_DESCRIPTION "replicator's MuJoCo control tasks and their headless rendering (EGL)")
    set(RP_PC_PART_LIBS "${RP_PC_ENVS_LIBS}")
  endif()
  configure_file(${CMAKE_CURRENT_LIST_DIR}/replicator-part.pc.in
    ${CMAKE_BINARY_DIR}/replicator-${part}.pc @ONLY)
  configure_file(${CMAKE_CURRENT_LIST_DIR}/replicator-part-static.pc.in
    ${CMAKE_BINARY_DIR}/replicator-${part}-static.pc @ONLY)
  list(APPEND rp_pc_files ${CMAKE_BINARY_DIR}/replicator-${part}.pc
    ${CMAKE_BINARY_DIR}/replicator-${part}-static.pc)
endforeach()
install(FILES ${rp_pc_files} DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
