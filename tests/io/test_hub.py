"""Models by hub id: `nanoserve generate org/name` against a fake hub that
the tests start (fake_hub.py), with the Hugging Face cache in a temporary
folder. The model is the tiny qwen2 fixture (tests/fixtures/families/qwen2/hf),
so its output by hub id must equal its output by path. The cache must be the
one huggingface_hub reads (checked with huggingface_hub itself), and a cut,
a bad checksum, a 401 or a missing revision must each give a clear error and
leave nothing in the cache that could be taken for the model."""
import os
import shutil
import subprocess
import sys

import pytest
import requests

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cli"))
from cli_process import QWEN2_HF, SMALL, Serve, run  # noqa: E402
from fake_hub import FakeHub  # noqa: E402

REPO = "tiny-org/qwen2-tiny"
MAIN = "1111111111111111111111111111111111111111"
V1 = "2222222222222222222222222222222222222222"
PROMPT = ["-p", "The quick brown", "-n", "6", "--temperature", "0"]


@pytest.fixture
def hub():
    with FakeHub() as h:
        h.add_repo(REPO, QWEN2_HF, {"main": MAIN, "v1": V1})
        yield h


def env_for(hub, cache, **extra):
    env = {"HF_ENDPOINT": hub.url, "HF_HUB_CACHE": str(cache), "HF_TOKEN": "", "HUGGING_FACE_HUB_TOKEN": "",
           "HF_HUB_OFFLINE": ""}
    env.update(extra)
    return env


def generate(model, env, *args):
    return run("generate", model, *PROMPT, *SMALL, *args, env=env)


def repo_dir(cache):
    return os.path.join(cache, "models--tiny-org--qwen2-tiny")


def cache_files(cache):
    out = []
    for root, _, files in os.walk(repo_dir(cache)):
        out += [os.path.relpath(os.path.join(root, f), repo_dir(cache)) for f in files]
    return sorted(out)


@pytest.fixture(scope="module")
def by_path():
    r = run("generate", QWEN2_HF, *PROMPT, *SMALL)
    assert r.returncode == 0 and r.stdout.strip(), r.stderr
    return r.stdout


def test_download_then_cache(hub, tmp_path, by_path):
    cache = tmp_path / "hub"
    r = generate(REPO, env_for(hub, cache))
    assert r.returncode == 0, r.stderr
    assert r.stdout == by_path
    # Every file of the one commit, LFS files through the CDN redirect, and no other file.
    fetched = hub.paths()
    assert f"/api/models/{REPO}/revision/main" in fetched
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        assert f"/{REPO}/resolve/{MAIN}/{name}" in fetched
    assert any(p.startswith("/cdn/") for p in fetched)
    # The layout huggingface_hub reads: it finds each file, and its scan reports no problem.
    import huggingface_hub
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        found = huggingface_hub.try_to_load_from_cache(REPO, name, cache_dir=str(cache))
        assert isinstance(found, str) and os.path.samefile(found, os.path.join(QWEN2_HF, name)) is False
        with open(found, "rb") as a, open(os.path.join(QWEN2_HF, name), "rb") as b:
            assert a.read() == b.read()
    info = huggingface_hub.scan_cache_dir(str(cache))
    assert not info.warnings, info.warnings
    (repo_info,) = info.repos
    assert repo_info.repo_id == REPO and {rev.commit_hash for rev in repo_info.revisions} == {MAIN}
    assert not any(f.endswith(".incomplete") for f in cache_files(cache))
    # Again, with the hub gone: the cache alone.
    n = len(hub.requests)
    hub.stop()
    again = generate(REPO, env_for(hub, cache))
    assert again.returncode == 0 and again.stdout == by_path, again.stderr
    assert len(hub.requests) == n


def test_cache_filled_by_huggingface_hub_is_found_offline(hub, tmp_path, by_path):
    home = tmp_path / "hf_home"
    import huggingface_hub
    snapshot = huggingface_hub.snapshot_download(REPO, cache_dir=str(home / "hub"), endpoint=hub.url,
                                                 revision="v1")
    assert os.path.basename(snapshot) == V1
    n = len(hub.requests)
    env = {"HF_HOME": str(home), "HF_HUB_CACHE": "", "HF_HUB_OFFLINE": "1", "HF_ENDPOINT": hub.url}
    r = generate(REPO, env, "--revision", "v1")
    assert r.returncode == 0 and r.stdout == by_path, r.stderr
    # By commit too; and main, which it never fetched, is not there.
    r = generate(REPO, env, "--revision", V1)
    assert r.returncode == 0 and r.stdout == by_path, r.stderr
    missing = generate(REPO, env)
    assert missing.returncode != 0 and "HF_HUB_OFFLINE" in missing.stderr and "main" in missing.stderr
    assert len(hub.requests) == n


def test_revision_download_dir_and_served_name(hub, tmp_path):
    cache = tmp_path / "elsewhere"
    env = env_for(hub, tmp_path / "unused")
    with Serve(REPO, "--revision", "v1", "--download-dir", str(cache), "--port", "0", *SMALL, env=env) as s:
        assert s.started(), s.stderr
        assert requests.get(s.url + "/v1/models", timeout=5).json()["data"][0]["id"] == REPO
    with open(os.path.join(repo_dir(cache), "refs", "v1")) as f:
        assert f.read().strip() == V1
    assert os.path.isdir(os.path.join(repo_dir(cache), "snapshots", V1))
    assert not os.path.exists(tmp_path / "unused")
    assert f"/{REPO}/resolve/{V1}/config.json" in hub.paths()


