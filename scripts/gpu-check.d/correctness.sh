# scripts/gpu-check, section 1-4 ("correctness"): the transformers oracle, the
# CUDA tests, compute-sanitizer, batch invariance and the server on the GPU.
# Sourced by scripts/gpu-check: its variables (bin, model, out, status) and
# helpers (row, want, skip) are in scope, and rows it adds reach the summary.

if want correctness; then
echo "== transformers oracle (scripts/hf_oracle.py)"
oracle=/tmp/hf_oracle
# Made again only when the script that makes it changed (kept in /tmp between runs).
stamp=$(sha256sum scripts/hf_oracle.py | cut -d' ' -f1)
if [[ "$(cat "$oracle/.made_by" 2>/dev/null)" != "$stamp" ]]; then
  rm -rf "$oracle"
  if python3 scripts/hf_oracle.py make "$oracle" > "$out/hf_oracle.log" 2>&1; then
    echo "$stamp" > "$oracle/.made_by"
  else
    status=1
  fi
  grep -E "^hf_oracle|Error" "$out/hf_oracle.log" | tail -8
fi

echo "== CUDA tests"
NS_HF_ORACLE_DIR=$oracle "$bin/nanoserve_cuda_tests" --gtest_filter="${NS_TEST_FILTER:-*}" > "$out/tests.log" 2>&1
rc=$?
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure$|Expected|Which is|SKIPPED|no CUDA device" "$out/tests.log" | head -30
grep -E "^prompt [0-9]+|greedy agreement|Batch invariance|rows differ|rows equal|^speculative cuda" "$out/tests.log" | head -40
passed=$(grep -oE "^\[  PASSED  \] [0-9]+" "$out/tests.log" | grep -oE "[0-9]+$")
failed=$(grep -cE "^\[  FAILED  \] [A-Za-z].* \([0-9]+ ms\)$" "$out/tests.log")  # each once, not again in the list
row "CUDA tests (ops, attention, model vs CPU and transformers)" "${passed:-0} passed, $failed failed"
((rc == 0)) || status=1
# A family's first "family NAME: ..." line of the tests in $line, or its
# "no result" row and status 1; the planted error's distance in a line.
family_line() {
  line=$(grep -E "^family $1: " "$out/tests.log" | head -1)
  [[ -n $line ]] || { row "$1 vs transformers" "n/a (no result)"; return 1; }
}
planted_of() { grep -oE "planted error \([^)]*\) [0-9.]+x" <<<"$1"; }
# One row a family: NMSE against transformers, the planted error's distance, greedy tokens.
for fam in llama mistral qwen2 qwen3 phi3 mistral_window gemma2 gemma3; do
  family_line "$fam" || continue
  nmse=$(grep -oE "worst NMSE vs transformers [0-9.e+-]+" <<<"$line" | awk '{print $NF}')
  planted=$(planted_of "$line")
  greedy=$(grep -oE "greedy [0-9]+/[0-9]+" <<<"$line")
  row "$fam vs transformers: worst NMSE (<= 1.5e-3; Gemma 4e-3), planted, greedy" "$nmse; $planted (> 2.5x); $greedy"
  line=$(grep -E "^family $fam fp8: " "$out/tests.log" | head -1)
  nmse=$(grep -oE "worst NMSE vs transformers [0-9.e+-]+" <<<"$line" | awk '{print $NF}')
  planted=$(planted_of "$line")
  row "  FP8 (W8A8) vs transformers over the same FP8 weights and token codes (<= 0.2)" "${nmse:-n/a}; ${planted:-n/a} (> 2.5x)"
done
# Gemma on the GPU against the CPU forward of the same weights (model_gemma_cuda_test.cc).
for fam in gemma2 gemma3; do
  nmse=$(grep -oE "^$fam on the GPU vs the CPU forward: worst NMSE [0-9.e+-]+" "$out/tests.log" | awk '{print $NF}')
  planted=$(grep -oE "^family $fam gpu: planted error \([^)]*\) [0-9.]+x" "$out/tests.log" |
    sed -E 's/^family [a-z0-9]+ gpu: planted error //' | paste -sd ';' -)
  row "$fam GPU vs CPU forward: worst NMSE (<= 1.5e-3); plants (> 2.5x)" "${nmse:-n/a}; ${planted:-n/a}"
  inv=$(grep -cE "^$fam: logits alone = batched = chunked = eager" "$out/tests.log")
  row "  $fam logits alone = batched = chunked = graphed, bitwise" "$( ((inv)) && echo yes || echo "n/a or no")"
