#include "io/hf_hub.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/file.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/logging.h"
#include "io/hf_cache.h"

namespace nanoserve {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kDefaultEndpoint = "https://huggingface.co";
constexpr size_t kMaxListBytes = size_t{16} << 20;  // the file list of a model with many shards

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : std::string();
}

Status unavailable(std::string m) {
  return {StatusCode::kUnavailable, std::move(m)};
}

// A file of the repository at the commit, as its file list gives it.
struct HubFile {
  std::string name;
  int64_t size = 0;
  std::string hash;     // lfs.sha256, else the git blob id; also the blob's name in the cache
  bool sha256 = false;  // which of the two `hash` is
};

// What a model folder needs; the rest of a repository (other formats,
// images, README) is never fetched.
bool wanted(const std::string& name) {
  if (name.find('/') != std::string::npos) return false;
  static constexpr const char* kFiles[] = {"config.json", "generation_config.json", "tokenizer.json",
                                           "tokenizer_config.json", "special_tokens_map.json"};
  for (const char* f : kFiles) {
    if (name == f) return true;
  }
  auto ends_with = [&](const std::string& s) {
    return name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  return ends_with(".safetensors") || ends_with(".safetensors.index.json");
}

// A revision as a path under refs/: a branch or tag name, never leaving it.
bool is_safe_revision(const std::string& r) {
  if (r.empty() || r.size() > 200 || r.front() == '/' || r.find("..") != std::string::npos) return false;
  for (char c : r) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                    c == '_' || c == '.' || c == '/';
    if (!ok) return false;
  }
  return true;
}

void curl_init_once() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

struct CurlDeleter {
  void operator()(CURL* c) const { curl_easy_cleanup(c); }
  void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};
using CurlHandle = std::unique_ptr<CURL, CurlDeleter>;
using CurlHeaders = std::unique_ptr<curl_slist, CurlDeleter>;

// One GET, with what every request of the hub shares: redirects followed
// (files are served from a CDN), HTTP(S) only, the token (which curl does not
// carry to another host on a redirect), and a stall limit rather than a
// total one, since a shard may take minutes.
struct Request {
  CurlHandle curl;
  CurlHeaders headers;
  char error[CURL_ERROR_SIZE] = {};

  Request(const std::string& url, const std::string& token) : curl(curl_easy_init()) {
    curl_slist* h = nullptr;
    if (!token.empty()) h = curl_slist_append(h, ("Authorization: Bearer " + token).c_str());
    headers.reset(h);
    CURL* c = curl.get();
    curl_easy_setopt(c, CURLOPT_URL, url.c_str());
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers.get());
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 30L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 60L);
    curl_easy_setopt(c, CURLOPT_FAILONERROR, 1L);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "nanoserve");
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, error);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  }
  long status() const {
    long code = 0;
    curl_easy_getinfo(curl.get(), CURLINFO_RESPONSE_CODE, &code);
    return code;
  }
  std::string why(CURLcode rc) const {
    return error[0] != '\0' ? std::string(error) : curl_easy_strerror(rc);
  }
};

// The error of a request that got an HTTP error status.
Status http_error(long code, const std::string& what) {
  const std::string head = what + ": HTTP " + std::to_string(code);
  if (code == 401 || code == 403) {
    return failed_precondition(head + (env("HF_TOKEN").empty() && env("HUGGING_FACE_HUB_TOKEN").empty()
                                           ? ": the repository is gated or private; set HF_TOKEN to a token "
                                             "that may read it"
                                           : ": the token in HF_TOKEN may not read this repository"));
  }
  if (code == 404) return not_found(head + ": no such repository, revision or file on the hub");
  return unavailable(head);
}

size_t append_to_string(char* data, size_t size, size_t n, void* user) {
  auto* out = static_cast<std::string*>(user);
  if (out->size() + size * n > kMaxListBytes) return 0;  // aborts the transfer
  out->append(data, size * n);
  return size * n;
}

