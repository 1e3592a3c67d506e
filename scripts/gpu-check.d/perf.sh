# scripts/gpu-check, section 5 ("perf", with "peer", "offline" and
# "defaults"): the linears and the sampler, then the end-to-end rows of the
# 8B dummy (bench, serving, start-up), the other shapes, the offline run.
# Sourced by scripts/gpu-check (its variables and helpers in scope); defines
# tpot, step, ttft, tps and served_row, which the targets' table reads.

if want perf; then
if ! skip ops; then
echo "== linears: linear_cuda and cuBLASLt (model_ops_cuda_bench)"
"$bin/model_ops_cuda_bench" > "$out/ops-bench.log" 2>&1 || status=1
grep -E "^(qkv|o|gate_up|down|lm_head) " "$out/ops-bench.log" | grep -E " (1|8|64|1024) +(ours|per-shape) "
for M in 1 8 64; do
  tbs=$(awk -v m="$M" '$5 == m && $6 == "ours" { printf "%s %s, ", $1, $9 }' "$out/ops-bench.log")
  row "linear_cuda TB/s at M = $M" "${tbs%, }"
done
for M in 1 8 64; do
  tbs=$(awk -v m="$M" '$5 == m && $6 == "fp8" { printf "%s %s, ", $1, $9 }' "$out/ops-bench.log")
  row "linear_cuda FP8 weights TB/s at M = $M (FP8 bytes)" "${tbs%, }"
done
tf=$(awk '$5 == 1024 && $6 == "ours" { printf "%s %s, ", $1, $10 }' "$out/ops-bench.log")
row "linear_cuda TFLOP/s at M = 1024" "${tf%, }"
# "sample R 1 T 0.8 k 50 p 0.95   168.57 us ...": the time is the field before
# "us"; the name is padded, so two spaces end it ("... p 0.9" is not "... p 0.9 peaked").
sample_us() { awk -v c="$1" '$0 ~ "^sample +" c "  " { for (i = 1; i <= NF; ++i) if ($i == "us") print $(i - 1) }' "$out/ops-bench.log"; }
row "sample_cuda over V 128256, us a call at R = 1 / 64 rows" \
  "T 1: $(sample_us "R 1 T 1") / $(sample_us "R 64 T 1"); T 0.8 k 50 p 0.95: $(sample_us "R 1 T 0.8 k 50 p 0.95") / $(sample_us "R 64 T 0.8 k 50 p 0.95")"
row "  T 0.8 p 0.9, uniform logits (to the host) / peaked (a nucleus of ~100)" \
  "$(sample_us "R 1 T 0.8 p 0.9") / $(sample_us "R 64 T 0.8 p 0.9"); $(sample_us "R 1 T 0.8 p 0.9 peaked") / $(sample_us "R 64 T 0.8 p 0.9 peaked")"
if [[ -x "$bin/paged_attention_cuda_bench" ]]; then
  echo "== paged attention, one layer of the 8B shape: the split kernel and the tile arithmetic"
  "$bin/paged_attention_cuda_bench" --custom 1:4096 --custom 64:4096 --extend 1:1024 --extend 1:4096 \
    > "$out/attention-tiles.log" 2>&1 || status=1
  # The same over fp8 pools (their shapes named "... fp8").
  "$bin/paged_attention_cuda_bench" --fp8 --custom 1:4096 --custom 64:4096 --extend 1:1024 \
    >> "$out/attention-tiles.log" 2>&1 || status=1
  # "B=1 L=4096   default   7.23 us ...", "B=1 L=1024 rows=1024 tiles   52.66 us ...": the field before "us".
  att() { grep -E "^$1 +$2 +[0-9.]+ us" "$out/attention-tiles.log" | awk '{ for (i = 1; i <= NF; ++i) if ($i == "us") print $(i - 1) }'; }
  for shape in "B=1 L=4096" "B=64 L=4096" "B=1 L=1024 rows=1024" "B=1 L=4096 rows=4096" "B=1 L=4096 fp8" \
    "B=64 L=4096 fp8" "B=1 L=1024 rows=1024 fp8"; do
    echo "$shape: split kernel $(att "$shape" default) us, tile arithmetic $(att "$shape" tiles) us"
    what="decode"
    [[ "$shape" == *rows=* ]] && what="prefill"
    row "paged attention, $what $shape, one layer, us" \
      "tile arithmetic (the default) $(att "$shape" tiles); split kernel $(att "$shape" default)"
  done
