#include "model/model_runner.h"

#include <utility>

#include "core/check.h"

namespace nanoserve {

Status ModelRunner::launch(const ForwardBatch& batch) {
  NS_CHECK(!launched_.has_value()) << "launch() twice without a wait()";
  StatusOr<Tensor> r = forward(batch);
  if (!r.ok()) return r.status();
  launched_.emplace(std::move(r));
  return Status();
}

StatusOr<Tensor> ModelRunner::wait() {
  NS_CHECK(launched_.has_value()) << "wait() without a launch()";
  StatusOr<Tensor> r = std::move(*launched_);
  launched_.reset();
  return r;
}

}  // namespace nanoserve
