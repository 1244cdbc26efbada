# Runs a command and checks its exit code and output.
#   cmake -DCMD="a;b;c" -DEXPECT_RC=2 -DEXPECT_REGEX="..." [-DWORKDIR=dir] -P run_expect.cmake
# EXPECT_RC may be a list of accepted codes.
if(NOT DEFINED WORKDIR)
  set(WORKDIR ${CMAKE_CURRENT_LIST_DIR})
endif()
execute_process(COMMAND ${CMD} WORKING_DIRECTORY ${WORKDIR} RESULT_VARIABLE rc
                OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
list(FIND EXPECT_RC "${rc}" found)
if(found EQUAL -1)
  message(FATAL_ERROR "exit code ${rc}, expected one of ${EXPECT_RC}")
endif()
if(DEFINED EXPECT_REGEX AND NOT "${out}${err}" MATCHES "${EXPECT_REGEX}")
  message(FATAL_ERROR "output does not match '${EXPECT_REGEX}'")
endif()