// The commit and the files of `repo` at `revision`.
StatusOr<std::pair<std::string, std::vector<HubFile>>> list_files(const std::string& endpoint,
                                                                  const std::string& repo,
                                                                  const std::string& revision,
                                                                  const std::string& token) {
  CurlHandle esc(curl_easy_init());
  char* r = curl_easy_escape(esc.get(), revision.c_str(), static_cast<int>(revision.size()));
  const std::string url = endpoint + "/api/models/" + repo + "/revision/" + r + "?blobs=true";
  curl_free(r);
  Request req(url, token);
  std::string body;
  curl_easy_setopt(req.curl.get(), CURLOPT_WRITEFUNCTION, append_to_string);
  curl_easy_setopt(req.curl.get(), CURLOPT_WRITEDATA, &body);
  const std::string what = repo + "@" + revision;
  if (CURLcode rc = curl_easy_perform(req.curl.get()); rc != CURLE_OK) {
    if (rc == CURLE_HTTP_RETURNED_ERROR) return http_error(req.status(), what + " (" + url + ")");
    return unavailable(what + ": the hub's file list (" + url + "): " + req.why(rc));
  }
  const json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("sha") || !j["sha"].is_string() ||
      !is_commit_id(j["sha"].get<std::string>()) || !j.contains("siblings") || !j["siblings"].is_array()) {
    return data_loss(what + ": the hub's file list (" + url + ") has no commit 'sha' and 'siblings'");
  }
  std::vector<HubFile> files;
  for (const json& s : j["siblings"]) {
    if (!s.is_object() || !s.contains("rfilename") || !s["rfilename"].is_string()) continue;
    HubFile f;
    f.name = s["rfilename"].get<std::string>();
    if (!wanted(f.name)) continue;
    const json* lfs = s.contains("lfs") && s["lfs"].is_object() ? &s["lfs"] : nullptr;
    if (lfs != nullptr && lfs->contains("sha256") && (*lfs)["sha256"].is_string()) {
      f.hash = (*lfs)["sha256"].get<std::string>();
      f.sha256 = true;
      if (lfs->contains("size") && (*lfs)["size"].is_number_unsigned())
        f.size = (*lfs)["size"].get<int64_t>();
    } else if (s.contains("blobId") && s["blobId"].is_string()) {
      f.hash = s["blobId"].get<std::string>();
    }
    if (f.size == 0 && s.contains("size") && s["size"].is_number_unsigned())
      f.size = s["size"].get<int64_t>();
    const bool hex = !f.hash.empty() && f.hash.find_first_not_of("0123456789abcdef") == std::string::npos;
    if (!hex || f.hash.size() != (f.sha256 ? 64u : 40u) || f.size <= 0) {
      return data_loss(what + ": the hub's file list gives no size and checksum for '" + f.name +
                       "', so it could not be checked");
    }
    files.push_back(std::move(f));
  }
  return std::make_pair(j["sha"].get<std::string>(), std::move(files));
}

