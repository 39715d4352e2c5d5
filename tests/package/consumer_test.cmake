# CTest: install this build into a scratch prefix, then configure, build and run
# examples/consumer against that prefix only (find_package(mlakit CONFIG REQUIRED)).
# Arguments: -DBUILD_DIR -DSOURCE_DIR -DWORK_DIR -DCXX [-DCONFIG]
foreach(var BUILD_DIR SOURCE_DIR WORK_DIR CXX)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "consumer_test.cmake: -D${var}=... is required")
  endif()
endforeach()
if(NOT CONFIG)
  set(CONFIG Release)
endif()

function(run step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "package test: ${step} failed (${rc})")
  endif()
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
run("cmake --install" ${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${WORK_DIR}/install" --config ${CONFIG})
run("configure the consumer" ${CMAKE_COMMAND} -S "${SOURCE_DIR}/examples/consumer" -B "${WORK_DIR}/build"
    -DCMAKE_BUILD_TYPE=${CONFIG} -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_PREFIX_PATH=${WORK_DIR}/install
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
run("build the consumer" ${CMAKE_COMMAND} --build "${WORK_DIR}/build" --config ${CONFIG})
find_program(consumer mlakit_consumer PATHS "${WORK_DIR}/build" "${WORK_DIR}/build/${CONFIG}" NO_DEFAULT_PATH)
if(NOT consumer)
  message(FATAL_ERROR "package test: mlakit_consumer was not built")
endif()
run("run the consumer" "${consumer}")
