# Includes point one way: format -> kernels -> engine -> serving -> tools.
# Every source under those folders may include its own layer and the ones
# below it, never one above. Run by the build (CMakeLists.txt: the target
# check_layers, which every binary depends on) and by hand:
#   cmake -DROOT=<checkout> -P scripts/check_layers.cmake
# Fails, naming each upward include, when one is found.
#
# The layers, by folder (the longest prefix wins):
set(_layers
  "runtime/engine_cuda=engine"
  "runtime/engine=engine"
  "runtime=format"            # common, gguf, quant, model, placement, tokenizer, sampler, chat
  "kernels_cpu=kernels"
  "kernels_cuda=kernels"
  "planner=engine"
  "runtime/serving=serving"
  "tools=tools"
  "bench=tools")
set(_order format kernels engine serving tools)

if(NOT ROOT)
  message(FATAL_ERROR "check_layers: set ROOT to the checkout")
endif()

# The layer of a path relative to ROOT ("" when none: tests, scripts).
function(layer_of path out)
  set(best "")
  set(best_len 0)
  foreach(entry ${_layers})
    string(REPLACE "=" ";" kv "${entry}")
    list(GET kv 0 prefix)
    list(GET kv 1 name)
    string(LENGTH "${prefix}" len)
    string(FIND "${path}/" "${prefix}/" at)
    if(at EQUAL 0 AND len GREATER best_len)
      set(best "${name}")
      set(best_len ${len})
    endif()
  endforeach()
  set(${out} "${best}" PARENT_SCOPE)
endfunction()

set(_dirs runtime kernels_cpu kernels_cuda planner tools bench)
set(_sources)
foreach(d ${_dirs})
  file(GLOB_RECURSE _found RELATIVE "${ROOT}" "${ROOT}/${d}/*.h" "${ROOT}/${d}/*.cpp" "${ROOT}/${d}/*.cu"
       "${ROOT}/${d}/*.cuh")
  list(APPEND _sources ${_found})
endforeach()

set(_bad "")
foreach(src ${_sources})
  layer_of("${src}" from)
  if(from STREQUAL "")
    continue()
  endif()
  list(FIND _order "${from}" from_rank)
  file(STRINGS "${ROOT}/${src}" includes REGEX "^[ \t]*#[ \t]*include[ \t]*\"[^\"]+\"")
  foreach(line ${includes})
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([^\"]+)\".*" "\\1" inc "${line}")
    layer_of("${inc}" to)
    if(to STREQUAL "")
      continue()
    endif()
    list(FIND _order "${to}" to_rank)
    if(to_rank GREATER from_rank)
      string(APPEND _bad "\n  ${src} (${from}) includes ${inc} (${to})")
    endif()
  endforeach()
endforeach()

if(NOT _bad STREQUAL "")
  message(FATAL_ERROR "check_layers: includes must point format -> kernels -> engine -> serving -> tools; "
                      "these point up:${_bad}")
endif()