fi

fi  # ops
dummy=(--load-format dummy --model-shape llama-3-8b --device cuda --temperature 0)
echo "== Llama-3-8B shape, dummy weights"
bench8b() {  # label, then bench flags (greedy unless they set the sampling)
  local label=$1
  shift
  local model=("${dummy[@]}")
  [[ " $* " == *" --temperature "* ]] && model=("${dummy[@]::6}")
  "$bin/nanoserve" bench "${model[@]}" --num-warmups 1 "$@" > "$out/bench-$label.log" 2>&1 || status=1
  grep -E "^batched|^KV cache|CUDA graphs|host time between|error" "$out/bench-$label.log" | head -5
}
# A chat client's sampling: drawn on the device (top-k bounds the candidates).
sampled=(--temperature 0.8 --top-k 50 --top-p 0.95)
startup=skipped served=skipped
# Waits up to 90 s for the server on port $1 to answer /health (through
# Python: a GPU machine's image need not have curl).
wait_health() {
  python3 - "$1" <<'PY'
import sys, time, urllib.request
url = f"http://127.0.0.1:{sys.argv[1]}/health"
deadline = time.time() + 90
while time.time() < deadline:
    try:
        with urllib.request.urlopen(url, timeout=1) as r:
            if r.status == 200:
                sys.exit(0)
    except OSError:
        pass
    time.sleep(0.1)
sys.exit(1)
PY
}
# Serving (issue 35's rows): the client against the server on port $1 (the
# CUDA defaults, 256 sequences and 2,048 tokens a step), 512 random ids in and
# 256 out, at concurrency 64 and 256, a fresh --seed each run so that no
# prompt repeats. Outputs of ids past the tokenizer's 49,152 decode to no
# text and send no chunk: the token counts are the server's usage, and TTFT
# is the first chunk with text (at most a few steps late). Logs
# serve$2-c{64,256}.log.
serve_runs() {
  for conc in 64 256; do
    "$bin/nanoserve" bench serve --port "$1" --dataset-name random --random-input-len 512 \
      --random-output-len 256 --num-prompts $((conc * 4)) --max-concurrency "$conc" --ignore-eos \
      --seed "$RANDOM" --metric-percentiles 50,99 > "$out/serve$2-c$conc.log" 2>&1 || status=1
  done
}
if ! skip 8b; then
bench8b b1 --num-prompts 1 --input-len 128 --output-len 256
bench8b b1-eager --num-prompts 1 --input-len 128 --output-len 256 --enforce-eager
bench8b b8 --num-prompts 8 --input-len 128 --output-len 128
bench8b b64 --num-prompts 64 --input-len 512 --output-len 64 --max-num-seqs 64 --max-num-batched-tokens 4096
bench8b b1-sampled --num-prompts 1 --input-len 128 --output-len 256 "${sampled[@]}"
bench8b b64-sampled --num-prompts 64 --input-len 512 --output-len 64 --max-num-seqs 64 \
  --max-num-batched-tokens 4096 "${sampled[@]}"
bench8b prefill --num-prompts 1 --input-len 1024 --output-len 1 --max-num-batched-tokens 2048
bench8b prefill-cublas --num-prompts 1 --input-len 1024 --output-len 1 --max-num-batched-tokens 2048 --cublas-prefill
fp8=(--quantization fp8)
bench8b b1-fp8 --num-prompts 1 --input-len 128 --output-len 256 "${fp8[@]}"
bench8b b8-fp8 --num-prompts 8 --input-len 128 --output-len 128 "${fp8[@]}"
bench8b b64-fp8 --num-prompts 64 --input-len 512 --output-len 64 --max-num-seqs 64 --max-num-batched-tokens 4096 \
  "${fp8[@]}"
