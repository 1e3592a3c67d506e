#include "model/runner_cpu.h"

namespace nanoserve {

CpuRunner::CpuRunner(std::unique_ptr<CpuModel> model, const CpuRunnerOptions& options, ThreadPool& pool)
    : model_(std::move(model)),
      options_(options),
      pool_(pool),
      ws_(model_->make_workspace(options.max_tokens, options.max_logits_rows > 0 ? options.max_logits_rows
                                                                                 : options.max_num_seqs)) {}

int64_t CpuRunner::kv_bytes_per_block(int32_t block_size) const {
  return CpuKV::bytes_per_block(model_->config(), block_size, options_.kv_dtype);
}

Status CpuRunner::init_kv_cache(int32_t num_blocks, int32_t block_size) {
  if (kv_ != nullptr) return failed_precondition("init_kv_cache: the KV storage exists already");
  CpuKVOptions o;
  o.layout = options_.kv_layout;
  o.num_blocks = num_blocks;
  o.block_size = block_size;
  o.dtype = options_.kv_dtype;
  o.max_context = options_.max_context;
  o.max_num_seqs = options_.max_num_seqs;
  o.fused_read = options_.fused_read;
  NS_ASSIGN_OR_RETURN(kv_, CpuKV::create(model_->config(), o, pool_));
  return Status();
}

Status CpuRunner::init_swap_space(int32_t num_slots) {
  if (kv_ == nullptr) return failed_precondition("init_swap_space before init_kv_cache");
  return kv_->init_swap(num_slots);
}

Status CpuRunner::swap_out(std::span<const BlockCopy> copies) {
  if (kv_ == nullptr || kv_->num_swap_slots() == 0)
    return failed_precondition("swap_out without a swap area");
  kv_->swap_blocks(copies, /*out=*/true);
  return Status();
}

Status CpuRunner::swap_in(std::span<const BlockCopy> copies) {
  if (kv_ == nullptr || kv_->num_swap_slots() == 0) return failed_precondition("swap_in without a swap area");
  kv_->swap_blocks(copies, /*out=*/false);
  return Status();
}

StepLimits CpuRunner::step_limits() const {
  NS_CHECK(kv_ != nullptr) << "step_limits before init_kv_cache";
  return model_->step_limits(ws_, *kv_, options_.max_num_seqs);
}

StatusOr<Tensor> CpuRunner::forward(const ForwardBatch& batch) {
  if (kv_ == nullptr) return failed_precondition("forward before init_kv_cache");
  return model_->forward(batch, *kv_, ws_);
}

}  // namespace nanoserve
