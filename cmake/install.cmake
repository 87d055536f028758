# cmake/install.cmake: the installable weir, included from the top-level
# CMakeLists.txt after every module.
#
# `cmake --install BUILD [--prefix P]` puts in place:
#   P/include/weir/*.h           the public API, nothing else
#   P/lib/libweir.a, libweir.so  every module in one library (static, shared)
#   P/bin/weir                   the command, which loads job modules
#   P/lib/pkgconfig/weir.pc      `pkg-config --cflags weir` for a job module,
#                                `--libs weir` for a program that runs jobs
#   P/lib/cmake/weir/            find_package(weir): weir::weir (the shared
#                                library), weir::weir_static, and the
#                                header-only weir::job for job modules, which
#                                never link a copy of the library: the weir
#                                binary that loads them provides it (on macOS
#                                with -undefined dynamic_lookup).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# The modules whose objects make up the library, bottom first.
set(WEIR_MODULES weir_base weir_snapshot weir_engine weir_operators weir_sinks)
if(TARGET weir_connectors)
  list(APPEND WEIR_MODULES weir_connectors)
endif()
# The pkg-config modules the library uses: libcurl, libnats and libpq only
# where a module was built with them (WEIR_HAVE_*). Found again here under
# names of their own, which the CMake package recreates for weir_static.
set(weir_defs "")
foreach(m ${WEIR_MODULES})
  get_target_property(d ${m} COMPILE_DEFINITIONS)
  if(d)
    list(APPEND weir_defs ${d})
  endif()
endforeach()
set(WEIR_PC_REQUIRES "")
set(WEIR_DEP_PAIRS "")
set(WEIR_DEP_TARGETS "")
foreach(pair LIBUV:libuv LMDB:lmdb PROTOBUF_C:libprotobuf-c CURL:libcurl NATS:libnats PQ:libpq)
  string(REPLACE ":" ";" dep "${pair}")
  list(GET dep 0 var)
  list(GET dep 1 pc)
  if(var MATCHES "^(CURL|NATS|PQ)$" AND NOT "WEIR_HAVE_${var}=1" IN_LIST weir_defs)
    continue()
  endif()
  pkg_check_modules(WEIR_DEP_${var} REQUIRED QUIET IMPORTED_TARGET ${pc})
  list(APPEND WEIR_PC_REQUIRES ${pc})
  list(APPEND WEIR_DEP_PAIRS ${pair})
  list(APPEND WEIR_DEP_TARGETS PkgConfig::WEIR_DEP_${var})
endforeach()

set(weir_objects "")
foreach(m ${WEIR_MODULES})
  list(APPEND weir_objects $<TARGET_OBJECTS:${m}>)
endforeach()
# The modules' own compile definitions (WEIR_HAVE_CURL, ...) are in their
# objects already; the library targets only link.
add_library(weir_static STATIC ${weir_objects})
add_library(weir_shared SHARED ${weir_objects})
foreach(t weir_static weir_shared)
  add_dependencies(${t} ${WEIR_MODULES})
  set_target_properties(${t} PROPERTIES OUTPUT_NAME weir LINKER_LANGUAGE C)
endforeach()
set_target_properties(weir_shared PROPERTIES VERSION ${PROJECT_VERSION}
  SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR} EXPORT_NAME weir)
set_target_properties(weir_static PROPERTIES EXPORT_NAME weir_static)
target_link_libraries(weir_shared PUBLIC weir_headers
  PRIVATE ${WEIR_DEP_TARGETS} Threads::Threads m)
target_link_libraries(weir_static PUBLIC weir_headers
  PRIVATE ${WEIR_DEP_TARGETS} Threads::Threads m)

# weir::job: the public headers for a job module (a .so that `weir run`
# loads), which resolves weir_* from the binary that loads it.
add_library(weir_job INTERFACE)
target_link_libraries(weir_job INTERFACE weir_headers)
if(APPLE)
  target_link_options(weir_job INTERFACE -undefined dynamic_lookup)
endif()
set_target_properties(weir_headers PROPERTIES EXPORT_NAME headers)
set_target_properties(weir_job PROPERTIES EXPORT_NAME job)

install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/weir DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS weir RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS weir_shared weir_static weir_headers weir_job EXPORT weirTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT weirTargets NAMESPACE weir:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/weir)

string(REPLACE ";" " " WEIR_PC_REQUIRES_STR "${WEIR_PC_REQUIRES}")
# weir.pc finds its prefix from where it lies, so that it holds wherever
# `cmake --install --prefix` put it.
file(RELATIVE_PATH WEIR_PC_TO_PREFIX /p/${CMAKE_INSTALL_LIBDIR}/pkgconfig /p)
configure_file(${CMAKE_CURRENT_LIST_DIR}/weir.pc.in ${PROJECT_BINARY_DIR}/weir.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/weir.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/weirConfig.cmake.in
  ${PROJECT_BINARY_DIR}/weirConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/weir)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/weirConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/weirConfig.cmake ${PROJECT_BINARY_DIR}/weirConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/weir)