bench8b prefill-fp8 --num-prompts 1 --input-len 1024 --output-len 1 --max-num-batched-tokens 2048 "${fp8[@]}"
# FP8 weights and the fp8 KV cache together (issue 35's FP8 column).
fp8kv=(--quantization fp8 --kv-cache-dtype fp8)
bench8b b1-fp8kv --num-prompts 1 --input-len 128 --output-len 256 "${fp8kv[@]}"
bench8b b64-fp8kv --num-prompts 64 --input-len 512 --output-len 64 --max-num-seqs 64 --max-num-batched-tokens 4096 \
  "${fp8kv[@]}"
bench8b prefill-fp8kv --num-prompts 1 --input-len 1024 --output-len 1 --max-num-batched-tokens 2048 "${fp8kv[@]}"
fi  # 8b
if ! skip spec; then
# Speculative decoding, n-gram k = 4: prompts that quote a paragraph and begin
# quoting it again (bench/datasets/repeat_text.jsonl), with and without in the
# same process; random prompts sampled at temperature 1 (few proposals kept).
ngram='{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}'
# Two engines in one process (with and without): each KV pool sized here.
rep=(--dataset-name custom --dataset-path bench/datasets/repeat_text.jsonl --no-enable-prefix-caching --kv-cache-memory 16G
  --speculative-config "$ngram" --compare-speculative)
# What a verify step's extra rows cost: plain decode steps of 12 and 16 rows (8 is b8's).
bench8b b12 --num-prompts 12 --input-len 128 --output-len 128
bench8b b16 --num-prompts 16 --input-len 128 --output-len 128
bench8b spec-b1 "${rep[@]}" --num-prompts 4 --custom-output-len 256 --max-num-seqs 1 --rounds 2
# Best of two rounds, as at batch 1: the first round of a batch meets most of
# its step shapes for the first time (each runs eagerly once, then is captured:
# 31 captures, 51 ms of a 0.9 s round at batch 8 in the first GPU run).
# At batch 8, 32 requests through 8 slots: a request that finishes early
# (its proposals kept) frees its slot for the next, as in serving, instead of
# the round waiting for the one that kept the fewest.
bench8b spec-b8 "${rep[@]}" --num-prompts 32 --custom-output-len 128 --max-num-seqs 8 --rounds 2
bench8b spec-b64 "${rep[@]}" --num-prompts 64 --custom-output-len 64 --max-num-seqs 64 --rounds 2
bench8b spec-random --num-prompts 4 --input-len 128 --output-len 128 --max-num-seqs 1 --temperature 1 \
  --kv-cache-memory 16G --speculative-config "$ngram" --compare-speculative --rounds 2
# The same prompts on the default model's real weights (which do quote them,
# as the 8B dummy's random weights do not), batch 1, 8 and 64.
for b in 1 8 64; do
  "$bin/nanoserve" bench -m "$model" --device cuda --temperature 0 --num-warmups 1 "${rep[@]}" \
    --num-prompts $((b == 1 ? 4 : b == 8 ? 32 : b)) --custom-output-len $((b == 64 ? 64 : b == 8 ? 128 : 256)) --max-num-seqs "$b" \
    --rounds 2 > "$out/bench-spec-real-b$b.log" 2>&1 || status=1
