# `cmake --install build --prefix P`: the public headers, libqkv.a and libqkv.so, the CMake
# package (find_package(qkv CONFIG): qkv::qkv shared, qkv::qkv_static), qkv.pc and the CLI.
# Nothing of tests/, bench/ or python/ (the Python package installs itself with pip).
include(CMakePackageConfigHelpers)

set(QKV_CMAKE_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/qkv)

install(TARGETS qkv qkv_shared EXPORT qkvTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS qkv_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# Everything under include/qkv is public (library-only headers live under src/); version.h
# is generated (version.h.in).
install(DIRECTORY include/qkv DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")
install(FILES ${QKV_GENERATED_INCLUDE_DIR}/qkv/version.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/qkv)

install(EXPORT qkvTargets NAMESPACE qkv:: DESTINATION ${QKV_CMAKE_INSTALL_DIR})
# qkvConfig.cmake looks for oneDNN first where this build found it.
get_filename_component(QKV_DNNL_LIBRARY_DIR ${QKV_DNNL_LIBRARY} DIRECTORY)
configure_package_config_file(cmake/qkvConfig.cmake.in ${PROJECT_BINARY_DIR}/qkvConfig.cmake
                              INSTALL_DESTINATION ${QKV_CMAKE_INSTALL_DIR})
# 0.x: a minor release may break the API, so only the same major.minor (and a patch at
# least as new) satisfies find_package(qkv 0.1).
write_basic_package_version_file(${PROJECT_BINARY_DIR}/qkvConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/qkvConfig.cmake ${PROJECT_BINARY_DIR}/qkvConfigVersion.cmake
        DESTINATION ${QKV_CMAKE_INSTALL_DIR})

# qkv.pc. Relocatable: prefix is found from the .pc file's own place (pkg-config's
# ${pcfiledir}), since `cmake --install --prefix P` may differ from CMAKE_INSTALL_PREFIX.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(QKV_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH QKV_PC_UP "/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/")
  string(REGEX REPLACE "/$" "" QKV_PC_UP "${QKV_PC_UP}")
  set(QKV_PC_PREFIX "\${pcfiledir}/${QKV_PC_UP}")
endif()
# What linking libqkv.a adds (Libs.private; ICU, libcrypto, zlib and libpng come as
# Requires.private).
set(QKV_PC_LIBS_PRIVATE "-ldnnl")
if(NOT QKV_DNNL_LIBRARY_DIR IN_LIST CMAKE_CXX_IMPLICIT_LINK_DIRECTORIES)
  set(QKV_PC_LIBS_PRIVATE "-L${QKV_DNNL_LIBRARY_DIR} ${QKV_PC_LIBS_PRIVATE}")
endif()
if(QKV_CUDA_ENABLED)
  # CUDA::cudart_static and what it needs (FindCUDAToolkit).
  get_filename_component(QKV_CUDART_DIR ${CUDA_cudart_static_LIBRARY} DIRECTORY)
  string(APPEND QKV_PC_LIBS_PRIVATE " -L${QKV_CUDART_DIR} -lcudart_static -ldl -lrt -pthread")
endif()
if(QKV_MPI_ENABLED)
  foreach(library ${MPI_CXX_LIBRARIES})
    string(APPEND QKV_PC_LIBS_PRIVATE " ${library}")
  endforeach()
endif()
configure_file(cmake/qkv.pc.in ${PROJECT_BINARY_DIR}/qkv.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/qkv.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
