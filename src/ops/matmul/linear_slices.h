#pragma once
// How linear_cuda's kernels split K: four slices of whole 64-wide chunks,
// summed in order ((S0 + S1) + S2) + S3 (linear_cuda_common.cuh), and how the
// FP8 kernel walks a run of slices in units of its pipeline's stages: two
// chunks of one slice a unit, one in an odd slice's last (linear_cuda_fp8.cu).
// Host and device code alike (the host test checks the walk).

#if defined(__CUDACC__)
#define NS_LINEAR_HD __host__ __device__ __forceinline__
#else
#define NS_LINEAR_HD inline
#endif

namespace nanoserve::linear_detail {

constexpr int kSlices = 4;  // K slices, summed in order: ((S0 + S1) + S2) + S3
constexpr int kChunk = 64;  // k per chunk; a slice is whole chunks

// Slice w of a K of `chunks` chunks is chunks [begin, end).
NS_LINEAR_HD int slice_begin(int w, int chunks) {
  return w * chunks / kSlices;
}

// Slice w's units, and how many of them hold two chunks (all but an odd
// slice's last).
NS_LINEAR_HD int slice_units(int w, int chunks) {
  return (slice_begin(w + 1, chunks) - slice_begin(w, chunks) + 1) / 2;
}
NS_LINEAR_HD int slice_pairs(int w, int chunks) {
  return (slice_begin(w + 1, chunks) - slice_begin(w, chunks)) / 2;
}

// The units of slices w0 .. w0 + n - 1 taken in turn.
NS_LINEAR_HD int run_units(int w0, int n, int chunks) {
  int u = 0;
  for (int w = w0; w < w0 + n; ++w) u += slice_units(w, chunks);
  return u;
}

// The first chunk of unit u of that run.
NS_LINEAR_HD int unit_chunk(int w0, int n, int u, int chunks) {
  int w = w0;
  for (; w + 1 < w0 + n && u >= slice_units(w, chunks); ++w) u -= slice_units(w, chunks);
  return slice_begin(w, chunks) + 2 * u;
}

}  // namespace nanoserve::linear_detail

#undef NS_LINEAR_HD