done
fi  # spec
spec() {  # speed-up, acceptance, identical outputs; CUDA graphs captured (and their ms) per engine
  local f="$out/bench-$1.log"
  echo "$(grep -oE "speed-up [0-9.]+x" "$f" | tail -1 | awk '{print $2}') ($(grep -oE "acceptance rate [0-9.]+%" "$f" |
    head -1 | awk '{print $3}') kept; identical: $(grep -oE "identical with and without speculative decoding: [a-zA-Z]+" "$f" |
    awk '{print $NF}'); graphs: $(grep -oE "CUDA graphs: [0-9]+ captured, [0-9.]+ ms" "$f" | awk '{print $3 "/" $5 "ms"}' |
    paste -sd' ' -))"
}
# The host's time between steps while the GPU waits (CudaModel's log line at exit), us.
gap() { grep -oE "host time between steps: [0-9.]+" "$out/bench-$1.log" | head -1 | awk '{print $NF}'; }
tpot() { grep -oE "TPOT median [0-9.]+" "$out/bench-$1.log" | awk '{print $NF}'; }
ttft() { grep -oE "TTFT median [0-9.]+" "$out/bench-$1.log" | awk '{print $NF}'; }
step() { grep -oE "mean step [0-9.]+" "$out/bench-$1.log" | awk '{print $NF}'; }
tps() { grep -oE "^(batched|cache) .*output [0-9.]+" "$out/bench-$1.log" 2>/dev/null | awk '{print $NF}'; }
peer() { grep -F "$1" "$out/transformers.log" 2>/dev/null | head -1 | awk -F': ' '{print $NF}'; }
# The peer's figure for a workload (its lines "compile: WHAT ..." and "eager: WHAT ..."), both modes.
vs() {
  local c e
  c=$(peer "compile: $1") e=$(peer "eager: $1")
  echo "transformers compile ${c:-n/a}, eager ${e:-n/a}"
}

# A dummy shape's decode at batch 1 (128 in, 256 out) and at batch 64 (512
# in, 64 out): bench-PREFIX-b1.log and bench-PREFIX-b64.log.
shape_bench() {  # prefix, then the shape's flags
  local prefix=$1 job args
  shift
  for job in "$prefix-b1 --num-prompts 1 --input-len 128 --output-len 256" \
    "$prefix-b64 --num-prompts 64 --input-len 512 --output-len 64 --max-num-seqs 64 --max-num-batched-tokens 4096"; do
    read -r -a args <<<"$job"
    "$bin/nanoserve" bench "$@" --num-warmups 1 "${args[@]:1}" > "$out/bench-${args[0]}.log" 2>&1 || status=1
    grep -E "^batched|^KV cache|CUDA graphs|error" "$out/bench-${args[0]}.log" | head -4
  done
}
if ! skip shapes; then
# Qwen3-30B-A3B (128 experts, top-8 of ffn 768, 48 layers of 2048), dummy
# bf16 weights. Floor (H200, 4.2 TB/s read): a token reads attention 37.7 MB
# + router 1.0 MB + 8 experts x 9.44 MB = 114.3 MB a layer, x 48 = 5.49 GB,
# + lm_head 0.62 GB: 6.1 GB, 1.46 ms. Batch 64 (context ~540): the experts
# routed to in a layer are ~126 of 128 (128 (1 - (120/128)^64)), 1.19 GB a
# layer, 57.0 GB, + attention 1.8 + lm_head 0.6 + KV 3.4 GB: 62.8 GB, ~15 ms.
moe_shape=(--load-format dummy --model-shape qwen3-30b-a3b --device cuda --temperature 0)
echo "== Qwen3-30B-A3B shape, dummy weights"
shape_bench moe "${moe_shape[@]}"

# gpt-oss-20b (32 experts, top-4 of ffn 2880, 24 layers of 2880, 64 heads of
# 64 over 8 kv heads, 128-token windows on the even layers), dummy bf16
# weights (the MXFP4 experts of a real checkpoint go up as bf16 too). Floor
# (H200, 4.2 TB/s read): a token reads attention (5120 + 2880 rows of 2880 and
# 4096) 53.1 MB + router 0.37 MB (f32) + 4 experts x 49.8 MB (3 x 2880 x
# 2880 bf16) = 252.5 MB a layer, x 24 = 6.06 GB, + lm_head (201088 x 2880)
# 1.16 GB: 7.22 GB, 1.72 ms. Batch 64 (context ~544): every expert is routed
# to (32 (1 - (28/32)^64) = 31.99), 1.65 GB a layer, 39.5 GB, + lm_head 1.16 +
# KV 1.06 GB (2 KB a position a layer; the sliding layers read 128 positions):
# 41.7 GB, ~9.9 ms.
oss_shape=(--load-format dummy --model-shape gpt-oss-20b --device cuda --temperature 0)
echo "== gpt-oss-20b shape, dummy weights"
shape_bench oss "${oss_shape[@]}"
# Greedy output of the gpt-oss-20b shape alone = in a batch of 32 (sinks, windows, experts at full size).
"$bin/nanoserve" bench "${oss_shape[@]}" --input-len 200 --output-len 48 --range-ratio 0.5 --compare-serial \
  --no-enable-prefix-caching --num-prompts 32 --max-num-seqs 64 > "$out/invariance-oss-32.log" 2>&1
