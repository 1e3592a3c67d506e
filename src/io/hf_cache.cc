#include "io/hf_cache.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace nanoserve {

namespace {

namespace fs = std::filesystem;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : std::string();
}

bool is_id_part(const std::string& p) {
  if (p.empty() || p == "." || p == ".." || p.size() > 96) return false;
  for (char c : p) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                    c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

bool is_hub_repo_id(const std::string& s) {
  const size_t slash = s.find('/');
  if (slash == std::string::npos || s.find('/', slash + 1) != std::string::npos) return false;
  return is_id_part(s.substr(0, slash)) && is_id_part(s.substr(slash + 1));
}

bool is_commit_id(const std::string& s) {
  if (s.size() != 40) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

std::string hf_cache_dir(const std::string& download_dir) {
  if (!download_dir.empty()) return download_dir;
  if (std::string v = env("HF_HUB_CACHE"); !v.empty()) return v;
  if (std::string v = env("HF_HOME"); !v.empty()) return (fs::path(v) / "hub").string();
  if (std::string v = env("XDG_CACHE_HOME"); !v.empty())
    return (fs::path(v) / "huggingface" / "hub").string();
  return (fs::path(env("HOME").empty() ? "/" : env("HOME")) / ".cache" / "huggingface" / "hub").string();
}

std::string hf_repo_folder(const std::string& cache_dir, const std::string& repo_id) {
  std::string name = "models--" + repo_id;
  for (size_t at = name.find('/'); at != std::string::npos; at = name.find('/', at))
    name.replace(at, 1, "--");
  return (fs::path(cache_dir) / name).string();
}

StatusOr<std::string> find_cached_snapshot(const std::string& cache_dir, const std::string& repo_id,
                                           const std::string& revision) {
  const fs::path repo(hf_repo_folder(cache_dir, repo_id));
  std::string commit = revision;
  if (!is_commit_id(revision)) {
    std::ifstream ref(repo / "refs" / revision);
    if (!ref || !std::getline(ref, commit) || !is_commit_id(commit)) {
      return not_found(repo_id + "@" + revision + ": not in the cache " + cache_dir + " (no refs/" +
                       revision + " naming a commit)");
    }
  }
  const fs::path snapshot = repo / "snapshots" / commit;
  std::error_code ec;
  if (!fs::is_directory(snapshot, ec)) {
    return not_found(repo_id + "@" + revision + ": not in the cache " + cache_dir + " (no snapshot " +
                     commit + ")");
  }
  return snapshot.string();
}

}  // namespace nanoserve
