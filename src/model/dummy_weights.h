#pragma once
// Random weights of a given shape (--load-format dummy), for benchmarks and
// tests that need no real model. Deterministic: a tensor's values depend only
// on its name, its shape and the seed. Matrices are f32, uniform in
// [-1/sqrt(K), 1/sqrt(K)] (K = the input width), so activations stay of order
// one through the layers; norm weights are 1, biases and attention sinks 0.
// Built in memory on request, so a CPU model checks first that they fit
// (TensorSource::materializes).

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "io/tensor_source.h"
#include "model/config.h"

namespace nanoserve {

class DummyTensors final : public TensorSource {
 public:
  DummyTensors(ModelConfig config, std::string shape_name, uint64_t seed)
      : config_(std::move(config)), shape_name_(std::move(shape_name)), seed_(seed) {}

  std::string describe() const override;
  bool contains(std::string_view name) const override;
  StatusOr<Tensor> tensor(std::string_view name) const override;
  bool materializes() const override { return true; }

 private:
  // The shape of a llama tensor by its GGUF name; empty if not one.
  std::vector<int64_t> shape_of(std::string_view name) const;

  ModelConfig config_;
  std::string shape_name_;
  uint64_t seed_;
};

// Bytes of memory the system can still give (MemAvailable), or -1 if unknown.
int64_t available_memory_bytes();

}  // namespace nanoserve
