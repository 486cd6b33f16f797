# cmake -DIN=file.cu -DOUT=file.cpp -P rewrite_launch.cmake
# The one change the emulator makes to a .cu file: each launch
#   kernel<<<grid, block, shared, stream>>>(args)
# becomes
#   kernel % ::tandem::emu::launch(__FILE__, __LINE__, grid, block, shared, stream)(args)
# (emu.h: the config object takes the arguments, then % launches). A
# #line directive keeps errors and __FILE__ pointing at the .cu file.
file(READ "${IN}" src)
string(REGEX MATCHALL "<<<" opens "${src}")
string(REGEX MATCHALL ">>>" closes "${src}")
list(LENGTH opens n_open)
list(LENGTH closes n_close)
if(NOT n_open EQUAL n_close)
  message(FATAL_ERROR "${IN}: ${n_open} '<<<' but ${n_close} '>>>': a '>>>' that is not a launch's end cannot be rewritten")
endif()
string(REPLACE "<<<" " % ::tandem::emu::launch(__FILE__, __LINE__, " src "${src}")
string(REPLACE ">>>" ")" src "${src}")
set(out "#line 1 \"${IN}\"\n${src}")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
  if(old STREQUAL out)
    return()
  endif()
endif()
file(WRITE "${OUT}" "${out}")
