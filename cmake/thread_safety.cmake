# Clang's thread-safety analysis over every file a clang build compiles: the GUARDED_BY /
# REQUIRES / EXCLUDES rules of core/thread_annotations.h, with each finding an error.
#
#   -DVRAMD_THREAD_SAFETY_ANALYSIS=ON   -Wthread-safety -Werror=thread-safety (default: ON when
#                                       the compiler is clang; gcc has no such analysis, and the
#                                       annotations expand to nothing there)
#
# It costs nothing to run: the analysis is part of clang's semantic checks, so the sanitizer
# job (build-asan, scripts/test.sh) checks the tree as it compiles it. What that build leaves
# out (the benchmarks, the pytorch backend) scripts/thread_safety_check.py checks with
# clang -fsyntax-only.
if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  set(vramd_thread_safety_default ON)
else()
  set(vramd_thread_safety_default OFF)
endif()
option(VRAMD_THREAD_SAFETY_ANALYSIS "clang -Wthread-safety -Werror=thread-safety"
       ${vramd_thread_safety_default})

if(NOT VRAMD_THREAD_SAFETY_ANALYSIS)
  return()
endif()
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "VRAMD_THREAD_SAFETY_ANALYSIS needs clang: configure with "
                      "-DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14")
endif()
# C and C++ only: nvcc takes neither flag.
add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:-Wthread-safety;-Werror=thread-safety>")
message(STATUS "vramd: thread-safety analysis on (-Wthread-safety -Werror=thread-safety)")
