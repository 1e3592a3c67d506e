#pragma once
// Kernel launches with programmatic dependent launch (sm_90): the grid may be
// scheduled while the kernel before it in the stream is finishing, so its
// launch and block start-up overlap that kernel's tail. A kernel launched this
// way calls cuda::wait_primary_grid() (ptx.cuh) before it reads or writes any
// memory that earlier kernels of the stream read or write (the weights, which
// nothing writes, it may read before), and cuda::launch_dependents() to let
// the next kernel be scheduled. The wait returns when the previous grid has
// completed and its writes are visible; since every kernel of the chain waits
// before touching memory, the previous grid's completion implies all earlier
// ones'. Included only from .cu files.

#include <cuda_runtime.h>

#include <utility>

#include "core/cuda/cuda_check.cuh"

namespace nanoserve::cuda {

// With programmatic dependent launch where `dependent` (a caller's option),
// else an ordinary launch after the kernel before it.
template <typename... Params, typename... Args>
void launch_maybe_pdl(bool dependent, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                      cudaStream_t s, Args&&... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cfg.attrs = attr;
  cfg.numAttrs = dependent ? 1 : 0;
  NS_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

template <typename... Params, typename... Args>
void launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                Args&&... args) {
  launch_maybe_pdl(true, kernel, grid, block, smem, s, std::forward<Args>(args)...);
}

}  // namespace nanoserve::cuda
