// PHUB_HOST_DEVICE marks an inline function that nvcc compiles for the GPU as well as the host
// (the optimizer's update, the dropout mask's hash); other compilers see a plain function.
#pragma once

#if defined(__CUDACC__)
#define PHUB_HOST_DEVICE __host__ __device__
#else
#define PHUB_HOST_DEVICE
#endif
