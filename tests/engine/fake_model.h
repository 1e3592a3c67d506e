#pragma once
// A fake model for engine tests: fast, and an exact oracle.
//
// It stores (token, position) as the K/V of every token in real paged pool
// tensors that it owns, as a runner does, written and gathered by the CPU KV
// ops (ops/paged_attention/paged_kv.h), addressed by the batch's slots and
// block tables; for each logits row it reads that token's history (every
// position up to and including it) back through the block table, checks the
// positions, and derives the logits from a hash of the history's tokens. So its output depends on exactly
// what the cache holds: a wrong slot, a shared block or a bad recompute changes the tokens, and fake_greedy()
// predicts the right ones without any engine.
//
// With a sliding window (set_window), a row's logits hash only the last
// `window` tokens, and it reads (and checks the positions of) the window and
// the margin before it, as a kernel that starts early would: a block released
// while still read shows up as a wrong position.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/check.h"
#include "model/model_runner.h"
#include "engine/rng.h"
#include "engine/sampler.h"
#include "engine/text_stream.h"
#include "core/thread_pool.h"
#include "ops/paged_attention/paged_kv.h"

namespace nanoserve::testing {

inline ModelConfig fake_config(int32_t vocab, int64_t context_length = 1 << 20) {
  ModelConfig c;
  c.arch = "fake";
  c.n_layers = 1;
  c.dim = 2;
  c.n_heads = 1;
  c.n_kv_heads = 1;
  c.head_dim = 2;
  c.rope_dim = 2;
  c.ffn_dim = 2;
  c.vocab_size = vocab;
  c.context_length = context_length;
  return c;
}

inline uint64_t history_hash(std::span<const int32_t> tokens, uint64_t salt = 0) {
  uint64_t h = 1469598103934665603ull ^ salt;
  for (int32_t t : tokens) h = (h ^ static_cast<uint64_t>(t + 1)) * 1099511628211ull;
  return h;
}

// The logits the fake model gives after `tokens`: [vocab] in (-4, 4).
// A non-zero salt gives another model over the same vocabulary (a draft that disagrees).
inline void fake_logits(std::span<const int32_t> tokens, int32_t vocab, float* out, uint64_t salt = 0) {
  Rng rng(history_hash(tokens, salt));
  for (int32_t v = 0; v < vocab; ++v) out[v] = static_cast<float>(8.0 * rng.next_double() - 4.0);
}

// The tokens a row with this history attends: the last `window` (0: all).
inline std::span<const int32_t> fake_window(std::span<const int32_t> tokens, int64_t window) {
  return window > 0 && static_cast<int64_t>(tokens.size()) > window ? tokens.last(static_cast<size_t>(window))
                                                                    : tokens;
}

// What greedy decoding of the fake model gives, stopping on `eos` (if >= 0).
inline std::vector<int32_t> fake_greedy(std::vector<int32_t> tokens, int32_t vocab, int32_t max_tokens,
                                        int32_t eos, int64_t window = 0) {
  std::vector<int32_t> out;
  std::vector<float> l(vocab);
  for (int32_t i = 0; i < max_tokens; ++i) {
    fake_logits(fake_window(tokens, window), vocab, l.data());
    int32_t best = 0;
    for (int32_t v = 1; v < vocab; ++v) best = l[v] > l[best] ? v : best;
    out.push_back(best);
    tokens.push_back(best);
    if (best == eos) break;
  }
  return out;
}

class FakeModel final : public ModelRunner {
 public:
  // max_logits_rows: R of its StepLimits, at least max_seqs (0: max_seqs); more
  // lets a step score prompt rows or proposed tokens (speculative decoding).
  // salt: 0 is the model that fake_greedy() predicts; another value is a
  // different model.
  FakeModel(int32_t vocab, int32_t max_tokens_per_step, int32_t max_seqs, int64_t context_length = 1 << 20,
            int32_t max_logits_rows = 0, uint64_t salt = 0)
      : config_(fake_config(vocab, context_length)),
        kv_(Tensor::empty(DType::kF32, {max_tokens_per_step, 1, 2})),
        logits_(Tensor::empty(DType::kF32, {std::max(max_seqs, max_logits_rows), vocab})),
        sampler_(vocab),
        max_seqs_(max_seqs),
        salt_(salt) {}