done
# gpt-oss on the GPU against the CPU forward of the same weights (tests/model/gptoss_cuda_test.cc:
# a tiny gpt-oss of head_dim 64), its kernels (sinks in the paged attention, the oss experts, YaRN's
# factor in the rope) and the fixtures' upload.
line=$(grep -E "^family gpt-oss gpu: worst NMSE" "$out/tests.log" | head -1)
nmse=$(grep -oE "worst NMSE [0-9.e+-]+" <<<"$line" | awk '{print $NF}')
sink=$(grep -oE "planted error \(sink ignored\) [0-9.]+x" <<<"$line" | awk '{print $NF}')
clear=$(grep -oE "^gpt-oss on the GPU vs the CPU forward: .*" "$out/tests.log" | grep -oE "over [0-9]+ clear positions of [0-9]+" |
  awk '{print $2 "/" $NF}')
row "gpt-oss GPU vs CPU forward: worst NMSE, clear routing (<= 3e-3)" "${nmse:-n/a} (${clear:-n/a} positions)"
planted=$(grep -oE "^family gpt-oss gpu: planted error \([^)]*\) [0-9.]+x farther" "$out/tests.log" |
  sed -E 's/^family gpt-oss gpu: planted error //; s/ farther//' | paste -sd ';' -)
row "  gpt-oss plants (> 2.5x): sinks ignored ${sink:-n/a}" "${planted:-n/a}"
inv=$(grep -cE "^gpt-oss: logits alone = batched = chunked = eager" "$out/tests.log")
row "  gpt-oss logits alone = batched = chunked = graphed, bitwise" "$( ((inv)) && echo yes || echo "n/a or no")"
oss_ok=$(grep -cE "^\[       OK \] (GptOssCuda|MoeOssCuda|PagedAttentionCudaSinks)\.|^\[       OK \] RopeKvWriteCuda\.Yarn" "$out/tests.log")
row "gpt-oss tests: sinks (3), oss experts (4), YaRN rope (1), model (4)" "$oss_ok/12 passed"
sinks=$(grep -oE "sinks ignored, worst relative error [0-9.e+-]+" "$out/tests.log" | awk '{print $NF}' | sort -g | head -1)
row "  sinks ignored in the kernel, least row error (> 3x tolerance)" "${sinks:-n/a}"
# The mixtures of experts (tests/ops/moe/moe_cuda_test.cc, tests/model/moe_cuda_test.cc).
moe_ok=$(grep -cE "^\[       OK \] MoeCuda\." "$out/tests.log")
row "MoE ops: routing = CPU, ties, vs moe_ref, grouped = linear_cuda, invariant" "$moe_ok/5 passed"
moe_ok=$(grep -cE "^\[       OK \] MoeCudaModel\." "$out/tests.log")
row "MoE model: refusals, alone = batched bitwise, GGUF = HF experts" "$moe_ok/4 passed"
for fam in qwen3moe mixtral; do
  family_line "$fam" || continue
  nmse=$(grep -oE "worst NMSE vs transformers [0-9.e+-]+ over [0-9]+ of [0-9]+" <<<"$line" | awk '{print $5 " (" $7 "/" $9 " positions)"}')
  planted=$(planted_of "$line")
  row "$fam vs transformers, its experts forced: worst NMSE (<= 3e-3), planted" "$nmse; $planted (> 2.5x)"
  line=$(grep -E "^family $fam: the GPU vs the CPU forward" "$out/tests.log" | head -1)
  row "  GPU vs CPU forward (<= 3e-3); free-running GPU vs transformers" \
    "$(grep -oE "the CPU forward [0-9.e+-]+" <<<"$line" | awk '{print $NF}'); $(grep -oE "free-running GPU vs transformers [0-9.e+-]+" <<<"$line" | awk '{print $NF}')"
