// The Hugging Face cache layout: hub ids, the cache folder's precedence
// (--download-dir, HF_HUB_CACHE, HF_HOME, XDG_CACHE_HOME, HOME), and the
// lookup of a revision through refs/ and snapshots/.

#include "io/hf_cache.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace nanoserve {
namespace {

namespace fs = std::filesystem;

TEST(HfCache, HubRepoIds) {
  for (const char* ok :
       {"HuggingFaceTB/SmolLM2-135M-Instruct", "Qwen/Qwen2.5-1.5B-Instruct", "a/b", "o_r.g/n-a.m_e"}) {
    EXPECT_TRUE(is_hub_repo_id(ok)) << ok;
  }
  for (const char* bad : {"", "name", "/abs/path", "a/b/c", "./a", "../x", "a/..", "a/.", "a/", "/b",
                          "models/x y", "org/na~me", "a//b"}) {
    EXPECT_FALSE(is_hub_repo_id(bad)) << bad;
  }
  EXPECT_TRUE(is_commit_id("0123456789abcdef0123456789abcdef01234567"));
  EXPECT_FALSE(is_commit_id("0123456789ABCDEF0123456789abcdef01234567"));
  EXPECT_FALSE(is_commit_id("main"));
  EXPECT_EQ(hf_repo_folder("/c", "org/name"), "/c/models--org--name");
}

// Sets (or, with nullptr, clears) an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    value ? setenv(name, value, 1) : unsetenv(name);
  }
  ~ScopedEnv() { had_ ? setenv(name_, old_.c_str(), 1) : unsetenv(name_); }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

TEST(HfCache, CacheFolderPrecedence) {
  ScopedEnv hub("HF_HUB_CACHE", nullptr), home("HF_HOME", nullptr), xdg("XDG_CACHE_HOME", nullptr),
      user("HOME", "/home/u");
  EXPECT_EQ(hf_cache_dir(""), "/home/u/.cache/huggingface/hub");
  {
    ScopedEnv x("XDG_CACHE_HOME", "/xdg");
    EXPECT_EQ(hf_cache_dir(""), "/xdg/huggingface/hub");
    ScopedEnv h("HF_HOME", "/hf");
    EXPECT_EQ(hf_cache_dir(""), "/hf/hub");
    ScopedEnv c("HF_HUB_CACHE", "/cache");
    EXPECT_EQ(hf_cache_dir(""), "/cache");
    EXPECT_EQ(hf_cache_dir("/dl"), "/dl");  // --download-dir over all of them
  }
}

TEST(HfCache, FindsARevisionThroughRefsAndSnapshots) {
  const fs::path cache = fs::temp_directory_path() / ("ns_hf_cache_" + std::to_string(::getpid()));
  fs::remove_all(cache);
  const std::string commit = "89abcdef0123456789abcdef0123456789abcdef";
  const fs::path repo = hf_repo_folder(cache.string(), "org/name");

  auto none = find_cached_snapshot(cache.string(), "org/name", "main");
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_NE(none.status().message().find("org/name@main: not in the cache"), std::string::npos);

  fs::create_directories(repo / "refs");
  std::ofstream(repo / "refs" / "main") << commit;  // as huggingface_hub writes it: no newline
  auto no_snapshot = find_cached_snapshot(cache.string(), "org/name", "main");
  EXPECT_EQ(no_snapshot.status().code(), StatusCode::kNotFound);
  EXPECT_NE(no_snapshot.status().message().find("no snapshot " + commit), std::string::npos);

  fs::create_directories(repo / "snapshots" / commit);
  auto by_ref = find_cached_snapshot(cache.string(), "org/name", "main");
  ASSERT_TRUE(by_ref.ok()) << by_ref.status().to_string();
  EXPECT_EQ(*by_ref, (repo / "snapshots" / commit).string());
  auto by_commit = find_cached_snapshot(cache.string(), "org/name", commit);
  ASSERT_TRUE(by_commit.ok());
  EXPECT_EQ(*by_commit, *by_ref);

  std::ofstream(repo / "refs" / "broken") << "not-a-commit";
  EXPECT_EQ(find_cached_snapshot(cache.string(), "org/name", "broken").status().code(),
            StatusCode::kNotFound);
  fs::remove_all(cache);
}

}  // namespace
}  // namespace nanoserve