// sha256 of the file, or its git blob id (sha1 of "blob SIZE\0" and the bytes).
StatusOr<std::string> file_hash(const std::string& path, bool sha256, int64_t size) {
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), sha256 ? EVP_sha256() : EVP_sha1(), nullptr) != 1) {
    return internal_error("digest: cannot start");
  }
  if (!sha256) {
    const std::string head = "blob " + std::to_string(size);
    EVP_DigestUpdate(ctx.get(), head.data(), head.size() + 1);  // with its '\0'
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found(path + ": cannot read it back");
  std::vector<char> buf(size_t{1} << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    if (in.gcount() > 0) EVP_DigestUpdate(ctx.get(), buf.data(), static_cast<size_t>(in.gcount()));
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(ctx.get(), md, &n);
  std::string hex;
  static constexpr char kHex[] = "0123456789abcdef";
  for (unsigned int i = 0; i < n; ++i) {
    hex += kHex[md[i] >> 4];
    hex += kHex[md[i] & 15];
  }
  return hex;
}

// The write side of one file's download: appends to the .incomplete file,
// or starts it over when the server answered the whole file (200) to a Range.
struct Sink {
  int fd = -1;
  int64_t offset = 0;  // bytes in the file
  bool checked_status = false;
  CURL* curl = nullptr;
  bool write_failed = false;
  // progress
  bool progress = false;
  std::string label;
  int64_t total = 0;
  std::chrono::steady_clock::time_point last_print{};
};

size_t sink_write(char* data, size_t size, size_t n, void* user) {
  auto* s = static_cast<Sink*>(user);
  if (!s->checked_status) {
    s->checked_status = true;
    long code = 0;
    curl_easy_getinfo(s->curl, CURLINFO_RESPONSE_CODE, &code);
    if (code != 206 && s->offset > 0) {  // the whole file again
      if (ftruncate(s->fd, 0) != 0) return 0;
      s->offset = 0;
    }
  }
  const size_t len = size * n;
  size_t done = 0;
  while (done < len) {
    const ssize_t w = pwrite(s->fd, data + done, len - done, static_cast<off_t>(s->offset));
    if (w <= 0) {
      s->write_failed = true;
      return 0;
    }
    done += static_cast<size_t>(w);
    s->offset += w;
  }
  if (s->progress) {
    const auto now = std::chrono::steady_clock::now();
    if (now - s->last_print > std::chrono::milliseconds(200) || s->offset == s->total) {
      s->last_print = now;
      std::fprintf(
          stderr, "\r  %s  %5.1f%%  %.1f / %.1f MiB", s->label.c_str(),
          s->total > 0 ? 100.0 * static_cast<double>(s->offset) / static_cast<double>(s->total) : 0.0,
          static_cast<double>(s->offset) / 1048576.0, static_cast<double>(s->total) / 1048576.0);
      std::fflush(stderr);
    }
  }
  return len;
}

// Closes the fd (and with it the lock) on every path.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

// One file into blobs/HASH, whole and checked. A cut transfer keeps its
// bytes in blobs/HASH.incomplete for the next run to resume from.
Status download_file(const HubFile& f, const std::string& url, const std::string& token,
                     const fs::path& blobs, bool progress) {
  const fs::path blob = blobs / f.hash;
  std::error_code ec;
  if (fs::is_regular_file(blob, ec) && static_cast<int64_t>(fs::file_size(blob, ec)) == f.size) {
    return Status::ok_status();  // checked when it was committed
  }
  const fs::path part = blobs / (f.hash + ".incomplete");
  Fd fd{open(part.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)};
  if (fd.fd < 0) return failed_precondition(part.string() + ": cannot create it (is the cache writable?)");
  if (flock(fd.fd, LOCK_EX | LOCK_NB) != 0) {
    return unavailable(f.name + ": another process is downloading it into " + part.string());
  }
  Sink sink;
  sink.fd = fd.fd;
  sink.offset = lseek(fd.fd, 0, SEEK_END);
  if (sink.offset > f.size) {  // not a prefix of this file: start over
    if (ftruncate(fd.fd, 0) != 0) return internal_error(part.string() + ": cannot truncate");
    sink.offset = 0;
  }
  const int64_t resumed_from = sink.offset;
  if (sink.offset < f.size) {
    Request req(url, token);
    sink.curl = req.curl.get();
    sink.progress = progress;
    sink.label = f.name;
    sink.total = f.size;
    if (sink.offset > 0) {
      const std::string range = std::to_string(sink.offset) + "-";
      curl_easy_setopt(req.curl.get(), CURLOPT_RANGE, range.c_str());
    }
    curl_easy_setopt(req.curl.get(), CURLOPT_WRITEFUNCTION, sink_write);
    curl_easy_setopt(req.curl.get(), CURLOPT_WRITEDATA, &sink);
    const CURLcode rc = curl_easy_perform(req.curl.get());
    if (progress) std::fprintf(stderr, "\n");
    if (rc == CURLE_HTTP_RETURNED_ERROR) return http_error(req.status(), f.name + " (" + url + ")");
    if (sink.write_failed) return failed_precondition(part.string() + ": cannot write (disk full?)");
    if (rc != CURLE_OK || sink.offset < f.size) {
      return unavailable(f.name + ": the download was cut after " + std::to_string(sink.offset) + " of " +
                         std::to_string(f.size) + " bytes (" + (rc != CURLE_OK ? req.why(rc) : "short body") +
                         "); the bytes are kept in " + part.string() + ", run again to resume");
    }
  }
  if (fsync(fd.fd) != 0) return internal_error(part.string() + ": fsync failed");
  const int64_t got = lseek(fd.fd, 0, SEEK_END);
  if (got != f.size) {
    fs::remove(part, ec);
    return data_loss(f.name + ": downloaded " + std::to_string(got) + " bytes, the hub's file list says " +
                     std::to_string(f.size) + "; the file is deleted");
  }
  NS_ASSIGN_OR_RETURN(std::string hash, file_hash(part.string(), f.sha256, f.size));
  if (hash != f.hash) {
    fs::remove(part, ec);
    return data_loss(
        f.name + ": " + (f.sha256 ? "sha256 " : "git blob id ") + hash +
        " of the download differs from the hub's file list (" + f.hash + "); the file is deleted" +
        (resumed_from > 0 ? " (it was resumed from byte " + std::to_string(resumed_from) + ")" : ""));
  }
  fs::rename(part, blob, ec);
  if (ec) return internal_error(part.string() + ": cannot rename to " + blob.string() + ": " + ec.message());
  return Status::ok_status();
}

// Writes `text` to `path` whole or not at all.
Status write_atomically(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!(out << text)) return failed_precondition(tmp.string() + ": cannot write");
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return failed_precondition(path.string() + ": " + ec.message());
  return Status::ok_status();
}

}  // namespace

