# Every test runs offline (tests/support/offline.env): no credential source
# reaches past the loopback (the metadata services are off or pointed at a
# closed port, ckpt refuses any other host for credentials), so a test that
# finds no credentials fails here instead of probing the network.
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
             ${CMAKE_SOURCE_DIR}/tests/support/offline.env)
file(STRINGS ${CMAKE_SOURCE_DIR}/tests/support/offline.env _offline
     REGEX "^-?[A-Z]")
set(CKPT_OFFLINE_ENV)
set(CKPT_OFFLINE_UNSET)
foreach(line ${_offline})
  if(line MATCHES "^-([A-Z0-9_]+)$")
    list(APPEND CKPT_OFFLINE_UNSET "${CMAKE_MATCH_1}=unset:")
  else()
    list(APPEND CKPT_OFFLINE_ENV "${line}")
  endif()
endforeach()

# Unit tests: tests/unit/test_<module>.c, one executable each. Each case is
# registered with ctest as <module>/<case> so it runs by name.
file(GLOB CKPT_UNIT_TESTS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/unit/test_*.c)
foreach(src ${CKPT_UNIT_TESTS})
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} ${src})
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/src
                                             ${CMAKE_SOURCE_DIR}/tests/support)
  target_link_libraries(${name} PRIVATE ckpt_core)
  add_test(NAME unit/${name} COMMAND ${name}
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR}/tests)
  set_tests_properties(unit/${name} PROPERTIES LABELS unit TIMEOUT 300
    ENVIRONMENT "${CKPT_OFFLINE_ENV}"
    ENVIRONMENT_MODIFICATION "${CKPT_OFFLINE_UNSET}")
endforeach()

