#pragma once
// A fixed pool of worker threads for data-parallel loops.
//
// parallel_for splits [0, n) into one contiguous range per thread. Kernels
// must make each output element's reduction order independent of that split,
// so results are bitwise identical for any thread count (DESIGN.md §3).

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
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

  // Calls fn(begin, end, thread_index) over a partition of [0, n) and waits.
  // Not reentrant: fn must not call parallel_for on the same pool.
  using RangeFn = std::function<void(int64_t begin, int64_t end, int thread)>;
  void parallel_for(int64_t n, const RangeFn& fn);

 private:
  void worker_loop(int index);
  void run_share(int index);

  int n_threads_;
  std::vector<std::thread> workers_;
  const RangeFn* fn_ = nullptr;
  int64_t n_ = 0;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
};

}  // namespace nanoserve
