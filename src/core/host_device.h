#pragma once
// NS_HOST_DEVICE marks an inline function that both the host and the device
// compile: __host__ __device__ under nvcc, nothing in a plain C++ build (the
// host tests of a kernel's index arithmetic include such headers).

#if defined(__CUDACC__)
#define NS_HOST_DEVICE __host__ __device__
#else
#define NS_HOST_DEVICE
#endif
