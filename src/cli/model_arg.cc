#include "cli/model_arg.h"

namespace nanoserve::cli {

void add_model_arg(CLI::App* sub, ModelArg& arg, const std::string& help) {
  // Collected as a list so that a second positional reaches resolve_model_arg,
  // which names both, rather than CLI11's generic "not expected".
  sub->add_option("model", arg.positional, help + " (or -m)")->expected(0, -1);
  sub->add_option("-m,--model", arg.flag, help);
}

StatusOr<std::string> resolve_model_arg(const ModelArg& arg) {
  if (arg.positional.size() > 1) {
    return invalid_argument("two models given: '" + arg.positional[0] + "' and '" + arg.positional[1] +
                            "'; give one MODEL");
  }
  if (!arg.positional.empty() && !arg.flag.empty()) {
    return invalid_argument("the model is given twice: MODEL '" + arg.positional[0] + "' and -m '" +
                            arg.flag + "'; give one");
  }
  return arg.positional.empty() ? arg.flag : arg.positional[0];
}

}  // namespace nanoserve::cli
