# Runs a command and checks its exit code and output.
#   cmake -DCMD="a;b;c" -DEXPECT_RC=2 -DEXPECT_REGEX="..." [-DREJECT_REGEX="..."]
#         [-DEXPECT_MISSING="path;..."] [-DWORKDIR=dir]
#         [-DFRESH_DIR=dir] [-DFIFOS="path;..."] [-DLINKS="link>target;..."]
#         [-DEXPECT_FIFOS="path;..."] [-DEXPECT_LINKS="path;..."] [-DEXPECT_FILES="path;..."]
#         -P run_expect.cmake
# EXPECT_RC may be a list of accepted codes. REJECT_REGEX must not match the output (e.g. a
# progress line: the refusal came before the run). EXPECT_MISSING paths must not exist afterwards
# (no partial output left behind).
# Setup, before the command: FRESH_DIR is emptied (the test's own scratch directory), FIFOS are
# made with mkfifo, LINKS are symbolic links made to point at their target. Afterwards
# EXPECT_FIFOS must still be FIFOs, EXPECT_LINKS still links, EXPECT_FILES regular files.
if(NOT DEFINED WORKDIR)
  set(WORKDIR ${CMAKE_CURRENT_LIST_DIR})
endif()
if(DEFINED FRESH_DIR AND NOT "${FRESH_DIR}" STREQUAL "")
  file(REMOVE_RECURSE "${FRESH_DIR}")
  file(MAKE_DIRECTORY "${FRESH_DIR}")
endif()
foreach(path IN LISTS FIFOS)
  file(REMOVE "${path}")
  execute_process(COMMAND mkfifo "${path}" RESULT_VARIABLE made)
  if(NOT made EQUAL 0)
    message(FATAL_ERROR "setup: mkfifo ${path} failed")
  endif()
endforeach()
foreach(pair IN LISTS LINKS)
  string(REPLACE ">" ";" pair "${pair}")
  list(GET pair 0 link)
  list(GET pair 1 target)
  file(REMOVE "${link}")
  file(CREATE_LINK "${target}" "${link}" SYMBOLIC)
endforeach()

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
  if(EXISTS "${path}" OR IS_SYMLINK "${path}")
    message(FATAL_ERROR "${path} exists after the run; it must not")
  endif()
endforeach()
foreach(path IN LISTS EXPECT_FIFOS)
  execute_process(COMMAND test -p "${path}" RESULT_VARIABLE is_fifo)
  if(NOT is_fifo EQUAL 0)
    message(FATAL_ERROR "${path} is no longer a FIFO after the run")
  endif()
endforeach()
foreach(path IN LISTS EXPECT_LINKS)
  if(NOT IS_SYMLINK "${path}")
    message(FATAL_ERROR "${path} is no longer a symbolic link after the run")
  endif()
endforeach()
foreach(path IN LISTS EXPECT_FILES)
  execute_process(COMMAND test -f "${path}" RESULT_VARIABLE is_file)
  if(NOT is_file EQUAL 0 OR IS_SYMLINK "${path}")
    message(FATAL_ERROR "${path} is not a regular file after the run")
  endif()
endforeach()