if grep -q "outputs identical batched and serial: yes" "$out/invariance-oss-32.log"; then
  oss_inv=identical
else
  oss_inv=$(grep -oE 'request [0-9]+ differs' "$out/invariance-oss-32.log" | head -1 || echo error)
  status=1
fi

fi  # shapes
if ! skip startup; then
echo "== start-up of the 8B dummy to /health (serve; CUDA graphs are captured lazily, on a key's second step)"
t0=$(date +%s.%N)
"$bin/nanoserve" serve "${dummy[@]::6}" --port 18777 > "$out/serve-8b.log" 2>&1 &
spid=$!
ok=no
wait_health 18777 && ok=yes
startup=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
if [[ $ok == yes ]]; then
  python3 - <<'PY' > "$out/serve-8b-client.log" 2>&1 && served=ok || { served=FAILED; status=1; }
from openai import OpenAI
c = OpenAI(base_url="http://127.0.0.1:18777/v1", api_key="none")
m = c.models.list().data[0].id
r = c.chat.completions.create(model=m, messages=[{"role": "user", "content": "hi"}], max_tokens=16)
assert r.usage.completion_tokens == 16 or r.choices[0].finish_reason == "stop", r
s = c.completions.create(model=m, prompt="hello", max_tokens=8, stream=True)
print(sum(1 for _ in s), "stream chunks")
PY
  [[ $served == ok ]] || served="FAILED: $(tail -1 "$out/serve-8b-client.log")"
  serve_runs 18777 ""
else
  startup="no /health in 90 s"
  served=FAILED
  status=1
fi
kill $spid 2>/dev/null; wait $spid 2>/dev/null
grep -E "CUDA graphs|host time between" "$out/serve-8b.log" | tail -2
# The same server one step at a time (--no-async-scheduling): asynchronous
# scheduling's before and after, with the GPU's idle time a step from each log.
# A server of the 8B dummy with more flags: its log LOG.log, its runs
# (serve_runs) named with SUFFIX.
serve_with() {  # port, suffix, log, then serve's flags
  local port=$1 suffix=$2 log=$3
  shift 3
  "$bin/nanoserve" serve "${dummy[@]::6}" "$@" --port "$port" > "$out/$log.log" 2>&1 &
  spid=$!
  if wait_health "$port"; then
    serve_runs "$port" "$suffix"
  else
    status=1
  fi
  kill $spid 2>/dev/null; wait $spid 2>/dev/null
}
serve_with 18779 -sync serve-8b-sync --no-async-scheduling
grep -E "host time between" "$out/serve-8b-sync.log" | tail -1
# The same with FP8 weights and the fp8 KV cache (the FP8 column of issue 35's table).
serve_with 18778 -fp8 serve-8b-fp8 --quantization fp8 --kv-cache-dtype fp8

fi  # startup
if ! skip shapes; then
echo "== Gemma-3-12B shape, dummy weights (head_dim 256, 5 local layers to a global one)"
shape_bench g12 --load-format dummy --model-shape gemma-3-12b --device cuda --temperature 0

fi  # shapes
if want peer; then
  echo "== HF transformers on the same workloads (bench/transformers_peer.py)"
  timeout 420 python3 bench/transformers_peer.py --shape llama-3-8b > "$out/transformers.log" 2>&1
  cat "$out/transformers.log"