# Integration tests: shell or Python scripts run against build/ckpt.
# A script may add to its ctest properties with header comments in its
# first KiB (right after the #! line):
#   # ctest-cost: 90       rough seconds it takes; with -j, ctest starts the
#                          costliest first (it has no timings on a fresh
#                          build directory, and would run it last)
#   # ctest-labels: slow   extra labels, space-separated (scripts/test.sh's
#                          ASan phase skips "slow")
# A script that cannot run on this machine at all (not root, mount(2)
# refused; never a missing package or a daemon that fails to start) prints
# "SKIP: <test> (<why>)" and exits 77: ctest reports it as skipped, never
# as passed, and scripts/test.sh fails on any skip tests/skips-allowed.txt
# does not excuse (tests/README.md).
file(GLOB CKPT_INT_TESTS CONFIGURE_DEPENDS
     ${CMAKE_SOURCE_DIR}/tests/integration/*.sh
     ${CMAKE_SOURCE_DIR}/tests/integration/*.py)
foreach(script ${CKPT_INT_TESTS})
  get_filename_component(name ${script} NAME_WE)
  get_filename_component(ext ${script} EXT)
  if(ext STREQUAL ".py")
    set(cmd /usr/bin/python3 ${script})
  else()
    set(cmd bash ${script})
  endif()
  add_test(NAME integration/${name} COMMAND ${cmd}
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  # (a changed header must reconfigure)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${script})
  file(STRINGS ${script} header LIMIT_INPUT 1024 REGEX "^# ctest-[a-z]+:")
  set(labels integration)
  set(cost 0)
  foreach(line ${header})
    if(line MATCHES "^# ctest-cost: *([0-9]+)")
      set(cost ${CMAKE_MATCH_1})
    elseif(line MATCHES "^# ctest-labels: *([a-z0-9_ -]+)$")
      string(REPLACE " " ";" more "${CMAKE_MATCH_1}")
      list(APPEND labels ${more})
    else()
      message(FATAL_ERROR "${script}: unknown header '${line}'")
    endif()
  endforeach()
  # (exit 77: skipped, e.g. a test that needs mount(2) run without root)
  set_tests_properties(integration/${name} PROPERTIES LABELS "${labels}"
    COST ${cost} TIMEOUT 900 SKIP_RETURN_CODE 77
    ENVIRONMENT "CKPT=$<TARGET_FILE:ckpt>;CKPT_SRC=${CMAKE_SOURCE_DIR};CKPT_BUILD=${CMAKE_BINARY_DIR};${CKPT_OFFLINE_ENV}"
    ENVIRONMENT_MODIFICATION "${CKPT_OFFLINE_UNSET}")
endforeach()

# Fuzz targets: tests/fuzz/<target>_fuzz.c. Always built as a replay driver
# over tests/fuzz/corpus/<target>/ (run under ctest); with CKPT_FUZZ also as
# a libFuzzer binary.
file(GLOB CKPT_FUZZ_TARGETS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/fuzz/*_fuzz.c)
foreach(src ${CKPT_FUZZ_TARGETS})
  get_filename_component(name ${src} NAME_WE)
  string(REGEX REPLACE "_fuzz$" "" target ${name})
  add_executable(${name}_replay ${src} ${CMAKE_SOURCE_DIR}/tests/fuzz/replay.c)
  target_include_directories(${name}_replay PRIVATE ${CMAKE_SOURCE_DIR}/src)
  target_link_libraries(${name}_replay PRIVATE ckpt_core)
  add_test(NAME fuzz/${target} COMMAND ${name}_replay
           ${CMAKE_SOURCE_DIR}/tests/fuzz/corpus/${target})
  set_tests_properties(fuzz/${target} PROPERTIES LABELS fuzz TIMEOUT 300
    ENVIRONMENT "${CKPT_OFFLINE_ENV}"
    ENVIRONMENT_MODIFICATION "${CKPT_OFFLINE_UNSET}")
  if(CKPT_FUZZ)
    add_executable(${name} ${src})
    target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/src)
    target_compile_options(${name} PRIVATE -fsanitize=fuzzer)
    target_link_options(${name} PRIVATE -fsanitize=fuzzer)
    target_link_libraries(${name} PRIVATE ckpt_core)
  endif()
endforeach()

# storage_tool: the storage API for integration tests and benchmarks
# (tests/support/storage_tool.c); scripts find it as $CKPT_BUILD/storage_tool.
add_executable(storage_tool ${CMAKE_SOURCE_DIR}/tests/support/storage_tool.c)
target_link_libraries(storage_tool PRIVATE ckpt_core)

# lease_tool: the per-run lease for integration tests
# (tests/support/lease_tool.c); scripts find it as $CKPT_BUILD/lease_tool.
add_executable(lease_tool ${CMAKE_SOURCE_DIR}/tests/support/lease_tool.c)
target_link_libraries(lease_tool PRIVATE ckpt_core)

# LD_PRELOAD shims (tests/support/NAME_preload.c, sharing preload.h); tests
# find each as $CKPT_BUILD/libNAME_preload.so.
#   vanish       deletes a directory at the moment it is first opened;
#   unlink_fail  deleting a file of a given name fails;
#   kill         SIGKILLs the process right after its first delete or
#                rename below a path;
#   readcount    bytes read from one file and its opens, appended at exit;
#   change       changes a file at the moment the process first unlinks
#                something below a directory;
#   age          the live-run guard's tests: ctimes reported older (trees
#                aged with utime), and a file written at the moment a given
#                one is first opened;
#   link         hard links made, and a file changed as it is linked.
# Never sanitized: a test that puts a shim in its whole environment
# (s3test.old_ctime) also loads it into python, node and Slurm's daemons,
# which die at start on a library that needs ASan's runtime.
foreach(shim vanish unlink_fail kill change age readcount link)
  add_library(${shim}_preload SHARED
              ${CMAKE_SOURCE_DIR}/tests/support/${shim}_preload.c)
  target_link_libraries(${shim}_preload PRIVATE ${CMAKE_DL_LIBS})
  if(CKPT_SANITIZE)
    target_compile_options(${shim}_preload PRIVATE -fno-sanitize=all)
    target_link_options(${shim}_preload PRIVATE -fno-sanitize=all)
  endif()
endforeach()