  // Acts as a runner that samples on the device (ops/sample/sample.h): a step
  // with sample_rows is drawn by the CPU Sampler with each row's uniform
  // (Sampler::sample_uniform, what the device must equal), except every
  // hand_back_every-th sampled row (0: none), which comes back as
  // kSampleOnHost for the engine to draw.
  void emulate_device_sampling(int hand_back_every) {
    device_sampling_ = true;
    hand_back_every_ = hand_back_every;
  }
  int64_t device_steps() const { return device_steps_; }  // forwards with sample_rows
  int64_t host_steps() const { return host_steps_; }      // forwards that returned logits to sample
  int64_t handed_back() const { return handed_back_; }
  bool samples_on_device() const override { return device_sampling_; }
  std::span<const int32_t> sampled_tokens() const override { return sampled_; }
  std::span<const SampleRowLogprobs> sampled_logprobs() const override { return sampled_lp_; }
  std::span<const float> logits_row(int32_t row) override {
    check_idle("logits_row()");
    NS_CHECK(row >= 0 && row < last_rows_) << "logits_row " << row;
    return {logits_.data_as<const float>() + static_cast<int64_t>(row) * config_.vocab_size,
            static_cast<size_t>(config_.vocab_size)};
  }

  // Every layer (the one) slides over `window` tokens, and reads `margin`
  // positions before each window. Before the engine is created.
  void set_window(int64_t window, int64_t margin = 0) {
    config_.sliding_window = window;
    margin_ = margin;
  }
  int64_t window_read_margin() const override { return margin_; }

  // Acts as a runner whose steps overlap the host's work (the CUDA runner):
  // launch() keeps a copy of the batch and returns; wait() runs the step. A
  // runner call between the two, or a batch that the engine changed before
  // wait(), fails the test.
  void emulate_overlap() { overlap_ = true; }
  bool overlaps_steps() const override { return overlap_; }
  Status launch(const ForwardBatch& batch) override {
    if (!overlap_) return ModelRunner::launch(batch);
    check_idle("launch()");
    launched_ = &batch;
    launched_copy_ = batch;
    return Status();
  }
  StatusOr<Tensor> wait() override {
    if (!overlap_) return ModelRunner::wait();
    NS_CHECK(launched_ != nullptr) << "wait() without a launch()";
    const ForwardBatch& b = *std::exchange(launched_, nullptr);
    const ForwardBatch& c = launched_copy_;
    NS_CHECK(b.tokens == c.tokens && b.positions == c.positions && b.seq_starts == c.seq_starts &&
             b.seq_ids == c.seq_ids && b.context_lens == c.context_lens && b.block_tables == c.block_tables &&
             b.slot_mapping == c.slot_mapping && b.logits_rows == c.logits_rows &&
             b.sample_rows.size() == c.sample_rows.size())
        << "the batch changed while its step ran";
    return forward(launched_copy_);
  }

  const ModelConfig& config() const override { return config_; }
  int64_t num_forwards() const { return num_forwards_; }
  int64_t max_tokens_seen() const { return max_tokens_seen_; }
  int64_t tokens_computed() const { return tokens_computed_; }  // over all forwards
  // The next forward fails (then forwards work again). Any thread.
  void fail_next_forward() { fail_next_ = true; }
  // Every forward first sleeps this long (tests of a server under load). Any thread.
  std::atomic<int> step_delay_ms{0};

  int64_t kv_bytes_per_block(int32_t block_size) const override {
    return 2 * int64_t{block_size} * config_.n_kv_heads * config_.head_dim * 4;  // one layer, K and V, f32
  }
  Status init_kv_cache(int32_t num_blocks, int32_t block_size) override {
    if (num_blocks < 1 || block_size < 1) return invalid_argument("fake model: empty KV pool");
    k_pool_ = Tensor::empty(DType::kF32, {num_blocks, block_size, 1, 2});
    v_pool_ = Tensor::empty(DType::kF32, {num_blocks, block_size, 1, 2});
    gather_ = Tensor::empty(DType::kF32, {int64_t{num_blocks} * block_size, 1, 2});
    gather_v_ = Tensor::empty(DType::kF32, {int64_t{num_blocks} * block_size, 1, 2});
    limits_.vocab_size = config_.vocab_size;
    limits_.max_tokens = static_cast<int32_t>(kv_.dim(0));
    limits_.max_seqs = max_seqs_;
    limits_.max_logits_rows = static_cast<int32_t>(logits_.dim(0));
    limits_.max_context = std::min<int64_t>(config_.context_length, int64_t{num_blocks} * block_size);
    limits_.num_blocks = num_blocks;
    limits_.block_size = block_size;
    limits_.max_blocks_per_seq = static_cast<int32_t>((limits_.max_context + block_size - 1) / block_size);
    limits_.max_sample_vocab = device_sampling_ ? kSampleMaxVocab : 0;
    return Status();
  }
  StepLimits step_limits() const override { return limits_; }