fi
if want offline; then
  echo "== offline: 500 requests of 1,000 in and 1,000 out, EOS ignored (bf16; FP8 weights + fp8 KV)"
  bench8b offline --num-prompts 500 --input-len 1000 --output-len 1000 --max-num-seqs 256 \
    --max-num-batched-tokens 8192
  bench8b offline-fp8kv --num-prompts 500 --input-len 1000 --output-len 1000 --max-num-seqs 256 \
    --max-num-batched-tokens 8192 --quantization fp8 --kv-cache-dtype fp8
fi

row "8B decode batch 1, ms/token (target 3.9, floor 3.54)" \
  "$(tpot b1) ($(vs 'decode batch 1,'))"
row "  same with --enforce-eager (no CUDA graphs)" "$(tpot b1-eager)"
row "  same, sampled on the device (${sampled[*]})" "$(tpot b1-sampled)"
row "8B decode batch 8, ms/step (target 4.0, floor ~3.6)" \
  "$(step b8) ($(vs 'decode batch 8,'))"
row "8B decode batch 64, context ~512, ms/step (target 5.0, floor ~4.6)" \
  "$(step b64) ($(vs 'decode batch 64,'))"
row "  same, TPOT with the other requests' prefill, ms" "$(tpot b64)"
row "  same, sampled on the device, ms/step" "$(step b64-sampled)"
row "8B prefill 1024 tokens, TTFT ms (target 25)" \
  "$(ttft prefill) ($(vs 'prefill 1024, batch'))"
row "  same with --cublas-prefill (not invariant)" "$(ttft prefill-cublas)"
row "8B FP8 weights decode batch 1, ms/token (target 2.2, floor ~1.8)" "$(tpot b1-fp8)"
row "8B FP8 weights decode batch 8, ms/step" "$(step b8-fp8)"
row "8B FP8 weights decode batch 64, ms/step (target 3.0)" "$(step b64-fp8)"
row "8B FP8 weights prefill 1024 tokens, TTFT ms (target 15)" "$(ttft prefill-fp8)"
row "8B FP8 weights + fp8 KV decode batch 1, ms/token (target 2.2)" "$(tpot b1-fp8kv)"
row "8B FP8 weights + fp8 KV decode batch 64, ms/step (target 3.0)" "$(step b64-fp8kv)"
row "8B FP8 weights + fp8 KV prefill 1024 tokens, TTFT ms (target 15)" "$(ttft prefill-fp8kv)"
row "  fp8 KV pool: blocks (bf16 KV's in the same memory)" \
  "$(grep -oE 'KV cache: [0-9]+ blocks' "$out/bench-b64-fp8kv.log" | head -1 | grep -oE '[0-9]+') ($(grep -oE 'KV cache: [0-9]+ blocks' "$out/bench-b64-fp8.log" | head -1 | grep -oE '[0-9]+'))"
if want defaults; then
  # The scheduler's limits (issue 35's per-device defaults): 512 requests of
  # 512 in and 256 out at once, each pair of --max-num-seqs and
  # --max-num-batched-tokens; output tok/s, TTFT and TPOT medians, preemptions.
  echo "== scheduler limits: 512 x 512/256, all at once"
  for lim in 64:512 128:2048 256:2048 256:8192 512:8192 1024:8192; do
    bench8b "lim-$lim" --num-prompts 512 --input-len 512 --output-len 256 --max-num-seqs "${lim%%:*}" \
      --max-num-batched-tokens "${lim##*:}" > /dev/null
    row "limits seqs:tokens $lim, 512 x 512/256: output tok/s" \
      "$(tps "lim-$lim") (TTFT median $(ttft "lim-$lim") ms, TPOT median $(tpot "lim-$lim") ms; preemptions $(grep -oE "preemptions [0-9]+" "$out/bench-lim-$lim.log" | head -1 | awk '{print $2}'))"
  done
fi
if want offline; then
  row "8B offline 500 x 1000/1000, output tok/s (target 11,800; FP8 17,744)" \
    "$(tps offline) (TTFT median $(ttft offline) ms, TPOT median $(tpot offline) ms); FP8 weights + fp8 KV $(tps offline-fp8kv)"
