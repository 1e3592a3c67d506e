#pragma once
// Error checking for the CUDA runtime. Every runtime call goes through
// NS_CUDA_CHECK, and every kernel launch is followed by NS_CUDA_CHECK_LAUNCH(),
// so a bad launch configuration or an asynchronous fault is reported at the
// call that caused it (or at the next check), with file:line.
// Included only from .cu files: it pulls in the CUDA runtime header.

#include <cuda_runtime.h>

#include "core/check.h"

#define NS_CUDA_CHECK(expr)                                                                          \
  do {                                                                                               \
    const cudaError_t ns_cuda_err_ = (expr);                                                         \
    NS_CHECK(ns_cuda_err_ == cudaSuccess) << #expr << ": " << cudaGetErrorName(ns_cuda_err_) << " (" \
                                          << cudaGetErrorString(ns_cuda_err_) << ")";                \
  } while (0)

// After every <<<...>>> or cudaLaunchKernelEx: catches invalid configurations now,
// and any earlier asynchronous error the launch surfaced.
#define NS_CUDA_CHECK_LAUNCH() NS_CUDA_CHECK(cudaGetLastError())
