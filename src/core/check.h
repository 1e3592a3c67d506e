#pragma once
// NS_CHECK(cond) << "context";  aborts with file:line when an internal invariant breaks.
// Never use it for anything a user or a file can get wrong: that is a Status.

#include <sstream>

namespace nanoserve::detail {

class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* cond);
  [[noreturn]] ~CheckFailure();
  template <typename T>
  CheckFailure& operator<<(const T& v) {
    stream_ << v;
    return *this;
  }

 private:
  std::ostringstream stream_;
};

// Lets `NS_CHECK(c) << x;` be an expression statement of type void.
struct CheckVoidify {
  void operator&(const CheckFailure&) {}
};

}  // namespace nanoserve::detail

#define NS_CHECK(cond)                                    \
  (cond) ? (void)0                                        \
         : ::nanoserve::detail::CheckVoidify() &          \
               ::nanoserve::detail::CheckFailure(__FILE__, __LINE__, #cond)

#define NS_CHECK_EQ(a, b) NS_CHECK((a) == (b)) << "(" << (a) << " vs " << (b) << ") "
#define NS_CHECK_LT(a, b) NS_CHECK((a) < (b)) << "(" << (a) << " vs " << (b) << ") "
#define NS_CHECK_LE(a, b) NS_CHECK((a) <= (b)) << "(" << (a) << " vs " << (b) << ") "
