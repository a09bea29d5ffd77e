/* stand-in for the CUDA header of this name: see ../cublas_mock.h */
#include "../cublas_mock.h"
