#pragma once
// A fixed pool of worker threads for data-parallel loops.
//
// parallel_for splits [0, n) into at most num_threads() contiguous chunks.
// Chunks are claimed dynamically: the calling thread never waits for a worker
// that has not woken yet, it takes that chunk itself. So a busy machine costs
// throughput, not a scheduler time slice per loop. Which thread runs which
// chunk varies; kernels must make each output element's reduction order
// independent of that, so results are bitwise identical for any thread count
// (docs/architecture.md).

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <type_traits>
#include <mutex>
#include <thread>
#include <vector>

namespace nanoserve {

class ThreadPool {
 public:
  // n_threads counts the calling thread; 0 means hardware concurrency.
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return n_threads_; }

  // Calls fn(begin, end, thread) over a partition of [0, n) and waits.
  // `thread` < num_threads() is unique among concurrently running calls
  // (use it to index per-thread scratch); a thread may run several chunks.
  // Not reentrant: fn must not call parallel_for on the same pool.
  // fn is called through a plain reference (no std::function), so a call
  // never allocates, whatever the callable captures.
  template <typename Fn>
  void parallel_for(int64_t n, Fn&& fn) {
    using F = std::remove_reference_t<Fn>;
    run(n, const_cast<void*>(static_cast<const void*>(&fn)),
        [](void* f, int64_t begin, int64_t end, int thread) { (*static_cast<F*>(f))(begin, end, thread); });
  }

 private:
  // work_ packs the job: generation (high 32 bits), chunk count (16), next chunk (16).
  static constexpr uint64_t kChunkMask = 0xffff;
  using RangeCall = void (*)(void* fn, int64_t begin, int64_t end, int thread);
  void run(int64_t n, void* fn, RangeCall call);
  void worker_loop(int index);
  // Claims and runs chunks of job `generation` until none are left.
  void run_chunks(uint64_t generation, int thread);

  int n_threads_;
  std::vector<std::thread> workers_;
  // The job's fields: written by the caller before it publishes work_, read
  // by a thread only after it claimed a chunk of that job.
  void* fn_ = nullptr;
  RangeCall call_ = nullptr;
  int64_t n_ = 0;
  std::atomic<uint64_t> work_{0};
  std::atomic<int64_t> done_{0};
  uint64_t generation_ = 0;
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
};

}  // namespace nanoserve
