// The Engine's preemption by swap (docs/engine.md, "Preemption: swap or
// recompute"): sizing the swap area and the cost model at create, running a
// step's copies, and the start-up line's account of it. The policy itself is
// the scheduler's (engine/scheduler.cc); the rest of the step is engine.cc.

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/logging.h"
#include "engine/engine.h"

namespace nanoserve {

Status Engine::configure_swap(const EngineConfig& config, ModelRunner& runner, int64_t per_block,
                              SchedulerConfig& sc) {
  ModelRunner* model = &runner;  // as in create()
  sc.preemption_mode = config.preemption_mode;
  const int64_t swap_bytes = config.swap_space_bytes.value_or(model->default_swap_space_bytes());
  if (swap_bytes < 0) return invalid_argument("swap_space_bytes must be >= 0");
  if (config.preemption_mode != PreemptionMode::kRecompute && swap_bytes > 0) {
    if (model->can_swap()) {
      sc.num_swap_slots = static_cast<int32_t>(std::min<int64_t>(swap_bytes / per_block, 1 << 30));
    } else if (config.swap_space_bytes.has_value()) {
      NS_LOG(INFO) << "swap space: no effect; this runner's KV storage cannot swap blocks (the per-sequence "
                      "cache), so preemption recomputes";
    }
  }
  if (config.preemption_mode == PreemptionMode::kSwap && sc.num_swap_slots == 0) {
    return invalid_argument(
        "preemption mode swap: no swap area (" +
        std::string(model->can_swap() ? "the swap space (--swap-space) holds no block; give it at least " +
                                            std::to_string(per_block) + " bytes"
                                      : "this runner's KV storage cannot swap blocks") +
        ")");
  }
  if (sc.num_swap_slots > 0) {
    const SwapCostRates rates = model->swap_cost_rates();
    if (rates.copy_bytes_per_s > 0.0)
      sc.swap_block_seconds = 2.0 * static_cast<double>(per_block) / rates.copy_bytes_per_s;
    if (rates.prefill_tokens_per_s > 0.0) sc.recompute_token_seconds = 1.0 / rates.prefill_tokens_per_s;
    NS_RETURN_IF_ERROR(model->init_swap_space(sc.num_swap_slots));
  }
  return Status();
}

std::string Engine::preemption_line() const {
  const SchedulerConfig& sc = scheduler_->config();
  if (sc.preemption_mode == PreemptionMode::kRecompute || sc.num_swap_slots == 0)
    return "preemption recomputes (no swap space)";
  char buf[256];
  const double mib = static_cast<double>(swap_space_bytes_) / (1024.0 * 1024.0);
  if (sc.preemption_mode == PreemptionMode::kSwap) {
    std::snprintf(buf, sizeof(buf), "swap space %d blocks (%.1f MiB), preemption swaps while it has room",
                  sc.num_swap_slots, mib);
  } else {
    // The cost model per token: its share of a block moved out and back in, against its prefill.
    std::snprintf(buf, sizeof(buf),
                  "swap space %d blocks (%.1f MiB), preemption swaps where cheaper (%.4g us/token moved out "
                  "and in vs %.4g us/token recomputed)",
                  sc.num_swap_slots, mib, 1e6 * sc.swap_block_seconds / block_manager().block_size(),
                  1e6 * sc.recompute_token_seconds);
  }
  return buf;
}

Status Engine::run_swaps(const SchedulerStep& plan, std::vector<RequestOutput>& outputs) {
  if (plan.swap_out.empty() && plan.swap_in.empty()) return Status();
  NS_CHECK(plan.swap_out.empty() || plan.swap_in.empty()) << "swap-outs and swap-ins in one step";
  Status st = plan.swap_out.empty() ? Status() : model_->swap_out(plan.swap_out);
  if (st.ok() && !plan.swap_in.empty()) st = model_->swap_in(plan.swap_in);
  if (st.ok()) return st;
  // The K/V those copies moved cannot be trusted, nor the step: end its requests and the ones it
  // swapped out, loudly, as a failed forward does. The step's swapped-out requests are the front of
  // the queue.
  std::vector<Request*> hit;
  for (int32_t i = 0; i < plan.num_swapped_out; ++i) hit.push_back(scheduler_->swapped()[i]);
  for (const ScheduledChunk& c : plan.chunks) hit.push_back(c.request);
  for (Request* r : hit) {
    RequestOutput& out = output_for(r, outputs);
    out.error = "swap: " + st.to_string();
    out.num_output_tokens = static_cast<int32_t>(r->output.size());
    finish(r, FinishReason::kError, out);
    forget(r);
  }
  return st;
}

}  // namespace nanoserve
