# `cmake --install build --prefix P` lays kiln out as
#   P/bin/kiln                          the CLI
#   P/lib/libkiln.so                    the C++ API (<kiln/kiln.h>)
#   P/lib/kiln/libkiln_jit_clang.so     the in-process Clang toolchain, dlopen'ed on a miss
#   P/lib/kiln/kiln-spirv, kiln-hiprtc  helpers run per compile: LLVM's SPIR-V back end, hiprtc
#   P/lib/kiln/libkiln_nvrtc.so         NVRTC with kiln's cache, for LD_PRELOAD (`kiln nvrtc --preload`),
#   P/lib/kiln/libkiln_nvrtc_store.so   and the store side it loads on a first compile
#   P/lib/kiln/llvm                     with KILN_STATIC_LLVM (a wheel): Clang's resource folder,
#                                       compiler-rt's builtins and libomp, as an LLVM prefix
#   P/include/kiln/kiln.h               the public header
#   P/share/kiln/specs                  the bundled ops
#   P/share/kiln/include/{cpu,cuda,hip} the headers kernels include (<kiln/cpu_kernel.h>, kiln's HIP prelude)
#   P/lib/cmake/kiln, P/lib/pkgconfig   find_package(kiln) -> kiln::kiln; pkg-config kiln
# kiln finds share/kiln and lib/kiln from its own file (support/install_paths.h), so the tree
# may be moved after installing. Always lib/, never lib/<multiarch>: that lookup is relative.
include(CMakePackageConfigHelpers)
set(KILN_INSTALL_CMAKEDIR lib/cmake/kiln)

install(TARGETS kiln RUNTIME DESTINATION bin)
install(TARGETS kiln_api EXPORT kilnTargets LIBRARY DESTINATION lib)
if(TARGET kiln_jit_clang)
  install(TARGETS kiln_jit_clang LIBRARY DESTINATION lib/kiln)
  install(TARGETS kiln-spirv RUNTIME DESTINATION lib/kiln)
  if(KILN_STATIC_LLVM)
    # The toolchain library carries Clang, LLVM and lld; beside it, laid out as an LLVM prefix
    # (jit/toolchain.h, clang_driver_path), what the driver reads from disk: Clang's resource
    # headers (stddef.h, intrinsics, the CUDA wrappers, omp.h), compiler-rt's builtins for host
    # links, and LLVM's OpenMP runtime for -fopenmp sources (kiln.torch preloads it).
    set(kiln_resource ${KILN_LLVM_LIBRARY_DIR}/clang/${KILN_LLVM_VERSION_MAJOR})
    install(DIRECTORY ${kiln_resource}/include DESTINATION lib/kiln/llvm/lib/clang/${KILN_LLVM_VERSION_MAJOR})
    install(FILES ${KILN_CLANG_BUILTINS_PATH} DESTINATION lib/kiln/llvm/lib/clang/${KILN_LLVM_VERSION_MAJOR}/lib/linux)
    # Where the driver looks for the linker that -fuse-ld=lld names (jit/clang/ld.lld says why).
    install(PROGRAMS ${PROJECT_SOURCE_DIR}/jit/clang/ld.lld DESTINATION lib/kiln/llvm/bin)
    get_filename_component(kiln_libomp ${KILN_LLVM_LIBRARY_DIR}/libomp.so REALPATH)
    if(EXISTS ${kiln_libomp})
      # A wheel holds no symbolic links: the file under its link-time name; its soname
      # (libomp.so.5) is what artifacts record.
      install(FILES ${kiln_libomp} DESTINATION lib/kiln/llvm/lib RENAME libomp.so)
    endif()
  else()
    # It links libLLVM and libclang-cpp from the system's LLVM: keep pointing there.
    set_target_properties(kiln_jit_clang PROPERTIES INSTALL_RPATH "${KILN_LLVM_LIBRARY_DIR}")
  endif()
endif()
install(TARGETS kiln-hiprtc RUNTIME DESTINATION lib/kiln)
install(TARGETS kiln_nvrtc_preload kiln_nvrtc_store LIBRARY DESTINATION lib/kiln)
install(FILES ${PROJECT_SOURCE_DIR}/api/include/kiln/kiln.h DESTINATION include/kiln)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/specs/ DESTINATION share/kiln/specs)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/backends/cpu/include/ DESTINATION share/kiln/include/cpu)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/backends/cuda/include/ DESTINATION share/kiln/include/cuda)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/backends/hip/include/ DESTINATION share/kiln/include/hip)

install(EXPORT kilnTargets NAMESPACE kiln:: DESTINATION ${KILN_INSTALL_CMAKEDIR})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/kilnConfig.cmake.in ${PROJECT_BINARY_DIR}/kilnConfig.cmake
  INSTALL_DESTINATION ${KILN_INSTALL_CMAKEDIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/kilnConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/kilnConfig.cmake ${PROJECT_BINARY_DIR}/kilnConfigVersion.cmake
  DESTINATION ${KILN_INSTALL_CMAKEDIR})
configure_file(${CMAKE_CURRENT_LIST_DIR}/kiln.pc.in ${PROJECT_BINARY_DIR}/kiln.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/kiln.pc DESTINATION lib/pkgconfig)

# A Debian package of the same tree: `cpack -G DEB --config build/CPackConfig.cmake`.
set(CPACK_PACKAGE_NAME kiln)
set(CPACK_PACKAGE_CONTACT "kiln maintainers")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "kernel compilation and caching service")
set(CPACK_PACKAGING_INSTALL_PREFIX /opt/kiln)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "libclang-cpp22, libllvm22, libclang-rt-22-dev")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
include(CPack)
