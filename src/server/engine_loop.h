#pragma once
// The engine thread. HTTP threads never touch the engine: they submit through
// a mutex-guarded inbox and read their RequestStream. The loop drains the
// inbox (adds, then aborts) before every step, so an abort frees its blocks
// before the next step runs.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "server/metrics.h"
#include "server/request_stream.h"
#include "server/serving_engine.h"

namespace nanoserve::server {

class EngineLoop {
 public:
  struct Options {
    // Sequences that may wait (queued here or in the engine) before submit refuses with RESOURCE_EXHAUSTED.
    int64_t max_waiting = 256;
  };

  // A submitted request: its stream and the engine ids of its choices.
  struct Handle {
    std::shared_ptr<RequestStream> stream;
    std::vector<uint64_t> ids;
  };

  EngineLoop(ServingEngine& engine, ServerMetrics& metrics, Options options);
  ~EngineLoop();
  EngineLoop(const EngineLoop&) = delete;
  EngineLoop& operator=(const EngineLoop&) = delete;

  void start();
  // Finishes every request still held with kAbort, then joins the thread.
  void stop();

  // HTTP threads. `choices` share one stream (choice i is choices[i]); ids are
  // assigned here. RESOURCE_EXHAUSTED when the waiting queue is full.
  StatusOr<Handle> submit(std::vector<EngineRequest> choices);
  // HTTP threads: aborts whatever of the handle's choices is unfinished (no-op otherwise).
  void abort(const Handle& handle);

  // Steps run so far (for tests that wait for the loop to catch up).
  uint64_t num_steps() const { return num_steps_.load(); }

 private:
  struct Tracked {
    std::shared_ptr<RequestStream> stream;
    int choice = 0;
    std::chrono::steady_clock::time_point arrival;
    std::chrono::steady_clock::time_point last_token;
    bool has_token = false;
  };
  struct Pending {
    EngineRequest request;
    Tracked tracked;
  };

  void run();
  void drain_inbox();
  void handle_outputs(const std::vector<EngineOutput>& outputs);
  void fail_all(const std::string& message);
  void finish(uint64_t id, FinishReason reason, const std::string& error = {}, bool rejected = false);
  void update_gauges();

  ServingEngine& engine_;
  ServerMetrics& metrics_;
  const Options options_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Pending> inbox_adds_;
  std::vector<uint64_t> inbox_aborts_;
  bool stopping_ = false;
  uint64_t next_id_ = 1;
  std::atomic<int64_t> engine_waiting_{0};  // engine's waiting count after the last step

  // Engine thread only.
  std::unordered_map<uint64_t, Tracked> tracked_;
  std::vector<EngineOutput> outputs_;
  std::atomic<uint64_t> num_steps_{0};

  std::thread thread_;
};

}  // namespace nanoserve::server