fi
row "8B n-gram k 4, repetitive, batch 1: speed-up (target 2x)" "$(spec spec-b1)"
row "  same, 8B dummy (random weights quote little), batch 8" "$(spec spec-b8)"
row "  8B decode step at 8 / 12 / 16 rows, ms (a verify step's rows)" "$(step b8) / $(step b12) / $(step b16)"
row "  same, 8B dummy, batch 64" "$(spec spec-b64)"
row "  default model (real weights), repetitive, batch 1" "$(spec spec-real-b1)"
row "  same at batch 8" "$(spec spec-real-b8)"
row "  same at batch 64" "$(spec spec-real-b64)"
row "  random prompts, temperature 1, batch 1 (target >= 0.95x)" "$(spec spec-random)"
# Floors at 4.2 TB/s (this GPU's copy rate): 23.5 GB of bf16 weights a step
# (48 layers of 224M parameters and the 262208 x 3840 lm_head); at batch 64
# also the KV, 393 KB a position (48 layers x 8 kv heads x 256 x K, V x 2
# bytes), 64 x ~550 positions: 13.8 GB.
row "Gemma-3-12B decode batch 1, ms/token (floor ~5.6)" "$(tpot g12-b1)"
row "Gemma-3-12B decode batch 64, context ~512, ms/step (floor ~8.9)" "$(step g12-b64)"
row "Qwen3-30B-A3B decode batch 1, ms/token (floor 1.46: 6.1 GB at 4.2 TB/s)" "$(tpot moe-b1)"
row "Qwen3-30B-A3B decode batch 64, ms/step (floor ~15: 62.8 GB)" "$(step moe-b64)"
row "host time between steps, us: batch 1 / 8 / 64 (GPU idle)" "$(gap b1) / $(gap b8) / $(gap b64)"
row "gpt-oss-20b decode batch 1, ms/token (floor 1.72: 7.22 GB at 4.2 TB/s)" "$(tpot oss-b1)"
row "gpt-oss-20b decode batch 64, ms/step (floor ~9.9: 41.7 GB)" "$(step oss-b64)"
row "gpt-oss-20b shape greedy alone = in a batch of 32 (dummy)" "${oss_inv:-n/a}"
row "8B start-up to /health 200, s (target 15)" "$startup"
served_row() {  # output tok/s (TPOT median / p99) of $out/$1.log
  local f="$out/$1.log"
  [[ -s $f ]] || { echo "n/a"; return; }
  echo "$(awk -F': *' '/^Output token throughput/ {print $2}' "$f" | awk '{print $1}') \
(TPOT $(awk '/^Median TPOT/ {print $NF}' "$f") / $(awk '/^P99 TPOT/ {print $NF}' "$f") ms; \
failed $(awk '/^Failed requests/ {print $NF}' "$f"))"
}
row "8B serving, concurrency 64, output tok/s (target 8,300; TPOT p99 <= 9)" "$(served_row serve-c64)"
row "8B serving, concurrency 256, output tok/s (target 11,100; TPOT p99 <= 30)" "$(served_row serve-c256)"
row "  one step at a time (--no-async-scheduling), concurrency 64" "$(served_row serve-sync-c64)"
row "  one step at a time (--no-async-scheduling), concurrency 256" "$(served_row serve-sync-c256)"
served_gap() { grep -oE "host time between steps: [0-9.]+" "$out/$1.log" | tail -1 | awk '{print $NF}'; }
row "serving host time between steps, us: async / one at a time" "$(served_gap serve-8b) / $(served_gap serve-8b-sync)"
row "  FP8 weights + fp8 KV, concurrency 64 (target 12,000)" "$(served_row serve-fp8-c64)"
row "  FP8 weights + fp8 KV, concurrency 256 (target 16,000)" "$(served_row serve-fp8-c256)"
row "serve 8B dummy to the openai client" "$served"
fi  # perf
