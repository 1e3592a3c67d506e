#pragma once
// The real Engine behind the server's ServingEngine interface: maps the
// server's request ids to the engine's, GenerationParams to SamplingParams,
// and each RequestOutput to one EngineOutput per new token.

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "engine/engine.h"
#include "server/serving_engine.h"

namespace nanoserve::server {

// The engine's sampling parameters for one server request (n is fanned out by the server).
SamplingParams to_sampling_params(const GenerationParams& params, const std::vector<std::string>& stop);

class EngineAdapter final : public ServingEngine {
 public:
  // `engine` must outlive the adapter.
  explicit EngineAdapter(Engine& engine) : engine_(engine) { outputs_.reserve(256); }

  Status add_request(EngineRequest request) override;
  void abort(uint64_t id) override;
  bool has_unfinished() const override { return engine_.has_unfinished(); }
  Status step(std::vector<EngineOutput>* outputs) override;
  EngineStats stats() const override;

 private:
  Engine& engine_;
  std::unordered_map<RequestId, uint64_t> to_server_;  // engine id -> server id
  std::unordered_map<uint64_t, RequestId> to_engine_;  // server id -> engine id
  std::vector<RequestOutput> outputs_;                 // reused every step
};

}  // namespace nanoserve::server
