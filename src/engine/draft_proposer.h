#pragma once
// Proposals from a draft model (docs/speculative.md): a smaller model with
// the target's vocabulary, run by its own ModelRunner on the same device,
// with its own paged KV storage and its own block manager.
//
// Per request it keeps the tokens whose K/V its cache holds. Before each
// proposal it finds how many of them still agree with the request (the
// target's accepted tokens), rolls its cache back to that (BlockManager::
// shrink_to; when the agreeing tokens' window would need blocks it released
// behind its window, it starts the request afresh), feeds the rest of the
// request's tokens, and then decodes k
// greedy tokens: one forward per token, batched over the requests. The last
// proposal is never fed, so after a proposal of k the cache holds the
// request's tokens plus the first k - 1 proposals.
//
// Proposals are the draft's argmax (ties to the lowest id): a point mass, so
// the engine's check needs no draft distribution and a sampled request's
// tokens are those it would draw without proposals (engine/speculative.h). A request the
// draft cache cannot hold is simply given no proposals: the draft never
// preempts anything.

#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/speculative.h"
#include "kvcache/block_manager.h"
#include "model/model_runner.h"
#include "step/forward_batch.h"

namespace nanoserve {

class DraftProposer final : public Proposer {
 public:
  // Creates the draft's KV storage (num_blocks of block_size tokens) and its
  // block manager. INVALID_ARGUMENT when the vocabularies differ. `keep` is
  // held for the runner's life (what its weights view, e.g. the mapped file).
  // A draft model whose every layer slides releases the blocks behind its
  // window, as the target's cache does (EngineConfig::release_window_blocks).
  static StatusOr<std::unique_ptr<DraftProposer>> create(std::unique_ptr<ModelRunner> runner,
                                                         int64_t target_vocab, int32_t num_blocks,
                                                         int32_t block_size, int32_t max_num_seqs,
                                                         int64_t max_seq_len, std::shared_ptr<void> keep = {},
                                                         bool release_window_blocks = true);

  bool cheap() const override { return false; }
  Status propose(std::span<Request* const> reqs, std::span<const int32_t> k) override;
  void release(RequestId id) override;

  const BlockManager& block_manager() const { return blocks_; }
  int64_t num_forwards() const { return num_forwards_; }
  int64_t tokens_computed() const { return tokens_computed_; }
  ModelRunner& runner() { return *runner_; }

 private:
  struct State {
    int32_t seq = -1;
    std::vector<int32_t> tokens;  // whose K/V the draft cache holds, in order
  };
  struct Pending {  // one request during one propose()
    Request* request = nullptr;
    State* state = nullptr;
    int32_t want = 0;  // proposals still to make
    int64_t fed = 0;   // of the request's tokens, how many are in the cache or this step
  };

  DraftProposer(std::unique_ptr<ModelRunner> runner, const BlockManagerConfig& bc,
                std::shared_ptr<void> keep);
  // Frees the state of every request not in `keep` (they are not decoding now).
  void evict_except(std::span<Request* const> keep);
  State* state_for(Request* r, std::span<Request* const> all);

  std::shared_ptr<void> keep_;
  std::unique_ptr<ModelRunner> runner_;
  StepLimits limits_;
  BlockManager blocks_;
  std::unordered_map<RequestId, State> states_;
  ForwardBatch batch_;
  std::vector<Pending> pending_;
  std::vector<int32_t> row_of_;  // [pending] its logits row this forward, or -1
  int64_t num_forwards_ = 0, tokens_computed_ = 0;
};

}  // namespace nanoserve
