#pragma once
// A model by hub id ("org/name" at a revision): found in the Hugging Face
// cache (io/hf_cache.h), else downloaded into it over HTTP(S) from the hub.
//
// The download: GET ENDPOINT/api/models/ORG/NAME/revision/REV?blobs=true
// gives the commit and the file list, with each file's size and checksum
// (lfs.sha256, or the git blob id of a small file). The files a model needs
// (config.json, generation_config.json, the tokenizer files, *.safetensors
// and their index) then come from ENDPOINT/ORG/NAME/resolve/COMMIT/FILE, so
// that every file is of the one commit. Each is written to
// blobs/HASH.incomplete, resumed from its size with a Range request, checked
// against its size and checksum, and only then renamed to blobs/HASH and
// linked into the snapshot (a new one is filled under .incomplete/COMMIT and
// renamed into snapshots/ when whole); refs/REV is written last. A cut connection leaves
// the .incomplete file to resume; a bad checksum deletes it. Nothing that is
// not whole and checked is ever in a snapshot.

#include <string>

#include "core/status.h"

namespace nanoserve {

struct HubOptions {
  std::string cache_dir;  // "" -> hf_cache_dir("")
  std::string endpoint;   // "" -> $HF_ENDPOINT, else https://huggingface.co
  std::string token;      // "" -> $HF_TOKEN, else $HUGGING_FACE_HUB_TOKEN; sent as a Bearer token
  bool offline = false;   // also when $HF_HUB_OFFLINE is 1: the cache only
  bool progress = false;  // a progress line per file on stderr (callers pass isatty(2))
};

// The snapshot folder of `repo_id` at `revision` ("" -> main): from the
// cache, else downloaded. Errors name the repository, the revision, the file
// and what went wrong: UNAVAILABLE (cut connection: run again to resume),
// DATA_LOSS (size or checksum), FAILED_PRECONDITION (401/403: a token is
// needed or refused), NOT_FOUND (no such repository, revision or file).
StatusOr<std::string> hub_model_snapshot(const std::string& repo_id, const std::string& revision,
                                         const HubOptions& options);

}  // namespace nanoserve
