#pragma once
// What the server needs from an engine, as one narrow interface: add, abort,
// step, counters. The real one adapts engine/Engine; tests drive a fake.
// Every call comes from the one engine thread (EngineLoop), never from HTTP threads.

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "server/protocol.h"
#include "server/request_stream.h"

namespace nanoserve::server {

struct EngineRequest {
  uint64_t id = 0;
  std::vector<int32_t> prompt;  // token ids, non-empty
  GenerationParams params;      // params.max_tokens is set (resolved against the context)
  std::vector<std::string> stop;
};

// One sequence's progress in one step.
struct EngineOutput {
  uint64_t id = 0;
  int32_t token = -1;    // the token generated this step; -1 when none (e.g. aborted)
  std::string text;      // newly emitted text (stop strings withheld by the engine)
  float logprob = 0.0f;  // filled when params.top_logprobs >= 0
  std::vector<TopLogprob> top_logprobs;
  FinishReason finish = FinishReason::kNone;
  std::string error;  // with kError: what failed
};

struct EngineStats {
  int64_t num_running = 0;
  int64_t num_waiting = 0;
  double kv_cache_usage = 0.0;  // fraction of KV blocks in use, [0, 1]
  int64_t num_preemptions = 0;  // cumulative
};

class ServingEngine {
 public:
  virtual ~ServingEngine() = default;
  // INVALID_ARGUMENT etc. when the engine refuses the request; it is then not tracked.
  virtual Status add_request(EngineRequest request) = 0;
  // Drops the request and frees its blocks; unknown ids are ignored.
  virtual void abort(uint64_t id) = 0;
  virtual bool has_unfinished() const = 0;
  // One scheduling step. An error means the engine is unusable for the
  // requests it holds; the loop fails them all.
  virtual Status step(std::vector<EngineOutput>* outputs) = 0;
  virtual EngineStats stats() const = 0;
};

}  // namespace nanoserve::server
