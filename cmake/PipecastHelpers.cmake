# pipecast_add_test(NAME SOURCES ... LIBS ... [LABEL label])
# A GoogleTest executable whose tests are registered with ctest one by one,
# each labelled `unit` (or LABEL, e.g. `gpu` for tests that need a device) and
# run from the source root with PIPECAST_SOURCE_DIR set.
# One label only: gtest_discover_tests splits list-valued PROPERTIES.
function(pipecast_add_test name)
  cmake_parse_arguments(ARG "" "LABEL" "SOURCES;LIBS" ${ARGN})
  if(NOT ARG_LABEL)
    set(ARG_LABEL unit)
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} GTest::gtest GTest::gtest_main)
  gtest_discover_tests(${name}
    DISCOVERY_MODE PRE_TEST
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
    PROPERTIES LABELS ${ARG_LABEL} ENVIRONMENT "PIPECAST_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
endfunction()
