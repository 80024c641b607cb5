# Read by CTest (the build directory's TEST_INCLUDE_FILES, CMakeLists.txt), not by CMake:
# registers each case of a cmocka test program as its own test, PREFIX.CASE (the case's name less
# its "test_" prefix), run as `PROGRAM --case CASE` in its own process with its own timeout, so a
# case that hangs is killed and named and the program's other cases still run (docs/testing.md).
# LIST is the program's case list, written after each link by tests/cmake/list_cases.cmake; a
# program not built yet is one failing test, PREFIX_NOT_BUILT.
function(rp_cases prefix list timeout env)
  if(NOT EXISTS "${list}")
    add_test(${prefix}_NOT_BUILT ${prefix}_NOT_BUILT)
    return()
  endif()
  include("${list}")
  foreach(case ${rp_cases})
    string(REGEX REPLACE "^test_" "" short "${case}")
    add_test(${prefix}.${short} "${rp_program}" --case ${case})
    # A case that calls cmocka's skip() (a data set not installed), or that RP_TEST_SKIP names, is
    # reported as skipped, not passed (tests/harness.c prints cmocka's line for the latter); so is
    # one whose program exits 77, CTest's code for a skip (test_kernels_cuda without a GPU).
    set_tests_properties(${prefix}.${short} PROPERTIES TIMEOUT ${timeout} ENVIRONMENT "${env}"
      SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\] " SKIP_RETURN_CODE 77)
  endforeach()
endfunction()
