#pragma once
// A byte-level codec and a scripted engine, so the server can be tested
// without a model. Header-only: test helpers are not compiled on their own.
//
// FakeCodec: ids 0..255 are bytes; 256 is end-of-sequence, 257/258 are the
// chat markers <|im_start|>/<|im_end|>. FakeEngine generates by echoing the
// prompt cyclically, one token per running sequence per step, so a test knows
// exactly what each request must return.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/model_codec.h"
#include "server/serving_engine.h"

namespace nanoserve::server::testing {

inline constexpr int32_t kFakeEos = 256;
inline constexpr int32_t kFakeImStart = 257;
inline constexpr int32_t kFakeImEnd = 258;
inline constexpr int64_t kFakeVocab = 259;

class FakeCodec : public ModelCodec {
 public:
  StatusOr<std::vector<int32_t>> encode(std::string_view text, bool) const override {
    std::vector<int32_t> ids;
    for (unsigned char c : text) ids.push_back(c);
    return ids;
  }
  StatusOr<std::vector<int32_t>> encode_chat(const std::vector<ChatMessage>& messages,
                                             bool add_generation_prompt) const override {
    std::vector<int32_t> ids;
    auto add = [&](const std::string& s) {
      for (unsigned char c : s) ids.push_back(c);
    };
    for (const ChatMessage& m : messages) {
      ids.push_back(kFakeImStart);
      add(m.role + "\n" + m.content);
      ids.push_back(kFakeImEnd);
    }
    if (add_generation_prompt) {
      ids.push_back(kFakeImStart);
      add("assistant\n");
    }
    return ids;
  }
  std::string decode(std::span<const int32_t> ids) const override {
    std::string s;
    for (int32_t id : ids) s += token_text(id);
    return s;
  }
  std::string token_text(int32_t id) const override {
    if (id < 256) return std::string(1, static_cast<char>(id));
    if (id == kFakeEos) return "";
    return id == kFakeImStart ? "<|im_start|>" : "<|im_end|>";
  }
  int64_t vocab_size() const override { return kFakeVocab; }
};

class FakeEngine : public ServingEngine {
 public:
  // Sequences beyond max_running wait; each holds ceil(tokens / block_size) of num_blocks blocks.
  int max_running = 64;
  int block_size = 4;
  int num_blocks = 4096;
  std::atomic<int> step_delay_ms{0};
  std::atomic<bool> fail_next_step{false};

  Status add_request(EngineRequest r) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (r.prompt.empty()) return invalid_argument("empty prompt");
    uint64_t id = r.id;
    params_seen_[id] = r.params;
    Seq s;
    s.req = std::move(r);
    seqs_.emplace(id, std::move(s));
    order_.push_back(id);
    ++added_;
    return Status();
  }

  void abort(uint64_t id) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (seqs_.erase(id) > 0) {
      aborted_.push_back(id);
      order_.erase(std::remove(order_.begin(), order_.end(), id), order_.end());
    }
  }

  bool has_unfinished() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return !seqs_.empty();
  }

  Status step(std::vector<EngineOutput>* outputs) override {
    if (int d = step_delay_ms.load(); d > 0) std::this_thread::sleep_for(std::chrono::milliseconds(d));
    if (fail_next_step.exchange(false)) return internal_error("injected device failure");
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<uint64_t> done;
    int running = 0;
    for (uint64_t id : order_) {
      if (running++ >= max_running) break;
      Seq& s = seqs_.at(id);
      const std::vector<int32_t>& p = s.req.prompt;
      int32_t token = p[s.generated.size() % p.size()];
      s.generated.push_back(token);
      EngineOutput out;
      out.id = id;
      out.token = token;
      if (s.req.params.top_logprobs >= 0) {
        out.logprob = -0.25f;
        for (int k = 0; k < s.req.params.top_logprobs; ++k) {
          out.top_logprobs.push_back(TopLogprob{(token + 1 + k) % 256, -1.0f - static_cast<float>(k)});
        }
      }
      if (token == kFakeEos && !s.req.params.ignore_eos) {
        out.finish = FinishReason::kStop;
      } else {
        s.pending += codec_.token_text(token);
        // Stop strings: cut at the first match; otherwise hold back a suffix that could still become one.
        size_t cut = std::string::npos;
        for (const std::string& stop : s.req.stop) cut = std::min(cut, s.pending.find(stop));
        if (cut != std::string::npos) {
          out.text = s.pending.substr(0, cut);
          out.finish = FinishReason::kStop;
        } else {
          size_t hold = 0;
          for (const std::string& stop : s.req.stop) {
            for (size_t k = std::min(stop.size() - 1, s.pending.size()); k > hold; --k) {
              if (s.pending.compare(s.pending.size() - k, k, stop, 0, k) == 0) {
                hold = k;
                break;
              }
            }
          }
          out.text = s.pending.substr(0, s.pending.size() - hold);
          s.pending.erase(0, s.pending.size() - hold);
          if (static_cast<int64_t>(s.generated.size()) >= *s.req.params.max_tokens) {
            out.text += s.pending;
            out.finish = FinishReason::kLength;
          }
        }
      }
      if (out.finish != FinishReason::kNone) done.push_back(id);
      outputs->push_back(std::move(out));
    }
    for (uint64_t id : done) {
      seqs_.erase(id);
      order_.erase(std::remove(order_.begin(), order_.end(), id), order_.end());
    }
    return Status();
  }

  EngineStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    EngineStats st;
    int64_t used = 0;
    int running = 0;
    for (uint64_t id : order_) {
      if (running++ >= max_running) break;
      const Seq& s = seqs_.at(id);
      int64_t tokens = static_cast<int64_t>(s.req.prompt.size() + s.generated.size());
      used += (tokens + block_size - 1) / block_size;
    }
    st.num_running = std::min<int64_t>(static_cast<int64_t>(order_.size()), max_running);
    st.num_waiting = static_cast<int64_t>(order_.size()) - st.num_running;
    st.kv_cache_usage = static_cast<double>(used) / num_blocks;
    return st;
  }

  std::vector<uint64_t> aborted() const {
    std::lock_guard<std::mutex> lock(mu_);
    return aborted_;
  }
  int64_t num_added() const {
    std::lock_guard<std::mutex> lock(mu_);
    return added_;
  }
  size_t num_unfinished() const {
    std::lock_guard<std::mutex> lock(mu_);
    return seqs_.size();
  }
  // The last params an added request carried, by id.
  std::map<uint64_t, GenerationParams> params_seen() const {
    std::lock_guard<std::mutex> lock(mu_);
    return params_seen_;
  }

 private:
  struct Seq {
    EngineRequest req;
    std::vector<int32_t> generated;
    std::string pending;  // text not yet emitted
  };
  FakeCodec codec_;
  mutable std::mutex mu_;
  std::map<uint64_t, Seq> seqs_;
  std::vector<uint64_t> order_;  // arrival order
  std::vector<uint64_t> aborted_;
  std::map<uint64_t, GenerationParams> params_seen_;
  int64_t added_ = 0;
};

}  // namespace nanoserve::server::testing
