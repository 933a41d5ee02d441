# `cmake --install build --prefix P`: the public headers; the engine, libqkv_attention.a and
# libqkv_attention.so; the library on top of it, libqkv.a and libqkv.so; the CMake package
# (find_package(qkv CONFIG): qkv::attention and qkv::qkv shared, qkv::attention_static and
# qkv::qkv_static); qkv-attention.pc and qkv.pc; and the CLI. Nothing of apps/ (the CLI holds
# them), tests/, bench/ or python/ (the Python package installs itself with pip).
include(CMakePackageConfigHelpers)

set(QKV_CMAKE_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/qkv)

install(TARGETS qkv_attention qkv_attention_shared qkv qkv_shared EXPORT qkvTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS qkv_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# Everything under include/qkv is public (library-only headers live under src/, the
# applications' under apps/); version.h is generated (version.h.in).
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
# What linking libqkv_attention.a adds: the CUDA runtime where the CUDA kernels are built
# (CUDA::cudart_static and what it needs, FindCUDAToolkit). Nothing else: the engine needs
# only OpenMP, which Cflags and Libs name.
set(QKV_ATTENTION_PC_LIBS_PRIVATE "")
if(QKV_CUDA_ENABLED)
  get_filename_component(QKV_CUDART_DIR ${CUDA_cudart_static_LIBRARY} DIRECTORY)
  set(QKV_ATTENTION_PC_LIBS_PRIVATE "-L${QKV_CUDART_DIR} -lcudart_static -ldl -lrt -pthread")
endif()
# What linking libqkv.a adds (Libs.private; ICU and libcrypto come as Requires.private).
set(QKV_PC_LIBS_PRIVATE "-ldnnl")
if(NOT QKV_DNNL_LIBRARY_DIR IN_LIST CMAKE_CXX_IMPLICIT_LINK_DIRECTORIES)
  set(QKV_PC_LIBS_PRIVATE "-L${QKV_DNNL_LIBRARY_DIR} ${QKV_PC_LIBS_PRIVATE}")
endif()
if(QKV_MPI_ENABLED)
  # Debian's Open MPI: -lmpi from its own directory; not the absolute paths CMake found.
  set(directories)
  foreach(library ${MPI_CXX_LIBRARIES})
    get_filename_component(directory ${library} DIRECTORY)
    get_filename_component(file ${library} NAME)
    string(REGEX REPLACE "^lib(.*)\\.(so|a)(\\..*)?$" "\\1" name ${file})
    if(NOT directory IN_LIST CMAKE_CXX_IMPLICIT_LINK_DIRECTORIES AND NOT directory IN_LIST directories)
      list(APPEND directories ${directory})
      string(APPEND QKV_PC_LIBS_PRIVATE " -L${directory}")
    endif()
    string(APPEND QKV_PC_LIBS_PRIVATE " -l${name}")
  endforeach()
endif()
foreach(pc qkv-attention qkv)
  configure_file(cmake/${pc}.pc.in ${PROJECT_BINARY_DIR}/${pc}.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/${pc}.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endforeach()
