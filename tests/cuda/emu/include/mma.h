/* stand-in for the CUDA header of this name: see ../emu_cuda.h */
#include "../emu_cuda.h"
