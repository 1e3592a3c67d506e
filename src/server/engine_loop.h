#pragma once
// The engine thread. It runs the Engine's steps and streams each request's
// outputs into its RequestStream. HTTP threads hand requests straight to the
// Engine (add_request and abort are thread-safe; the Engine's own queue is
// the only one) and read their RequestStream.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "engine/engine.h"
#include "server/metrics.h"
#include "server/protocol.h"
#include "server/request_stream.h"
#include "server/stats_log.h"

namespace nanoserve::server {

// One choice of an HTTP request, before it becomes the Engine's request.
struct EngineRequest {
  std::vector<int32_t> prompt;  // token ids, non-empty
  SamplingParams params;        // as parsed, max_tokens resolved against the context, n = 1
};

class EngineLoop {
 public:
  struct Options {
    // Sequences that may wait in the Engine before submit refuses with RESOURCE_EXHAUSTED.
    int64_t max_waiting = 256;
    // The periodic statistics line (server/stats_log.h) every this many seconds while busy;
    // 0: none (--disable-log-stats).
    double log_stats_interval_s = 0.0;
  };

  // A submitted request: its stream and the Engine's ids of its choices (0
  // for a choice the Engine refused; its stream got a rejected finish event).
  struct Handle {
    std::shared_ptr<RequestStream> stream;
    std::vector<RequestId> ids;
  };

  // `engine` must outlive the loop; only the loop's thread steps it.
  EngineLoop(Engine& engine, ServerMetrics& metrics, Options options);
  ~EngineLoop();
  EngineLoop(const EngineLoop&) = delete;
  EngineLoop& operator=(const EngineLoop&) = delete;

  void start();
  // Finishes every request still held with kAbort (and aborts it in the Engine), then joins the thread.
  void stop();

  // HTTP threads. `choices` share one stream (choice i is choices[i]).
  // RESOURCE_EXHAUSTED when the Engine's waiting queue is full, INVALID_ARGUMENT when it could
  // never hold this many choices at once (more than max_waiting); a choice the
  // Engine refuses (INVALID_ARGUMENT) is finished at once as rejected.
  StatusOr<Handle> submit(std::vector<EngineRequest> choices);
  // HTTP threads: aborts whatever of the handle's choices is unfinished (no-op
  // otherwise); the Engine frees their blocks and reports them at its next step.
  void abort(const Handle& handle);

  // Steps run so far (for tests that wait for the loop to catch up).
  uint64_t num_steps() const { return num_steps_.load(); }

 private:
  // What the choices of one request share: how many are unfinished, and the most tokens one made.
  struct RequestTally {
    int unfinished = 0;
    int64_t max_generation_tokens = 0;
  };
  struct Tracked {
    std::shared_ptr<RequestStream> stream;
    int choice = 0;
    std::chrono::steady_clock::time_point last_token;
    std::shared_ptr<RequestTally> tally;
  };

  void run();
  void handle_outputs(const std::vector<RequestOutput>& outputs);
  // Under mu_: the choice's last event and its metrics; the caller untracks it.
  void finish_locked(Tracked& t, const RequestOutput& o, const std::string& error);
  // The request-level histograms of a choice that finished with output `o`, at `now`.
  void observe_finished(Tracked& t, const RequestOutput& o, std::chrono::steady_clock::time_point now);
  void update_gauges();

  Engine& engine_;
  ServerMetrics& metrics_;
  const Options options_;

  std::mutex mu_;  // tracked_ and stopping_: a request is tracked before its first step can run
  std::unordered_map<RequestId, Tracked> tracked_;
  bool stopping_ = false;
  std::atomic<bool> stop_flag_{false};

  // Engine thread only.
  std::vector<RequestOutput> outputs_;
  int64_t last_preemptions_ = 0, last_prefix_queries_ = 0, last_prefix_hits_ = 0;
  int64_t last_swap_preemptions_ = 0, last_swapped_out_blocks_ = 0, last_swapped_in_blocks_ = 0;
  int64_t last_recomputed_tokens_ = 0;
  int64_t last_spec_drafts_ = 0, last_spec_draft_tokens_ = 0, last_spec_accepted_ = 0;
  std::vector<int64_t> last_spec_per_pos_;
  std::atomic<uint64_t> num_steps_{0};
  StatsLog stats_log_;

  std::thread thread_;
};

}  // namespace nanoserve::server
