#pragma once
// The Hugging Face hub cache on disk, the layout transformers and
// huggingface_hub read and write, so that a model either of them fetched is
// found here and one fetched here is found by them:
//
//   CACHE/models--ORG--NAME/
//     blobs/HASH                 a file's bytes; HASH is its sha256 (LFS
//                                files) or its git blob id (small files)
//     blobs/HASH.incomplete      a download in progress; never read as a model
//     snapshots/COMMIT/FILE  ->  ../../blobs/HASH (relative symlink)
//     refs/REVISION              the commit a branch or tag named, one line
//
// CACHE is --download-dir if given, else $HF_HUB_CACHE, else $HF_HOME/hub,
// else $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub.

#include <string>

#include "core/status.h"

namespace nanoserve {

// "org/name": two parts of letters, digits, '-', '_' and '.', neither empty
// nor "." / ".." (the hub's repository ids). Says nothing of whether a local
// path of that name exists: callers look for one first.
bool is_hub_repo_id(const std::string& s);

// True for a 40-digit lower-case hex commit id.
bool is_commit_id(const std::string& s);

// The cache folder, as above; `download_dir` overrides the environment.
std::string hf_cache_dir(const std::string& download_dir);

// CACHE/models--ORG--NAME.
std::string hf_repo_folder(const std::string& cache_dir, const std::string& repo_id);

// The snapshot folder of `revision` (a branch, tag or commit) when the cache
// holds it: refs/REVISION names the commit (a commit id is its own), and
// snapshots/COMMIT exists. NOT_FOUND saying which part is missing otherwise.
StatusOr<std::string> find_cached_snapshot(const std::string& cache_dir, const std::string& repo_id,
                                           const std::string& revision);

}  // namespace nanoserve
