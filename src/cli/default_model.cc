#include <cstdlib>
#include <filesystem>
#include <string>

#include "cli/commands.h"

namespace nanoserve::cli {

namespace {
constexpr const char* kDefaultModelFile = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

std::string default_model_path() {
  if (const char* env = std::getenv("NANOSERVE_MODEL"); env != nullptr && *env) return env;
  namespace fs = std::filesystem;
  // The binary lives in <repo>/build*/; the model in <repo>/models/.
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (fs::path dir = exe.parent_path(); !dir.empty() && dir != dir.root_path(); dir = dir.parent_path()) {
      if (fs::exists(dir / kDefaultModelFile)) return (dir / kDefaultModelFile).string();
    }
  }
  return kDefaultModelFile;
}

}  // namespace nanoserve::cli