  // A swap area in its own host tensors, laid out as the pools; the copies
  // move the (token, position) entries, so a block swapped back wrong shows
  // in the oracle's tokens (and as a wrong position).
  bool can_swap() const override { return true; }
  Status init_swap_space(int32_t num_slots) override {
    if (!k_pool_.defined()) return failed_precondition("fake model: swap space before the pool");
    const int64_t bs = k_pool_.dim(1);
    k_swap_ = Tensor::empty(DType::kF32, {num_slots, bs, 1, 2});
    v_swap_ = Tensor::empty(DType::kF32, {num_slots, bs, 1, 2});
    num_slots_ = num_slots;
    return Status();
  }
  Status swap_out(std::span<const BlockCopy> copies) override { return copy(copies, true); }
  Status swap_in(std::span<const BlockCopy> copies) override { return copy(copies, false); }
  SwapCostRates swap_cost_rates() const override { return rates_; }
  void set_swap_cost_rates(SwapCostRates rates) { rates_ = rates; }  // before the engine is created
  int32_t num_swap_slots() const { return num_slots_; }
  int64_t blocks_swapped_out() const { return blocks_out_; }
  int64_t blocks_swapped_in() const { return blocks_in_; }
  // The next swap copy fails (then copies work again).
  void fail_next_swap() { fail_next_swap_ = true; }

  StatusOr<Tensor> forward(const ForwardBatch& batch) override {
    NS_CHECK(k_pool_.defined()) << "forward before init_kv_cache";
    check_idle("forward()");
    if (const int d = step_delay_ms.load(); d > 0) std::this_thread::sleep_for(std::chrono::milliseconds(d));
    if (fail_next_.exchange(false)) return internal_error("fake model: failing this forward, as asked");
    // The engine validated the batch; a fake that checked less than a runner
    // would hide a batch the engine should never have sent.
    NS_RETURN_IF_ERROR(batch.validate(limits_));
    ++num_forwards_;
    const int32_t T = batch.num_tokens();
    tokens_computed_ += T;
    max_tokens_seen_ = std::max<int64_t>(max_tokens_seen_, T);
    Tensor kv = kv_.slice_rows(0, T);
    float* p = kv.data_as<float>();
    for (int32_t t = 0; t < T; ++t) {
      p[2 * t] = static_cast<float>(batch.tokens[t]);
      p[2 * t + 1] = static_cast<float>(batch.positions[t]);
    }
    paged_kv_write(kv, kv, batch, k_pool_, v_pool_);
    int64_t total = 0;
    for (int32_t c : batch.context_lens) total += c;
    if (total > gather_.dim(0)) {  // shared prefix blocks: histories longer than the pool
      gather_ = Tensor::empty(DType::kF32, {total, 1, 2});
      gather_v_ = Tensor::empty(DType::kF32, {total, 1, 2});
    }
    paged_kv_gather(k_pool_, v_pool_, batch, gather_, gather_v_, hist_, pool_, gather_scratch_);
    const KVHistory& h = hist_;
    const int32_t R = static_cast<int32_t>(batch.logits_rows.size());
    const int32_t vocab = static_cast<int32_t>(config_.vocab_size);
    int32_t b = 0;
    for (int32_t r = 0; r < R; ++r) {
      const int32_t row = batch.logits_rows[r];
      while (batch.seq_starts[b + 1] <= row) ++b;
      // Any token row of its sequence: the history up to and including it.
      const int32_t ctx = batch.positions[row] + 1;
      NS_CHECK(ctx <= batch.context_lens[b]) << "a logits row past its context";
      history_.clear();
      const int64_t window = config_.sliding_window;
      const int32_t first =
          window > 0 ? static_cast<int32_t>(std::max<int64_t>(0, ctx - window - margin_)) : 0;
      for (int32_t pos = first; pos < ctx; ++pos) {
        const float* e = h.k[b] + pos * h.pos_stride;
        NS_CHECK_EQ(static_cast<int32_t>(e[1]), pos);  // the cache gave back this sequence's own slots
        history_.push_back(static_cast<int32_t>(e[0]));
      }
      fake_logits(fake_window(history_, window), vocab,
                  logits_.data_as<float>() + static_cast<int64_t>(r) * vocab, salt_);
    }
    last_rows_ = R;
    sampled_.clear();
    sampled_lp_.clear();
    if (!batch.sample_rows.empty()) {
      NS_CHECK_EQ(static_cast<int32_t>(batch.sample_rows.size()), R);
      NS_CHECK(!batch.need_logits) << "a device-sampled step asked for logits too";
      ++device_steps_;
      for (int32_t r = 0; r < R; ++r) {
        const SampleRowParams& q = batch.sample_rows[r];
        const std::span<const float> row(logits_.data_as<const float>() + static_cast<int64_t>(r) * vocab,
                                         static_cast<size_t>(vocab));
        SamplingParams p;
        p.temperature = q.temperature;
        p.top_k = q.top_k;
        p.top_p = q.top_p;
        p.min_p = q.min_p;
        int32_t token = kSampleOnHost;
        if (q.temperature == 0.0f || hand_back_every_ == 0 || ++num_sampled_ % hand_back_every_ != 0) {
          token = sampler_.sample_uniform(row, p, {}, {}, q.u);
        } else {
          ++handed_back_;
        }
        sampled_.push_back(token);
        SampleRowLogprobs& lp = sampled_lp_.emplace_back();
        if (q.num_logprobs >= 0 && token != kSampleOnHost) {
          std::vector<TokenLogprob> top;
          lp.logprob = sampler_.logprobs(row, token, q.num_logprobs, top);
          lp.n = static_cast<int32_t>(top.size());
          for (int32_t j = 0; j < lp.n; ++j) {
            lp.top_ids[j] = top[j].token;
            lp.top_logprobs[j] = top[j].logprob;
          }
        }
      }
    } else if (R > 0 && batch.need_logits) {
      ++host_steps_;
    }
    return logits_.slice_rows(0, R);
  }

