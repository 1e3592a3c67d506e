// No heap allocation in a steady decode step: the real default model through
// the Engine (scheduler, block manager, paged KV storage, sampler,
// detokenizer), at batch 1 and batch 8. Every operator new and malloc of the
// process (any thread) is counted while a window is open.

#include <gtest/gtest.h>
#include <malloc.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <vector>

#include "engine/load_engine.h"

// AddressSanitizer owns malloc and operator new, so the counting replacements
// below are left out of a sanitized build and these tests skip there.
#if defined(__SANITIZE_ADDRESS__)
#define NS_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define NS_UNDER_ASAN 1
#endif
#endif

namespace {

std::atomic<bool> g_counting{false};
std::atomic<int64_t> g_allocs{0};

inline void note() {
  if (g_counting.load(std::memory_order_relaxed)) g_allocs.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

#ifndef NS_UNDER_ASAN
extern "C" {
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);

void* malloc(size_t n) {
  note();
  return __libc_malloc(n);
}
void* calloc(size_t a, size_t b) {
  note();
  return __libc_calloc(a, b);
}
void* realloc(void* p, size_t n) {
  note();
  return __libc_realloc(p, n);
}
void* aligned_alloc(size_t align, size_t n) {
  note();
  return __libc_memalign(align, n);
}
int posix_memalign(void** out, size_t align, size_t n) {
  note();
  *out = __libc_memalign(align, n);
  return *out != nullptr ? 0 : ENOMEM;
}
}

// operator new goes through malloc in libstdc++, but may be inlined or
// replaced: count it here too, and route it to malloc without counting twice.
void* operator new(size_t n) {
  note();
  void* p = __libc_malloc(n == 0 ? 1 : n);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
void* operator new[](size_t n) { return operator new(n); }
void* operator new(size_t n, std::align_val_t a) {
  note();
  void* p = __libc_memalign(static_cast<size_t>(a), n == 0 ? 1 : n);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
void* operator new[](size_t n, std::align_val_t a) { return operator new(n, a); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t, std::align_val_t) noexcept { std::free(p); }
#endif  // NS_UNDER_ASAN

namespace nanoserve {
namespace {

const char* kModelPath = NS_SOURCE_DIR "/models/SmolLM2-135M-Instruct.Q4_1.gguf";

// Allocations over `steps` decode steps of `batch` sequences, after warm-up.
int64_t allocations_per_decode_window(int batch, int steps) {
  ThreadPool pool(2);
  EngineConfig c;
  c.max_num_seqs = 8;
  c.max_num_batched_tokens = 256;
  c.num_blocks = 256;
  c.max_model_len = 512;
  StatusOr<LoadedEngine> le = load_engine(kModelPath, c, pool);
  EXPECT_TRUE(le.ok()) << le.status().to_string();
  if (!le.ok()) return -1;
  Engine& e = *le->engine;
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = 200;
  p.ignore_eos = true;
  for (int b = 0; b < batch; ++b) {
    std::vector<int32_t> prompt;
    for (int i = 0; i < 12 + b; ++i) prompt.push_back(1 + (i * 131 + b * 17) % 4000);
    EXPECT_TRUE(e.add_request(prompt, p).ok());
  }
  std::vector<RequestOutput> outs;
  // Prefill, then enough decodes that every buffer has reached its steady size
  // (a 16-token block boundary is crossed inside the window too).
  for (int i = 0; i < 20; ++i) EXPECT_TRUE(e.step(outs).ok());
  g_allocs.store(0);
  g_counting.store(true);
  for (int i = 0; i < steps; ++i) {
    const Status st = e.step(outs);
    if (!st.ok()) break;
  }
  g_counting.store(false);
  EXPECT_EQ(static_cast<int>(outs.size()), batch) << "every sequence decoded in the last step";
  return g_allocs.load();
}

TEST(DecodeAllocations, NoneInFiftySteadyStepsAtBatch1) {
#ifdef NS_UNDER_ASAN
  GTEST_SKIP() << "the allocation counter replaces malloc, which AddressSanitizer owns";
#endif
  const int64_t n = allocations_per_decode_window(1, 50);
  std::printf("allocations in 50 decode steps at batch 1: %lld\n", static_cast<long long>(n));
  EXPECT_EQ(n, 0);
}

TEST(DecodeAllocations, NoneInFiftySteadyStepsAtBatch8) {
#ifdef NS_UNDER_ASAN
  GTEST_SKIP() << "the allocation counter replaces malloc, which AddressSanitizer owns";
#endif
  const int64_t n = allocations_per_decode_window(8, 50);
  std::printf("allocations in 50 decode steps at batch 8: %lld\n", static_cast<long long>(n));
  EXPECT_EQ(n, 0);
}

}  // namespace
}  // namespace nanoserve
