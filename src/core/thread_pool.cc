#include "core/thread_pool.h"

#include <algorithm>

#include "core/check.h"

namespace nanoserve {

namespace {
// Spin this many polls before sleeping: a decode step issues hundreds of
// short parallel loops, and a condition-variable wake-up costs microseconds.
constexpr int kSpinPolls = 20000;
// The caller spins this many polls on unfinished chunks before yielding its
// time slice to whichever worker holds them.
constexpr int kWaitSpinsBeforeYield = 256;

inline void cpu_relax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}
}  // namespace

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  NS_CHECK(n_threads <= static_cast<int>(kChunkMask)) << "too many threads: " << n_threads;
  n_threads_ = n_threads;
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  {
    std::lock_guard<std::mutex> lock(mu_);
    work_.store((generation_ + 1) << 32);
  }
  cv_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::run_chunks(uint64_t generation, int thread) {
  for (;;) {
    uint64_t w = work_.load(std::memory_order_acquire);
    if ((w >> 32) != generation) return;
    const uint64_t next = w & kChunkMask, n_chunks = (w >> 16) & kChunkMask;
    if (next >= n_chunks) return;
    if (!work_.compare_exchange_weak(w, w + 1, std::memory_order_acq_rel)) continue;
    // Chunk `next` of n_chunks: the same split as a static partition.
    const int64_t per = n_ / static_cast<int64_t>(n_chunks), rem = n_ % static_cast<int64_t>(n_chunks);
    const int64_t c = static_cast<int64_t>(next);
    const int64_t begin = c * per + std::min(c, rem);
    const int64_t end = begin + per + (c < rem ? 1 : 0);
    call_(fn_, begin, end, thread);
    done_.fetch_add(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::run(int64_t n, void* fn, RangeCall call) {
  if (n <= 0) return;
  const int64_t n_chunks = std::min<int64_t>(n, n_threads_);
  if (n_chunks == 1) {
    call(fn, 0, n, 0);
    return;
  }
  fn_ = fn;
  call_ = call;
  n_ = n;
  done_.store(0, std::memory_order_relaxed);
  const uint64_t generation = ++generation_ & 0xffffffffu;
  work_.store((generation << 32) | (static_cast<uint64_t>(n_chunks) << 16), std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) {
    { std::lock_guard<std::mutex> lock(mu_); }
    cv_.notify_all();
  }
  run_chunks(generation, 0);
  for (int spins = 0; done_.load(std::memory_order_acquire) != n_chunks; ++spins) {
    if (spins < kWaitSpinsBeforeYield) {
      cpu_relax();
    } else {
      std::this_thread::yield();
    }
  }
  fn_ = nullptr;
  call_ = nullptr;
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    // stop_ ends every wait: the destructor's generation may be the one `seen` already took (read
    // after this loop's last stop check), and then no later change of work_ would wake us.
    int spins = 0;
    while (!stop_.load() && (work_.load(std::memory_order_acquire) >> 32) == seen && spins < kSpinPolls) {
      cpu_relax();
      ++spins;
    }
    if (!stop_.load() && (work_.load(std::memory_order_acquire) >> 32) == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      cv_.wait(lock, [&] { return stop_.load() || (work_.load(std::memory_order_seq_cst) >> 32) != seen; });
      sleepers_.fetch_sub(1, std::memory_order_seq_cst);
    }
    if (stop_.load()) return;
    seen = work_.load(std::memory_order_acquire) >> 32;
    run_chunks(seen, index);
  }
}

}  // namespace nanoserve
