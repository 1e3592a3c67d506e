#pragma once
// Test helper for the CUDA model tests' bitwise invariance check: several
// sequences' logits through their prefills (whole or in chunks) and a run of
// decode steps together, and the check that each sequence's are the same
// alone, batched, prefilled in chunks of 7 and launched without CUDA graphs.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "model/model_cuda.h"
#include "model/model_fixture.h"

namespace nanoserve::testing {

using LogitRows = std::vector<std::vector<float>>;
// A fresh model on the device, CUDA graphs on or off; null (with a failure) if it did not load.
using MakeCudaModel = std::function<std::unique_ptr<CudaModel>(bool cuda_graphs)>;

// Sequences `which` of `prompts` (the i-th in slot i, tables by
// add_slot_tables), prefilled in chunks of `chunk` tokens a sequence a step
// (0: whole), then `decodes` decode steps together, each fed 7 + step
// whatever was sampled. Per sequence: its prefill's last logits row, then
// each decode step's (V floats each).
inline LogitRows run_sequences(const MakeCudaModel& make, const std::vector<std::vector<int32_t>>& prompts,
                               const std::vector<size_t>& which, bool graphs, int chunk, int decodes,
                               int32_t blocks_per_seq, int32_t block_size) {
  LogitRows rows(which.size());
  auto gpu = make(graphs);
  if (gpu == nullptr) return rows;
  const int64_t V = gpu->config().vocab_size;
  std::vector<int32_t> seqs, starts(which.size(), 0);
  for (size_t i = 0; i < which.size(); ++i) seqs.push_back(static_cast<int32_t>(i));
  std::vector<size_t> done(which.size(), 0);
  auto step = [&](const std::vector<std::vector<int32_t>>& segs, const std::vector<int32_t>& at,
                  const std::vector<int32_t>& ids) -> StatusOr<Tensor> {
    ForwardBatch b = make_batch(segs, at, ids);
    add_slot_tables(b, blocks_per_seq, block_size);
    auto out = gpu->forward(b);
    EXPECT_TRUE(out.ok()) << out.status().to_string();
    return out;
  };
  for (bool more = true; more;) {
    std::vector<std::vector<int32_t>> segs;
    std::vector<int32_t> at, ids;
    std::vector<size_t> in_step;
    for (size_t i = 0; i < which.size(); ++i) {
      const auto& p = prompts[which[i]];
      if (done[i] == p.size()) continue;
      const size_t e = chunk > 0 ? std::min(p.size(), done[i] + static_cast<size_t>(chunk)) : p.size();
      segs.emplace_back(p.begin() + static_cast<int64_t>(done[i]), p.begin() + static_cast<int64_t>(e));
      at.push_back(static_cast<int32_t>(done[i]));
      ids.push_back(seqs[i]);
      in_step.push_back(i);
      done[i] = e;
    }
    more = false;
    for (size_t i = 0; i < which.size(); ++i) more |= done[i] < prompts[which[i]].size();
    auto out = step(segs, at, ids);
    if (!out.ok()) return rows;
    for (size_t k = 0; k < in_step.size(); ++k) {
      const size_t i = in_step[k];
      if (done[i] == prompts[which[i]].size())
        rows[i].assign(out->data_as<const float>() + k * V, out->data_as<const float>() + (k + 1) * V);
    }
  }
  for (size_t i = 0; i < which.size(); ++i) starts[i] = static_cast<int32_t>(prompts[which[i]].size());
  for (int s = 0; s < decodes; ++s) {
    auto out = step(std::vector<std::vector<int32_t>>(which.size(), {7 + s}), starts, seqs);
    if (!out.ok()) return rows;
    for (size_t i = 0; i < which.size(); ++i) {
      rows[i].insert(rows[i].end(), out->data_as<const float>() + i * V,
                     out->data_as<const float>() + (i + 1) * V);
      ++starts[i];
    }
  }
  return rows;
}

// Every prompt's logits (run_sequences) bitwise the same alone as batched
// with the others on graphs, prefilled in chunks of 7, and launched eagerly.
inline void expect_alone_batched_chunked_eager_equal(const MakeCudaModel& make,
                                                     const std::vector<std::vector<int32_t>>& prompts,
                                                     int decodes, int64_t vocab, int32_t blocks_per_seq,
                                                     int32_t block_size) {
  std::vector<size_t> all;
  for (size_t i = 0; i < prompts.size(); ++i) all.push_back(i);
  auto run = [&](const std::vector<size_t>& which, bool graphs, int chunk) {
    return run_sequences(make, prompts, which, graphs, chunk, decodes, blocks_per_seq, block_size);
  };
  const LogitRows batched = run(all, true, 0), eager = run(all, false, 0), chunked = run(all, true, 7);
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_EQ(static_cast<int64_t>(batched[i].size()), (decodes + 1) * vocab) << "prompt " << i;
    const size_t bytes = batched[i].size() * sizeof(float);
    const LogitRows alone = run({i}, true, 0);
    ASSERT_EQ(alone[0].size(), batched[i].size()) << "prompt " << i;
    ASSERT_EQ(eager[i].size(), batched[i].size()) << "prompt " << i;
    ASSERT_EQ(chunked[i].size(), batched[i].size()) << "prompt " << i;
    EXPECT_EQ(std::memcmp(alone[0].data(), batched[i].data(), bytes), 0)
        << "prompt " << i << ": alone vs batched";
    EXPECT_EQ(std::memcmp(eager[i].data(), batched[i].data(), bytes), 0)
        << "prompt " << i << ": eager vs graphs";
    EXPECT_EQ(std::memcmp(chunked[i].data(), batched[i].data(), bytes), 0) << "prompt " << i << ": chunked";
  }
}

}  // namespace nanoserve::testing
