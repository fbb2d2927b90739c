# CI builds with -DCMAKE_UNITY_BUILD=ON (scripts/test.sh): each target's sources compiled in
# batches, so the headers they share (Asio, Beast, fmt, protobuf, gtest) are parsed once per
# batch instead of once per file. A file whose file-local names clash with another's in the same
# batch is compiled on its own, listed here by target.
if(CMAKE_UNITY_BUILD)
  set(vramd_unity_alone
    "vramd_memory:ledger.cc"
    "vramd_backends:abi/abi_responses.cc"
    "vramd_server_lib:http/generate_codec.cc"
    "vramd_server_lib:metrics/lifecycle_text.cc"
    "vramd_unit_tests:unit/runtime/reload_under_load_test.cc"
    "vramd_unit_tests:unit/runtime/scheduler_assembly_test.cc"
    "vramd_unit_tests:unit/runtime/model_manager_steps_test.cc"
    "vramd_unit_tests:unit/runtime/model_memory_test.cc"
    "vramd_unit_tests:unit/memory/ledger_test.cc"
    "vramd_unit_tests:unit/memory/native_memory_test.cc"
    "vramd_unit_tests:unit/backends/shared_library_backend_test.cc"
  )
  foreach(entry IN LISTS vramd_unity_alone)
    string(REPLACE ":" ";" parts "${entry}")
    list(GET parts 0 target)
    list(GET parts 1 file)
    if(TARGET ${target})
      get_target_property(dir ${target} SOURCE_DIR)
      set_property(SOURCE "${dir}/${file}" TARGET_DIRECTORY ${target}
                   PROPERTY SKIP_UNITY_BUILD_INCLUSION ON)
    endif()
  endforeach()
endif()
