# Run after each cmocka test program links (CMakeLists.txt): asks the program for its cases
# (PROGRAM --list, tests/harness.c) and writes them to OUT as a CMake list, with the program's
# path, for tests/cmake/cases.cmake to register when CTest runs. A program that cannot list its
# cases (two cases of one name, a crash) fails the build, naming the program.
execute_process(COMMAND ${PROGRAM} --list RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${PROGRAM} --list failed (${rc}): ${err}")
endif()
string(REGEX REPLACE "\n$" "" out "${out}")
string(REPLACE "\n" ";" cases "${out}")
set(text "set(rp_program [==[${PROGRAM}]==])\nset(rp_cases\n")
foreach(case ${cases})
  if(NOT case MATCHES "^[A-Za-z0-9_]+$")
    message(FATAL_ERROR "${PROGRAM}: case name '${case}' is not a C identifier")
  endif()
  string(APPEND text "  ${case}\n")
endforeach()
string(APPEND text ")\n")
# Written only when it changes, so that CTest's list stays as it is across relinks.
if(EXISTS ${OUT})
  file(READ ${OUT} old)
  if(old STREQUAL text)
    return()
  endif()
endif()
file(WRITE ${OUT} "${text}")
