#pragma once
// The CUDA tests' first line: without a CUDA device (or without a driver)
// the test reports SKIPPED with the reason, never passed.

#include <gtest/gtest.h>

#include <string>

#include "core/cuda/device_memory.cuh"

#define NS_SKIP_WITHOUT_GPU()                               \
  do {                                                      \
    std::string ns_skip_why;                                \
    if (::nanoserve::cuda::device_count(&ns_skip_why) == 0) \
      GTEST_SKIP() << "no CUDA device: " << ns_skip_why;    \
  } while (0)