def test_cut_connection_is_an_error_then_resumes(hub, tmp_path, by_path):
    cache = tmp_path / "hub"
    hub.cut_once.add("model.safetensors")
    r = generate(REPO, env_for(hub, cache))
    assert r.returncode != 0
    assert "model.safetensors: the download was cut after" in r.stderr and "run again to resume" in r.stderr, r.stderr
    files = cache_files(cache)
    # Kept to resume, but neither a blob nor in a snapshot nor named by a ref.
    assert [f for f in files if f.endswith(".incomplete")], files
    assert not [f for f in files if f.startswith(("snapshots", "refs"))], files
    assert not os.path.exists(os.path.join(repo_dir(cache), "snapshots", MAIN))
    size = os.path.getsize(QWEN2_HF + "/model.safetensors")
    # The next run asks only for the rest, and the model is whole and checked.
    r = generate(REPO, env_for(hub, cache))
    assert r.returncode == 0 and r.stdout == by_path, r.stderr
    ranges = [rng for _, path, rng, _ in hub.requests if path.startswith("/cdn/") and rng]
    assert len(ranges) == 1 and ranges[0].startswith("bytes=") and 0 < int(ranges[0][6:-1]) < size, ranges
    assert not any(f.endswith(".incomplete") for f in cache_files(cache))


def test_bad_checksum_is_an_error_and_nothing_is_kept(hub, tmp_path):
    cache = tmp_path / "hub"
    hub.corrupt.add("model.safetensors")
    for _ in range(2):  # a second run does not take what the first left
        r = generate(REPO, env_for(hub, cache))
        assert r.returncode != 0
        assert "model.safetensors: sha256" in r.stderr and "differs from the hub's file list" in r.stderr, r.stderr
        files = cache_files(cache)
        assert not [f for f in files if f.endswith(".incomplete") or f.startswith(("snapshots", "refs"))], files
        blobs = [f for f in files if f.startswith("blobs/")]
        assert len(blobs) == 1, blobs  # config.json came whole; the shard never did
    # A small file checked by its git blob id.
    hub.corrupt = {"tokenizer.json"}
    r = generate(REPO, env_for(hub, tmp_path / "hub2"))
    assert r.returncode != 0 and "tokenizer.json: git blob id" in r.stderr, r.stderr


def test_401_says_to_set_a_token(hub, tmp_path, by_path):
    cache = tmp_path / "hub"
    hub.token = "hf_secret"
    r = generate(REPO, env_for(hub, cache))
    assert r.returncode != 0
    assert "HTTP 401" in r.stderr and "HF_TOKEN" in r.stderr, r.stderr
    assert cache_files(cache) == []
    wrong = generate(REPO, env_for(hub, cache, HF_TOKEN="hf_wrong"))
    assert wrong.returncode != 0 and "HTTP 401" in wrong.stderr and "may not read" in wrong.stderr, wrong.stderr
    r = generate(REPO, env_for(hub, cache, HF_TOKEN="hf_secret"))
    assert r.returncode == 0 and r.stdout == by_path, r.stderr
    # The token goes to the hub, never to the CDN (another origin) the files are redirected to.
    cdn = [auth for _, p, _, auth in hub.requests if p.startswith("/cdn/")]
    assert cdn and all(auth is None for auth in cdn), cdn


def test_missing_revision_and_repository_are_named(hub, tmp_path):
    cache = tmp_path / "hub"
    r = generate(REPO, env_for(hub, cache), "--revision", "nope")
    assert r.returncode != 0 and f"{REPO}@nope" in r.stderr and "HTTP 404" in r.stderr, r.stderr
    r = generate("tiny-org/absent", env_for(hub, cache))
    assert r.returncode != 0 and "tiny-org/absent@main" in r.stderr and "HTTP 404" in r.stderr, r.stderr
    assert not os.path.exists(cache)
    r = generate(REPO, env_for(hub, cache), "--revision", "../../etc")
    assert r.returncode != 0 and "--revision" in r.stderr, r.stderr


def test_a_path_never_downloads(hub, tmp_path, by_path):
    # A folder that exists is read as it is, even when it looks like a hub id.
    local = tmp_path / "tiny-org" / "qwen2-tiny"
    shutil.copytree(QWEN2_HF, local)
    r = subprocess.run([os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "build", "nanoserve")),
                        "generate", REPO, *PROMPT, *SMALL], cwd=tmp_path, capture_output=True, text=True,
                       env={**os.environ, **env_for(hub, tmp_path / "hub")}, timeout=60)
    assert r.returncode == 0 and r.stdout == by_path, r.stderr
    # A missing path that is no hub id is just missing.
    r = generate(str(tmp_path / "nope.gguf"), env_for(hub, tmp_path / "hub"))
    assert r.returncode != 0 and "no such file or folder" in r.stderr, r.stderr
    assert hub.requests == []
    assert not os.path.exists(tmp_path / "hub")
