#include "io/safetensors_checkpoint.h"

#include <algorithm>
#include <filesystem>

#include "io/json_file.h"

namespace nanoserve {

namespace {

namespace fs = std::filesystem;

// PRECOND: `folder` is canonical. The shard's path inside it, or an error.
StatusOr<std::string> shard_path(const fs::path& folder, const std::string& index_name,
                                 const std::string& shard) {
  const std::string where = index_name + ": shard '" + shard.substr(0, 200) + "'";
  if (shard.empty()) return invalid_argument(where + ": empty file name");
  const fs::path rel(shard);
  if (rel.is_absolute() || rel.has_root_name() || rel.has_root_directory()) {
    return invalid_argument(where + ": an absolute path escapes the model folder");
  }
  for (const fs::path& part : rel) {
    if (part == "..") return invalid_argument(where + ": '..' escapes the model folder");
  }
  std::error_code ec;
  const fs::path full = fs::weakly_canonical(folder / rel, ec);
  if (ec) return not_found(where + ": " + ec.message());
  // Links inside the folder may point anywhere; the resolved path must stay in it.
  const auto [f_end, _] = std::mismatch(folder.begin(), folder.end(), full.begin(), full.end());
  if (f_end != folder.end()) return invalid_argument(where + ": resolves outside the model folder");
  return full.string();
}

}  // namespace

StatusOr<std::shared_ptr<const SafetensorsCheckpoint>> SafetensorsCheckpoint::open(
    const std::string& folder) {
  std::error_code ec;
  const fs::path dir = fs::canonical(folder, ec);
  if (ec) return not_found("model folder '" + folder + "': " + ec.message());
  if (!fs::is_directory(dir)) return invalid_argument("'" + folder + "' is not a folder");
  std::shared_ptr<SafetensorsCheckpoint> c(new SafetensorsCheckpoint());
  c->folder_ = folder;

  const fs::path index_path = dir / "model.safetensors.index.json";
  if (fs::exists(index_path)) {
    const std::string index_name = index_path.string();
    NS_ASSIGN_OR_RETURN(nlohmann::json index, read_json_file(index_name, kMaxIndexBytes));
    if (!index.is_object()) return data_loss(index_name + ": not a JSON object");
    auto wm = index.find("weight_map");
    if (wm == index.end() || !wm->is_object() || wm->empty()) {
      return data_loss(index_name + ": weight_map missing, empty or not an object");
    }
    std::map<std::string, size_t> shard_ids;  // shard path -> index in shards_
    for (auto it = wm->begin(); it != wm->end(); ++it) {
      if (!it.value().is_string()) {
        return data_loss(index_name + ": weight_map '" + it.key().substr(0, 200) + "': not a file name");
      }
      NS_ASSIGN_OR_RETURN(std::string path, shard_path(dir, index_name, it.value().get<std::string>()));
      if (shard_ids.count(path) == 0) {
        NS_ASSIGN_OR_RETURN(auto shard, SafetensorsFile::open(path));
        shard_ids.emplace(path, c->shards_.size());
        c->shards_.push_back(std::move(shard));
      }
      const SafetensorsFile* file = c->shards_[shard_ids[path]].get();
      const SafetensorsTensorInfo* info = file->find_tensor(it.key());
      if (info == nullptr) {
        return data_loss(index_name + ": tensor '" + it.key().substr(0, 200) + "' is mapped to " + path +
                         ", which does not hold it");
      }
      c->entries_.emplace(it.key(), Entry{file, info});
    }
    // A tensor the map does not list may not hide in a second shard either.
    for (const auto& shard : c->shards_) {
      for (const SafetensorsTensorInfo& t : shard->tensors()) {
        auto e = c->entries_.find(t.name);
        if (e != c->entries_.end() && e->second.file != shard.get()) {
          return data_loss(index_name + ": tensor '" + t.name.substr(0, 200) + "' is in both " +
                           e->second.file->name() + " and " + shard->name());
        }
      }
    }
    return std::shared_ptr<const SafetensorsCheckpoint>(std::move(c));
  }

  fs::path single = dir / "model.safetensors";
  if (!fs::exists(single)) {
    std::vector<fs::path> found;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      if (e.path().extension() == ".safetensors") found.push_back(e.path());
    }
    if (found.size() != 1) {
      return not_found("model folder '" + folder +
                       "': no model.safetensors.index.json or model.safetensors, and " +
                       std::to_string(found.size()) + " other *.safetensors files (want exactly one)");
    }
    single = found[0];
  }
  NS_ASSIGN_OR_RETURN(auto file, SafetensorsFile::open(single.string()));
  for (const SafetensorsTensorInfo& t : file->tensors()) c->entries_.emplace(t.name, Entry{file.get(), &t});
  c->shards_.push_back(std::move(file));
  return std::shared_ptr<const SafetensorsCheckpoint>(std::move(c));
}

std::vector<std::string> SafetensorsCheckpoint::names() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& [name, _] : entries_) out.push_back(name);
  return out;
}

const SafetensorsTensorInfo* SafetensorsCheckpoint::find_tensor(std::string_view name) const {
  auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : it->second.info;
}

StatusOr<Tensor> SafetensorsCheckpoint::tensor(std::string_view name) const {
  auto it = entries_.find(name);
  if (it == entries_.end())
    return not_found(folder_ + ": no tensor '" + std::string(name.substr(0, 200)) + "'");
  return it->second.file->tensor(name);
}

}  // namespace nanoserve
