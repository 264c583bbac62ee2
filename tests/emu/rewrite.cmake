# cmake -DIN=kernels/x.cu -DOUT=build/.../x.cpp -P rewrite.cmake
# Turns a kernel file into C++ for the CUDA emulator (tests/emu/cuda_emu.h says why):
#   NAME<<<CFG>>>(ARGS)            ->  ::emu::named("NAME", NAME) | ::emu::Cfg{CFG}(ARGS)
#   extern __shared__ T name[];    ->  T* name = ::emu::dyn_smem<T>();
# NAME is an identifier with at most one level of template arguments (all the kernels have).
# Anything else with "<<<" or "extern __shared__" left over is an error, not a silent miss.
file(READ "${IN}" src)
set(name_re "([A-Za-z_][A-Za-z0-9_]*(<[^<>;]*(<[^<>;]*>[^<>;]*)*>)?)")
string(REGEX REPLACE "${name_re}<<<" "::emu::named(\"\\1\", \\1) | ::emu::Cfg{" src "${src}")
string(REPLACE ">>>(" "}(" src "${src}")
string(REGEX REPLACE "extern __shared__ ([A-Za-z_][A-Za-z0-9_:]*) ([A-Za-z_][A-Za-z0-9_]*)\\[\\];"
       "\\1* \\2 = ::emu::dyn_smem<\\1>();" src "${src}")
foreach(left "<<<" ">>>" "extern __shared__")
  string(FIND "${src}" "${left}" at)
  if(NOT at EQUAL -1)
    message(FATAL_ERROR "tests/emu/rewrite.cmake: '${left}' left in ${IN} after rewriting (a launch form it does not know)")
  endif()
endforeach()
file(WRITE "${OUT}.tmp" "#line 1 \"${IN}\"\n${src}")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.tmp")
