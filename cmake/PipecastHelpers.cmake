# pipecast_add_test(NAME SOURCES ... LIBS ... [LABELS ...])
# A GoogleTest executable whose tests are registered with ctest one by one.
function(pipecast_add_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} GTest::gtest GTest::gtest_main)
  set(labels unit ${ARG_LABELS})
  gtest_discover_tests(${name}
    DISCOVERY_MODE PRE_TEST
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
    PROPERTIES LABELS "${labels}" ENVIRONMENT "PIPECAST_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
endfunction()
