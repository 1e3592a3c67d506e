#include "io/json_file.h"

#include "io/mapped_file.h"

namespace nanoserve {

StatusOr<nlohmann::json> read_json_file(const std::string& path, uint64_t max_bytes, int max_depth) {
  NS_ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> m, MappedFile::open(path));
  if (m->size() > max_bytes) {
    return invalid_argument(path + ": " + std::to_string(m->size()) + " bytes exceed the limit of " +
                            std::to_string(max_bytes));
  }
  if (m->size() == 0) return data_loss(path + ": not valid JSON (empty file)");
  const char* p = reinterpret_cast<const char*>(m->data());
  bool too_deep = false;
  auto callback = [&](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
    if (depth > max_depth) too_deep = true;
    return !too_deep;
  };
  // The callback prunes whatever lies deeper than max_depth, so the value
  // built (and later destroyed) never nests further.
  nlohmann::json j = nlohmann::json::parse(p, p + m->size(), callback, /*allow_exceptions=*/false);
  if (too_deep)
    return data_loss(path + ": not valid JSON (nested deeper than " + std::to_string(max_depth) + ")");
  if (j.is_discarded()) return data_loss(path + ": not valid JSON");
  return j;
}

}  // namespace nanoserve
