# Helpers shared by every room's CMakeLists.txt.

# gpeserve_add_library(NAME ROOM SOURCES ... [PUBLIC_DEPS ...] [PRIVATE_DEPS ...])
# Defines the library gpeserve_<ROOM> with the alias gpeserve::<ROOM>. Headers are included as
# "<folder>/<file>.h" from the repository root.
function(gpeserve_add_library room)
  cmake_parse_arguments(ARG "" "" "SOURCES;PUBLIC_DEPS;PRIVATE_DEPS" ${ARGN})
  set(target gpeserve_${room})
  add_library(${target} STATIC ${ARG_SOURCES})
  add_library(gpeserve::${room} ALIAS ${target})
  target_include_directories(${target} PUBLIC "${PROJECT_SOURCE_DIR}")
  target_link_libraries(${target} PUBLIC ${ARG_PUBLIC_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
endfunction()

# gpeserve_add_test(path/to/foo_test.cc DEPS lib... [TORCH] [LABELS label...] [TIMEOUT seconds])
# Builds one GoogleTest binary named after the file (foo_test) and registers it with ctest
# under the same name; TORCH: the file includes libtorch (gpeserve_use_torch_pch). Labels: `slow`
# (a minute or more), `cuda` (needs a GPU); every test without `cuda` is also labelled `gtest`
# and built by the target `gtests` (scripts/sanitize asan), and every one without `slow` or
# `cuda` is labelled `quick` (scripts/test --quick).
function(gpeserve_add_test file)
  cmake_parse_arguments(ARG "TORCH" "TIMEOUT" "DEPS;LABELS;ARGS" ${ARGN})
  get_filename_component(name "${file}" NAME_WE)
  add_executable(${name} "${file}")
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  if(ARG_TORCH)
    gpeserve_use_torch_pch(${name})
  endif()
  target_compile_definitions(${name} PRIVATE
    GPESERVE_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
    GPESERVE_SHARED_DIR="${GPESERVE_SHARED_DIR}")
  add_test(NAME ${name} COMMAND ${name} ${ARG_ARGS})
  set(labels ${ARG_LABELS})
  if(NOT "cuda" IN_LIST labels)
    list(APPEND labels gtest)
    set_property(GLOBAL APPEND PROPERTY GPESERVE_GTESTS ${name})
    if(NOT "slow" IN_LIST labels)
      list(APPEND labels quick)
    endif()
  endif()
  set_tests_properties(${name} PROPERTIES LABELS "${labels}")
  if(ARG_TIMEOUT)
    set_tests_properties(${name} PROPERTIES TIMEOUT ${ARG_TIMEOUT})
  endif()
endfunction()

# libtorch's headers cost 15-45 s in every translation unit that includes them. <torch/types.h> is
# parsed once into a precompiled header, on the target gpeserve_torch_pch (defined by the
# top-level CMakeLists.txt); gpeserve_use_torch_pch(TARGET) makes TARGET's C++ sources reuse it.
# GCC uses a precompiled header only when the flags that shape it match (-Winvalid-pch says when
# one does not): the consumer gets the host's OpenMP flags (_OPENMP changes ATen's headers), and
# no target has flags of its own for position-independent code (CMAKE_POSITION_INDEPENDENT_CODE is
# left unset, so libraries and executables compile alike). GPESERVE_PCH=OFF compiles every source
# on its own (to check that each includes what it uses).
function(gpeserve_use_torch_pch target)
  target_link_libraries(${target} PRIVATE OpenMP::OpenMP_CXX)
  if(GPESERVE_PCH)
    target_precompile_headers(${target} REUSE_FROM gpeserve_torch_pch)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Winvalid-pch>)
  endif()
endfunction()