done
ggufs=$(grep -c "GGUF and HF folder upload the same device weights" "$out/tests.log")
row "GGUF = HF folder on the device, bitwise (families fixtures)" "$ggufs/5 families"
agree=$(grep -oE "greedy agreement GPU vs CPU: [0-9]+/[0-9]+" "$out/tests.log" | awk '{print $NF}')
row "default model greedy tokens, GPU = CPU (then a small margin)" "${agree:-n/a}"
fp8=$(grep -oE "^FP8 vs bf16: .*" "$out/tests.log" | head -1)
row "default model FP8 (W8A8) vs bf16 logits (a prompt's mean NMSE <= 0.2; scales x 2 > 3x)" "${fp8:-n/a}"
agree=$(grep -oE "greedy agreement FP8 vs bf16: [0-9]+/[0-9]+" "$out/tests.log" | awk '{print $NF}')
row "default model greedy tokens, FP8 = bf16 (then a tie within 3 sigma of FP8's noise)" "${agree:-n/a}"
# An FP8 checkpoint (Schemes/HfFp8Cuda.*) against the CPU in the GPU's W8A8 arithmetic.
ckpt=$(grep -oE "^per (channel|tensor): GPU vs CPU \(W8A8\) logits NMSE over [0-9]+ positions: mean [0-9.e+-]+, worst [0-9.e+-]+" \
  "$out/tests.log" | sed -E 's/: GPU vs CPU .*: mean/ mean/' | paste -sd ';' -)
row "FP8 checkpoint vs CPU (W8A8) logits (mean <= 5e-2, worst <= 0.25; plants' means > 0.15)" "${ckpt:-n/a}"
# The FP8 KV cache (CudaKvFp8.*, PagedAttentionFp8Cuda.*): logits against the bf16 cache, greedy agreement.
kvfp8=$(grep -oE "^fp8 KV vs bf16 KV: .*" "$out/tests.log" | head -1)
row "default model fp8 KV vs bf16 KV logits (mean NMSE <= 0.03, the worst row printed; K read x 2 fails)" "${kvfp8:-n/a}"
agree=$(grep -oE "greedy agreement fp8 KV vs bf16 KV: [0-9]+/[0-9]+" "$out/tests.log" | awk '{print $NF}')
row "default model greedy tokens, fp8 KV = bf16 KV (then a near tie)" "${agree:-n/a}"
# The KV swap area's copies (CudaSwap.CopyRateAgainstTheCostModel), against CudaRunner::kCopyBytesPerS.
swap=$(grep -E "^swap (out|in ): " "$out/tests.log" | sed -E 's/^swap (out|in) *: .* = ([0-9.]+) GB\/s.*/\1 \2 GB\/s/' | paste -sd ',' -)
row "KV swap copy, device blocks <-> pinned host (the cost model assumes 50 GB/s)" "${swap:-n/a}"

if ! skip sanitizer && command -v compute-sanitizer >/dev/null 2>&1; then
  echo "== compute-sanitizer (small shapes)"
  # Our kernels only: racecheck flags cuBLAS's own warp-specialized GEMM kernels,
  # so the model test (which runs GEMMs) goes through memcheck alone.
  for tool in memcheck racecheck; do
    filter='*KvWrite*:*ExtendChunks*:RmsNorm*:RopeKvWrite*:SiluMul*:GeluMul*:Softcap*:Embedding*:Argmax*:Gather*:LinearCuda.KernelsAgreeOnASmallProblem'
    filter+=':SampleCuda.NonFinite*:SampleCuda.WindowEdge*:SampleCuda.ExactBoundaries*'
    [[ $tool == memcheck ]] && filter+=':LlamaCuda.StepLimits*'
    filter+=':MoeCuda.RoutingMatchesCpu:MoeCuda.GroupedLinearEqualsLinearPerExpert'
    filter+=':MoeOssCuda.RoutingMatchesCpu:PagedAttentionCudaSinks.MinusInfinityIsNoSinks'
    # The families' kernels: windows, head_dim 256 and soft-caps, sinks, the
    # experts' GEMMs, the fp8 KV read, the FP8 weights' GEMM. Under racecheck
    # the bf16 head_dim 256 tests take ~130 s (past the timeout with the
    # rest): racecheck reads head_dim 256 through the fp8 pools' FamilyExtras
    # (the same split kernel, windows and soft-caps), memcheck through both.
    filter+=':PagedAttentionCuda.SlidingWindowMatchesReference:PagedAttentionCudaGemma.SoftcapMatchesReference'
    [[ $tool == memcheck ]] && filter+=':PagedAttentionCudaGemma.*'
    filter+=':PagedAttentionCudaSinks.MatchReference:MoeCuda.MatchesReference:MoeOssCuda.MatchesReference*'
    filter+=':PagedAttentionFp8Cuda.DecodeEqualsBf16OverDequantizedPools:PagedAttentionFp8Cuda.FamilyExtras*'
    filter+=':LinearFp8Cuda.KernelsAgreeBitForBit:PagedAttentionTiles.SmallSteps*:PagedAttentionFp8Cuda.TilesSmallSteps*'
    timeout 240 compute-sanitizer --tool "$tool" --error-exitcode 9 "$bin/nanoserve_cuda_tests" \
      --gtest_filter="$filter" > "$out/sanitizer-$tool.log" 2>&1
    src=$?
    summary=$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/sanitizer-$tool.log" | tail -1)
    echo "$tool: exit $src, $summary"
    row "compute-sanitizer $tool" "exit $src, ${summary:-no summary}"
    ((src == 0)) || status=1
  done
