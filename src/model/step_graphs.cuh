#pragma once
// The cache of captured decode steps (CUDA graphs) of the GPU model
// (model_cuda.cu): host code over the CUDA runtime, included only there.

#include <cuda_runtime.h>

#include <array>
#include <chrono>
#include <cstdint>

#include "core/cuda/cuda_check.cuh"
#include "core/logging.h"

namespace nanoserve {

// What a captured step depends on besides the device buffers it reads.
struct GraphKey {
  int32_t tokens = 0, rows = 0, table_stride = 0;
  uint8_t output = 0;      // CudaModel::StepOutput
  uint64_t attention = 0;  // paged_attention_cuda_launch_key
  // The same for the layers without the model's sliding window (Gemma's
  // global layers), where it has one and they exist; 0 otherwise.
  uint64_t attention_full = 0;
  bool operator==(const GraphKey&) const = default;
};

// Captured steps, a fixed number, the least recently used replaced. A key is
// launched eagerly the first time (kernel loading, GEMM choices happen outside
// any capture) and captured the second.
class StepGraphs {
 public:
  static constexpr int kCapacity = 64;
  StepGraphs() = default;
  StepGraphs(const StepGraphs&) = delete;
  StepGraphs& operator=(const StepGraphs&) = delete;
  ~StepGraphs() {
    for (Entry& e : entries_) {
      if (e.exec != nullptr) cudaGraphExecDestroy(e.exec);
    }
    if (captures_ > 0) {
      NS_LOG(INFO) << "CUDA graphs: " << captures_ << " captured, " << capture_s_ * 1e3
                   << " ms of capture and instantiation in all";
    }
  }

  template <typename Record>
  void launch(const GraphKey& key, cudaStream_t st, Record&& record) {
    Entry* e = find(key);
    if (e == nullptr) {  // first sight: run it, remember it
      e = victim();
      if (e->exec != nullptr) cudaGraphExecDestroy(e->exec);
      *e = Entry{key, nullptr, ++clock_};
      record();
      return;
    }
    e->used = ++clock_;
    if (e->exec == nullptr) {
      const auto t0 = std::chrono::steady_clock::now();
      cudaGraph_t graph = nullptr;
      NS_CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
      record();
      NS_CUDA_CHECK(cudaStreamEndCapture(st, &graph));
      const cudaError_t made = cudaGraphInstantiate(&e->exec, graph, 0);
      cudaGraphDestroy(graph);
      NS_CUDA_CHECK(made);
      ++captures_;
      capture_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    NS_CUDA_CHECK(cudaGraphLaunch(e->exec, st));
  }
  int64_t captures() const { return captures_; }

 private:
  struct Entry {
    GraphKey key;
    cudaGraphExec_t exec = nullptr;
    uint64_t used = 0;  // 0: free
  };
  Entry* find(const GraphKey& key) {
    for (Entry& e : entries_) {
      if (e.used != 0 && e.key == key) return &e;
    }
    return nullptr;
  }
  Entry* victim() {
    Entry* v = &entries_[0];
    for (Entry& e : entries_) {
      if (e.used < v->used) v = &e;
    }
    return v;
  }
  std::array<Entry, kCapacity> entries_{};
  uint64_t clock_ = 0;
  int64_t captures_ = 0;
  double capture_s_ = 0.0;  // host time of capture + instantiation
};

}  // namespace nanoserve
