# Runs a command and checks its exit code and output.
#   cmake -DCMD="a;b;c" -DEXPECT_RC=2 -DEXPECT_REGEX="..." [-DREJECT_REGEX="..."]
#         [-DEXPECT_MISSING="path;..."] [-DWORKDIR=dir] -P run_expect.cmake
# EXPECT_RC may be a list of accepted codes. REJECT_REGEX must not match the output (e.g. a
# progress line: the refusal came before the run). EXPECT_MISSING paths must not exist afterwards
# (no partial output left behind).
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
if(NOT "${REJECT_REGEX}" STREQUAL "" AND "${out}${err}" MATCHES "${REJECT_REGEX}")
  message(FATAL_ERROR "output matches '${REJECT_REGEX}', which it must not")
endif()
foreach(path IN LISTS EXPECT_MISSING)
  if(EXISTS "${path}")
    message(FATAL_ERROR "${path} exists after the run; it must not")
  endif()
endforeach()
