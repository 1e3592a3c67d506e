"""--speculative-config through `generate` and `bench` (serve: tests/server/test_speculative_serve.py)."""
import os
import re
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BINARY = os.path.join(ROOT, "build", "nanoserve")
MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
NGRAM = ('{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3, "prompt_lookup_min": 1, '
         '"adaptive": false}')  # always propose: these tests are about verification, not sizing
# A prompt the model answers by copying: n-gram proposals are mostly right.
PROMPT = "Repeat exactly: the quick brown fox jumps over the lazy dog. the quick brown fox jumps over the lazy dog."


def run(*args, timeout=300):
    assert os.path.exists(BINARY), "build nanoserve first (scripts/build)"
    return subprocess.run([BINARY, *args], capture_output=True, text=True, timeout=timeout)


def test_generate_prints_the_same_text_with_and_without_speculation():
    base = ["generate", "-m", MODEL, "-p", PROMPT, "-n", "24", "--temperature", "0", "--ignore-eos"]
    plain = run(*base)
    spec = run(*base, "--speculative-config", NGRAM)
    assert plain.returncode == 0, plain.stderr
    assert spec.returncode == 0, spec.stderr
    assert spec.stdout == plain.stdout
    # Seeded sampling too: the same tokens, not only the same distribution.
    sampled = ["--temperature", "0.8", "--seed", "3"]
    assert run(*base, *sampled).stdout == run(*base, *sampled, "--speculative-config", NGRAM).stdout


def test_bad_speculative_config_is_refused_by_name():
    for cfg, word in [("{bad", "not JSON"), ('{"method": "eagle", "model": "x", "num_speculative_tokens": 2}', "eagle"),
                      ('{"method": "ngram"}', "num_speculative_tokens"),
                      ('{"method": "ngram", "num_speculative_tokens": 2, "lookahead": 1}', "lookahead"),
                      ('{"model": "/nonexistent.gguf", "num_speculative_tokens": 2}', "nonexistent")]:
        r = run("generate", "-m", MODEL, "-p", "x", "-n", "2", "--speculative-config", cfg)
        assert r.returncode != 0, cfg
        assert "speculative" in r.stderr and word in r.stderr, (cfg, r.stderr)


def test_bench_prints_acceptance_and_identical_outputs():
    r = run("bench", "-m", MODEL, "--num-prompts", "2", "--dataset-name", "custom", "--dataset-path",
            os.path.join(ROOT, "bench", "datasets", "repeat_text.jsonl"), "--custom-output-len", "16",
            "--temperature", "0", "--speculative-config", NGRAM, "--compare-speculative", "--no-enable-prefix-caching")
    assert r.returncode == 0, r.stderr
    m = re.search(r"speculative: (\d+) drafts, (\d+) proposed tokens, (\d+) accepted \| acceptance rate ([\d.]+)%",
                  r.stdout)
    assert m, r.stdout
    assert int(m.group(2)) > 0 and 0 < int(m.group(3)) <= int(m.group(2))
    assert "outputs identical with and without speculative decoding: yes" in r.stdout
    assert re.search(r"best of 1: speculative [\d.]+ tok/s, plain [\d.]+ tok/s \| speed-up [\d.]+x", r.stdout)
    # The sizing's step overhead, one ratio per round and the summary with the batch size and the acceptance.
    assert re.search(r"mean acceptance length [\d.]+ \| step overhead [\d.]+ rows", r.stdout), r.stdout
    assert re.search(r"speed-up per round: [\d.]+x \| median [\d.]+x", r.stdout), r.stdout
    s = re.search(r"speculative summary: max_num_seqs (\d+) \| acceptance ([\d.]+)% of (\d+) proposed tokens", r.stdout)
    assert s, r.stdout
    assert int(s.group(3)) >= int(m.group(2)) and 0 < float(s.group(2)) <= 100.0
