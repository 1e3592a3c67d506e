#include "core/thread_pool.h"

#include <algorithm>

namespace nanoserve {

namespace {
// Spin this many polls before sleeping: a decode step issues hundreds of
// short parallel loops, and a condition-variable wake-up costs microseconds.
constexpr int kSpinPolls = 20000;

inline void cpu_relax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}
}  // namespace

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  n_threads_ = n_threads;
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
    generation_.fetch_add(1);
  }
  cv_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::run_share(int index) {
  const int64_t per = n_ / n_threads_, rem = n_ % n_threads_;
  const int64_t begin = index * per + std::min<int64_t>(index, rem);
  const int64_t end = begin + per + (index < rem ? 1 : 0);
  if (begin < end) (*fn_)(begin, end, index);
}

void ThreadPool::parallel_for(int64_t n, const RangeFn& fn) {
  if (n <= 0) return;
  if (n_threads_ == 1 || n == 1) {
    fn(0, n, 0);
    return;
  }
  fn_ = &fn;
  n_ = n;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  cv_.notify_all();
  run_share(0);
  while (pending_.load(std::memory_order_acquire) != 0) cpu_relax();
  fn_ = nullptr;
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    int spins = 0;
    while (generation_.load(std::memory_order_acquire) == seen && spins < kSpinPolls) {
      cpu_relax();
      ++spins;
    }
    if (generation_.load(std::memory_order_acquire) == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
    }
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load()) return;
    run_share(index);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace nanoserve
