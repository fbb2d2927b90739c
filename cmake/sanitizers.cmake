# Sanitizer and fuzzing builds. Neither is on by default: the ordinary build is unchanged.
#
#   -DVRAMD_SANITIZE=address,undefined  every C and C++ file compiled and linked with these
#                                       sanitizers (any list -fsanitize= takes; clang or gcc)
#   -DVRAMD_FUZZ=ON                     the libFuzzer targets of tests/fuzz (clang only), and
#                                       every file instrumented for libFuzzer's coverage; implies
#                                       VRAMD_SANITIZE=address,undefined unless it is set
#   -DCMAKE_BUILD_TYPE=Sanitize         -O1 with line tables only: about the compile time of
#                                       the ordinary -O2 -g build, asserts kept
#
# scripts/test.sh (build-asan) and scripts/fuzz.sh (build-fuzz) configure these; the first
# builds the unit tests, vramd and the fuzz targets in one tree, so CI compiles once.
# CUDA is left out of these builds: nvcc takes none of these flags, and AddressSanitizer's
# shadow memory and the CUDA driver need settings of their own (protect_shadow_gap=0).
set(VRAMD_SANITIZE "" CACHE STRING "Sanitizers for every file, e.g. address,undefined (empty: none)")
option(VRAMD_FUZZ "Build the libFuzzer targets of tests/fuzz (clang)" OFF)

if(VRAMD_FUZZ AND VRAMD_SANITIZE STREQUAL "")
  set(VRAMD_SANITIZE address,undefined)
endif()
# Options for protoc's generated code (the config and gRPC messages): none in the ordinary build.
set(VRAMD_GENERATED_CODE_OPTIONS "")
if(VRAMD_SANITIZE STREQUAL "")
  return()
endif()
if(VRAMD_FUZZ AND NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "VRAMD_FUZZ needs clang's libFuzzer: configure with "
                      "-DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 "
                      "(Debian: clang-14 libclang-rt-14-dev, scripts/install-deps.sh)")
endif()

# Defined, so the top-level CUDA detection is skipped and CUDA stays off.
set(CMAKE_CUDA_COMPILER "")

if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  set(vramd_sanitize_debug -gline-tables-only)
else()
  set(vramd_sanitize_debug -g1)
endif()
# -O1 by default (the fuzz campaigns of scripts/fuzz.sh want their executions fast); CI's job
# (scripts/test.sh) builds at -O0, which halves clang's time on this code under the sanitizers
# (55 s against 29 s for the largest batch of the server's files) for tests that run a little
# slower.
set(VRAMD_SANITIZE_OPTIMIZE "-O1" CACHE STRING "The optimization flag of CMAKE_BUILD_TYPE=Sanitize")
set(CMAKE_C_FLAGS_SANITIZE "${VRAMD_SANITIZE_OPTIMIZE} ${vramd_sanitize_debug}")
set(CMAKE_CXX_FLAGS_SANITIZE "${VRAMD_SANITIZE_OPTIMIZE} ${vramd_sanitize_debug}")

# Boost's own asserts are off, as in the release build (NDEBUG): Beast 1.74 asserts wrongly on a
# chunked body whose first chunk is the last one read in pieces (fixed upstream, boostorg/beast
# PR 2861; the code after the assert is right). vramd's asserts stay on. What runs is then what
# ships, and ASan checks it.
add_compile_definitions(BOOST_DISABLE_ASSERTS)
# A report stops the program: a sanitizer finding fails the test that met it rather than
# scrolling past in its log.
add_compile_options(-fsanitize=${VRAMD_SANITIZE} -fno-sanitize-recover=all -fno-omit-frame-pointer)
# What is left out, and why, is in ubsan_ignorelist.txt (rapidjson's null-pointer arithmetic).
# gcc has no ignore list, so there that check is off altogether.
if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  add_compile_options(-fsanitize-ignorelist=${CMAKE_CURRENT_LIST_DIR}/ubsan_ignorelist.txt)
elseif(VRAMD_SANITIZE MATCHES "undefined")
  add_compile_options(-fno-sanitize=pointer-overflow)
endif()
add_link_options(-fsanitize=${VRAMD_SANITIZE})
if(VRAMD_FUZZ)
  # Coverage for libFuzzer in every library; only the fuzz targets link libFuzzer itself (the
  # sanitizer runtimes give the other programs no-op hooks).
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()
# protoc's generated code, still checked by the sanitizers, is compiled without optimization and
# without coverage: at -O1 with coverage its four files were a sixth of this build's compile
# time (94 of 865 CPU seconds in CI), and the fuzzers' target is vramd's code, not protoc's.
set(VRAMD_GENERATED_CODE_OPTIONS -O0)
if(VRAMD_FUZZ)
  list(APPEND VRAMD_GENERATED_CODE_OPTIONS -fno-sanitize=fuzzer-no-link)
endif()
message(STATUS "vramd: sanitizers ${VRAMD_SANITIZE}; fuzz targets ${VRAMD_FUZZ}; CUDA off")