fi

if ! skip invariance; then
serve_args=(--device cuda)
echo "== batch invariance of greedy output (default model; bench --compare-serial, prefix cache off)"
invariance() {  # label, then extra flags
  local label=$1
  shift
  "$bin/nanoserve" bench -m "$model" "${serve_args[@]}" --temperature 0 --input-len 64 --output-len 48 \
    --range-ratio 0.5 --compare-serial --no-enable-prefix-caching "$@" > "$out/invariance-$label.log" 2>&1
  if grep -q "outputs identical batched and serial: yes" "$out/invariance-$label.log"; then
    echo identical
  else
    grep -oE 'request [0-9]+ differs' "$out/invariance-$label.log" | head -1 || echo error
  fi
}
for n in 8 32 64; do
  r=$(invariance "$n" --num-prompts "$n" --max-num-seqs 64)
  row "greedy output alone = in a batch of $n (GPU)" "$r"
  [[ $r == identical ]] || status=1
done
r=$(invariance "32-chunked" --num-prompts 32 --max-num-seqs 32 --max-num-batched-tokens 40)
row "  same, prefill chunked at 40 tokens a step, batch of 32" "$r"
[[ $r == identical ]] || status=1
for n in 8 64; do
  r=$(invariance "$n-fp8" --num-prompts "$n" --max-num-seqs 64 --quantization fp8)
  row "greedy output alone = in a batch of $n, FP8 weights" "$r"
  [[ $r == identical ]] || status=1
done
r=$(invariance "32-chunked-fp8" --num-prompts 32 --max-num-seqs 32 --max-num-batched-tokens 40 --quantization fp8)
row "  same, FP8, prefill chunked at 40 tokens a step, batch of 32" "$r"
[[ $r == identical ]] || status=1
for n in 8 64; do
  r=$(invariance "$n-kvfp8" --num-prompts "$n" --max-num-seqs 64 --kv-cache-dtype fp8)
  row "greedy output alone = in a batch of $n, fp8 KV cache" "$r"
  [[ $r == identical ]] || status=1
done
r=$(invariance "32-chunked-kvfp8" --num-prompts 32 --max-num-seqs 32 --max-num-batched-tokens 40 --kv-cache-dtype fp8)
row "  same, fp8 KV, prefill chunked at 40 tokens a step, batch of 32" "$r"
[[ $r == identical ]] || status=1
r=$(invariance "32-cublas" --num-prompts 32 --cublas-prefill)
row "  with --cublas-prefill (not invariant by design), batch of 32" "$r"
# Each family's oracle model: greedy alone = in batches of 8, 32 and 64.
for fam in llama mistral qwen2 qwen3 phi3 mistral_window gemma2 gemma3 qwen3moe mixtral; do
  res=""
  for n in 8 32 64; do
    r=$(model=$oracle/$fam invariance "$fam-$n" --num-prompts "$n" --max-num-seqs 64)
    res+="$n: $r, "
    [[ $r == identical ]] || status=1
  done
  row "$fam greedy alone = batched (8, 32, 64)" "${res%, }"
done

fi  # invariance
if ! skip server; then
echo "== the server on the GPU (openai client)"
NANOSERVE_BINARY=$bin/nanoserve NANOSERVE_SERVE_ARGS="--device cuda" NANOSERVE_MODEL=$model \
  timeout 400 python3 -m pytest -q -p no:cacheprovider tests/server/test_openai_server.py > "$out/server.log" 2>&1
src=$?
tail -3 "$out/server.log"
row "openai-client suite vs serve --device cuda" "$(tail -1 "$out/server.log" | tr -d '=' | xargs)"
((src == 0)) || status=1

fi  # server
fi  # correctness
