#pragma once
// A bound on the memory that parsing request bodies takes at once.
//
// nlohmann/json's tree costs up to about 40 times the body it was parsed from
// (kParseExpansion, measured: docs/http.md), and every HTTP thread may be
// parsing a body of up to 4 MiB. So parsing is metered: a parse holds a Lease
// on as many bytes of the budget as its body has, and gives them back when the
// lease ends. A body that does not fit waits up to `max_wait` for room, and is
// then refused (the server answers 503). Peak parse memory is about
// capacity_bytes * kParseExpansion whatever the number of threads.
//
// Small bodies, the common case, never wait behind big ones: a body larger than
// `small_body_bytes` may only take the budget while `small_reserve_bytes` stay
// free, so small bodies wait only when other small ones fill the reserve.

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>

namespace nanoserve::server {

// Bytes of nlohmann/json tree per byte of body, at worst (4 MiB of `{},` -> 171 MB).
inline constexpr size_t kParseExpansion = 40;

class ParseBudget {
 public:
  struct Options {
    size_t capacity_bytes = size_t{16} << 20;      // body bytes being parsed at once
    size_t small_body_bytes = size_t{64} << 10;    // up to this, a body may use the reserve
    size_t small_reserve_bytes = size_t{1} << 20;  // kept free of bodies above small_body_bytes
    std::chrono::milliseconds max_wait{1000};      // how long a body waits for room
  };

  // Holds `bytes()` of the budget until destroyed (or moved from). Empty when refused.
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& other) noexcept;
    Lease& operator=(Lease&& other) noexcept;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() { release(); }

    bool held() const { return budget_ != nullptr; }
    size_t bytes() const { return bytes_; }
    void release();  // gives the bytes back now; idempotent

   private:
    friend class ParseBudget;
    Lease(ParseBudget* budget, size_t bytes) : budget_(budget), bytes_(bytes) {}
    ParseBudget* budget_ = nullptr;
    size_t bytes_ = 0;
  };

  // NS_CHECKs small_reserve_bytes < capacity_bytes.
  explicit ParseBudget(Options options);
  ParseBudget(const ParseBudget&) = delete;
  ParseBudget& operator=(const ParseBudget&) = delete;

  // Takes `body_bytes` of the budget, waiting up to max_wait for room. An empty
  // lease when it did not fit in time, or at once when it never could (a body
  // above max_body_bytes()).
  Lease acquire(size_t body_bytes);

  // The largest body that can ever be admitted: capacity minus the small reserve.
  size_t max_body_bytes() const { return options_.capacity_bytes - options_.small_reserve_bytes; }
  const Options& options() const { return options_; }
  size_t in_use() const;

 private:
  bool fits(size_t body_bytes) const;  // mu_ held
  void give_back(size_t bytes);

  const Options options_;
  mutable std::mutex mu_;
  std::condition_variable freed_;
  size_t in_use_ = 0;
};

}  // namespace nanoserve::server