 private:
  ModelConfig config_;
  Tensor kv_;      // [max_tokens_per_step, 1, 2] (token, position)
  Tensor logits_;  // [max(max_seqs, max_logits_rows), vocab]
  std::vector<int32_t> history_;
  Tensor k_pool_, v_pool_;  // [num_blocks, block_size, 1, 2] f32: (token, position) per slot
  Tensor gather_, gather_v_;
  KVHistory hist_;
  std::vector<int64_t> gather_scratch_;
  ThreadPool pool_{1};
  StepLimits limits_;
  Tensor k_swap_, v_swap_;  // [num_slots, block_size, 1, 2] f32
  int32_t num_slots_ = 0;
  SwapCostRates rates_{1e9, 1e3};  // swapping far cheaper than recomputing, as on every real runner
  int64_t blocks_out_ = 0, blocks_in_ = 0;
  bool fail_next_swap_ = false;
  bool overlap_ = false;
  const ForwardBatch* launched_ = nullptr;  // the launched step's batch, until wait()
  ForwardBatch launched_copy_;
  void check_idle(const char* call) const {
    NS_CHECK(launched_ == nullptr) << call << " while a launched step awaits wait()";
  }
  Status copy(std::span<const BlockCopy> copies, bool out) {
    check_idle("a swap copy");
    if (fail_next_swap_) {
      fail_next_swap_ = false;
      return internal_error("fake model: failing this swap copy, as asked");
    }
    NS_CHECK(num_slots_ > 0) << "swap copy without a swap area";
    const int64_t n = k_pool_.dim(1) * 2;  // floats per block
    for (const BlockCopy& c : copies) {
      NS_CHECK(c.block >= 0 && c.block < k_pool_.dim(0) && c.slot >= 0 && c.slot < num_slots_)
          << "swap copy of block " << c.block << " / slot " << c.slot;
      for (int kv = 0; kv < 2; ++kv) {
        float* b = (kv == 0 ? k_pool_ : v_pool_).data_as<float>() + c.block * n;
        float* sl = (kv == 0 ? k_swap_ : v_swap_).data_as<float>() + c.slot * n;
        if (out) {
          std::copy(b, b + n, sl);
        } else {
          std::copy(sl, sl + n, b);
        }
      }
    }
    (out ? blocks_out_ : blocks_in_) += static_cast<int64_t>(copies.size());
    return Status();
  }
  int64_t num_forwards_ = 0;
  int64_t max_tokens_seen_ = 0;
  int64_t tokens_computed_ = 0;
  std::atomic<bool> fail_next_{false};
  Sampler sampler_;
  int32_t max_seqs_;
  int64_t margin_ = 0;
  bool device_sampling_ = false;
  int hand_back_every_ = 0;
  int64_t num_sampled_ = 0, device_steps_ = 0, host_steps_ = 0, handed_back_ = 0;
  int32_t last_rows_ = 0;
  uint64_t salt_;
  std::vector<int32_t> sampled_;
  std::vector<SampleRowLogprobs> sampled_lp_;
};

// Token t reads as one letter, 'a' + t % 26; ids in `eos` end generation.
class FakeText final : public TextStreamFactory {
 public:
  explicit FakeText(std::vector<int32_t> eos) : eos_(std::move(eos)) {}
  std::vector<int32_t> eos_ids() const override { return eos_; }
  std::unique_ptr<TextStream> open(std::span<const int32_t>) const override {
    return std::make_unique<Stream>();
  }
  static std::string text_of(std::span<const int32_t> tokens) {
    std::string s;
    for (int32_t t : tokens) s += static_cast<char>('a' + t % 26);
    return s;
  }

 private:
  struct Stream final : TextStream {
    void push(int32_t token, std::string& out) override { out += static_cast<char>('a' + token % 26); }
  };
  std::vector<int32_t> eos_;
};

}  // namespace nanoserve::testing
