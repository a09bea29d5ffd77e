# cmake -DIN=x.cu -DOUT=x.cpp -P translate.cmake: a .cu file as C++ for emu_cuda.h.
# `k<<<g, b, s, st>>>(args)` -> `emu_launch(k, g, b, s, st, args)`; the
# dynamic shared-memory declaration -> a pointer to the launch's buffer.
file(READ ${IN} src)
string(REGEX REPLACE "([A-Za-z_0-9:]+(<[^<>]*>)?)<<<([^>]*)>>>\\(" "emu_launch(\\1, \\3, " src "${src}")
string(REGEX REPLACE "extern __shared__ (__align__\\([0-9]+\\) )?([a-z ]+) ([A-Za-z_0-9]+)\\[\\];"
       "\\2 *\\3 = (\\2 *)emu_dyn_smem;" src "${src}")
file(WRITE ${OUT} "// generated from ${IN} by tests/cuda/emu/translate.cmake\n#include \"emu_cuda.h\"\n${src}")
