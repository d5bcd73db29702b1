# The headers an outside project includes, as <blockmgr/NAME.h>. They are the project's own
# headers, copied at configure time into ${BM_PUBLIC_INCLUDE_DIR}/blockmgr/ with their project
# includes ("common/status.h") rewritten to the public names (<blockmgr/status.h>). A public
# header that includes a project header outside this set fails the configure step, so an
# internal header can never become public by accident.

set(BM_PUBLIC_INCLUDE_DIR ${PROJECT_BINARY_DIR}/public_include)

# source path (relative to the project) -> installed name under blockmgr/
set(BM_PUBLIC_HEADERS
  client/client.h=client.h
  client/dataset.h=dataset.h
  client/shuffle.h=shuffle.h
  client/types.h=types.h
  common/block_id.h=block_id.h
  common/chunk.h=chunk.h
  common/status.h=status.h
  common/storage_level.h=storage_level.h
  common/tier.h=tier.h
  common/worker_state.h=worker_state.h
)

function(bm_generate_public_headers)
  set(generated)
  foreach(entry IN LISTS BM_PUBLIC_HEADERS)
    string(REPLACE "=" ";" pair "${entry}")
    list(GET pair 0 source)
    list(GET pair 1 name)
    set(public_of_${source} ${name})
  endforeach()
  foreach(entry IN LISTS BM_PUBLIC_HEADERS)
    string(REPLACE "=" ";" pair "${entry}")
    list(GET pair 0 source)
    list(GET pair 1 name)
    set_property(DIRECTORY ${PROJECT_SOURCE_DIR} APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
                 ${PROJECT_SOURCE_DIR}/${source})
    file(READ ${PROJECT_SOURCE_DIR}/${source} text)
    string(REGEX MATCHALL "#include \"[^\"]+\"" includes "${text}")
    foreach(include IN LISTS includes)
      string(REGEX REPLACE "#include \"([^\"]+)\"" "\\1" included "${include}")
      if(NOT DEFINED public_of_${included})
        message(FATAL_ERROR "public header ${source} includes ${included}, which is not public "
                            "(cmake/PublicHeaders.cmake lists the public headers)")
      endif()
      string(REPLACE "${include}" "#include <blockmgr/${public_of_${included}}>" text "${text}")
    endforeach()
    # configure_file-like: rewrite only when the text changed, so dependents do not rebuild.
    set(out ${BM_PUBLIC_INCLUDE_DIR}/blockmgr/${name})
    set(old "")
    if(EXISTS ${out})
      file(READ ${out} old)
    endif()
    if(NOT old STREQUAL text)
      file(WRITE ${out} "${text}")
    endif()
    list(APPEND generated ${out})
  endforeach()
  # For the install rules (packaging/CMakeLists.txt).
  set_property(GLOBAL PROPERTY BM_PUBLIC_HEADER_FILES ${generated})
endfunction()