StatusOr<std::string> hub_model_snapshot(const std::string& repo_id, const std::string& revision_in,
                                         const HubOptions& o) {
  const std::string revision = revision_in.empty() ? "main" : revision_in;
  if (!is_hub_repo_id(repo_id)) return invalid_argument("'" + repo_id + "' is not a hub id (org/name)");
  if (!is_safe_revision(revision)) {
    return invalid_argument("--revision '" + revision + "': not a branch, tag or commit name");
  }
  const std::string cache = o.cache_dir.empty() ? hf_cache_dir("") : o.cache_dir;
  StatusOr<std::string> cached = find_cached_snapshot(cache, repo_id, revision);
  std::error_code ec;
  if (cached.ok() && fs::exists(fs::path(*cached) / "config.json", ec)) return cached;
  if (o.offline || env("HF_HUB_OFFLINE") == "1") {
    return not_found(cached.status().message() + "; HF_HUB_OFFLINE is set, so nothing is downloaded");
  }
  std::string endpoint = !o.endpoint.empty() ? o.endpoint : env("HF_ENDPOINT");
  if (endpoint.empty()) endpoint = kDefaultEndpoint;
  while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
  std::string token = !o.token.empty() ? o.token : env("HF_TOKEN");
  if (token.empty()) token = env("HUGGING_FACE_HUB_TOKEN");

  curl_init_once();
  NS_ASSIGN_OR_RETURN(auto listed, list_files(endpoint, repo_id, revision, token));
  const auto& [commit, files] = listed;
  bool has_config = false;
  int64_t bytes = 0;
  for (const HubFile& f : files) {
    has_config = has_config || f.name == "config.json";
    bytes += f.size;
  }
  if (!has_config) {
    return failed_precondition(
        repo_id + "@" + revision +
        ": no config.json, so not a Hugging Face model folder (a GGUF repository's file "
        "can be downloaded and given as a path)");
  }
  const fs::path repo(hf_repo_folder(cache, repo_id));
  const fs::path blobs = repo / "blobs", snapshot = repo / "snapshots" / commit;
  // A new snapshot is filled under another name and renamed when whole, so
  // that a lookup by commit never finds part of one.
  const bool fresh = !fs::is_directory(snapshot, ec);
  // Beside snapshots/ (the cache's readers list every folder in it), at the
  // same depth, so that the links into ../../blobs hold after the rename.
  const fs::path filling = fresh ? repo / ".incomplete" / commit : snapshot;
  fs::create_directories(blobs, ec);
  fs::create_directories(repo / "snapshots", ec);
  fs::create_directories(filling, ec);
  fs::create_directories(repo / "refs", ec);
  if (ec) return failed_precondition(repo.string() + ": cannot create the cache folders: " + ec.message());
  NS_LOG(INFO) << "downloading " << repo_id << "@" << revision << " (commit " << commit << ", "
               << files.size() << " files, " << bytes / 1048576.0 << " MiB) from " << endpoint << " into "
               << cache;
  for (const HubFile& f : files) {
    const std::string url = endpoint + "/" + repo_id + "/resolve/" + commit + "/" + f.name;
    NS_RETURN_IF_ERROR(download_file(f, url, token, blobs, o.progress));
    // Linked only once the blob is whole and checked.
    const fs::path link = filling / f.name;
    fs::remove(link, ec);
    fs::create_symlink(fs::path("..") / ".." / "blobs" / f.hash, link, ec);
    if (ec) return failed_precondition(link.string() + ": cannot link: " + ec.message());
  }
  if (fresh) {
    fs::rename(filling, snapshot, ec);
    if (ec) return failed_precondition(snapshot.string() + ": cannot rename into place: " + ec.message());
  }
  // Last: a named revision finds the snapshot only once every file is in it.
  if (revision != commit) {
    fs::create_directories((repo / "refs" / revision).parent_path(), ec);
    NS_RETURN_IF_ERROR(write_atomically(repo / "refs" / revision, commit));
  }
  return snapshot.string();
}

}  // namespace nanoserve
