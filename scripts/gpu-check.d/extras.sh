# scripts/gpu-check, sections 6-8, each only when asked for: the paged
# attention benchmark (NS_ATTENTION_BENCH=1), "tiles" (the FP8 product probe
# and every linear kernel forced) and "profile" (Nsight Compute). Sourced by
# scripts/gpu-check (its variables and helpers in scope).

if want perf && [[ "${NS_ATTENTION_BENCH:-0}" == 1 ]]; then
  echo "== paged attention benchmark"
  rm -rf /tmp/pa_dump && mkdir -p /tmp/pa_dump
  "$bin/paged_attention_cuda_bench" --csv "$out/bench.csv" --dump /tmp/pa_dump 2>&1 | tee "$out/attention.log" | tail -12
  python3 bench/paged_attention_torch.py --dump /tmp/pa_dump --csv "$out/bench.csv" 2>&1 | tail -6
fi

if want tiles; then
  echo "== tiles: the FP8 product probe, and every linear kernel forced"
  if [[ -x "$bin/fp8_mma_agree_cuda_bench" ]]; then
    "$bin/fp8_mma_agree_cuda_bench" > "$out/fp8-probe.log" 2>&1 || status=1
    cat "$out/fp8-probe.log"
    # Rows "data K what differ/of error": every wgmma pair must agree (mma.sync is expected not to).
    agree=$(awk '$3 ~ /^n[0-9]/ && $0 !~ /mma.sync|alone/ { split($(NF-1), f, "/"); bad += f[1] } END { print bad + 0 }' \
      "$out/fp8-probe.log")
    row "FP8 wgmma: a column's bits across widths and A's forms (differing elements)" "$agree"
  else
    row "FP8 wgmma: a column's bits across widths and A's forms (differing elements)" "n/a (no probe binary)"
  fi
  "$bin/model_ops_cuda_bench" --sweep > "$out/sweep.log" 2>&1 || status=1
  # Columns: linear M dtype ours stream 128x64 128x128 128x256 256x128 128x128w 128x64w [cuBLASLt].
  awk 'BEGIN { split("128x64 128x128 128x256 256x128 128x128w 128x64w", tile, " ") }
       /^sweep, us: / && $6 != "ours" { best = 8; for (i = 9; i <= 13; ++i) if ($i + 0 < $best + 0) best = i
         if ($6 / $best > 1.03) printf "  %-8s %-4s M %5d: ours %7.1f, %-8s %7.1f (x%.2f)\n", $3, $5, $4, $6, tile[best - 7], $best, $6 / $best }' \
    "$out/sweep.log" | tee "$out/sweep-gains.log"
  row "linears: (linear, M, dtype) where a forced tile beats ours by > 3%" "$(wc -l < "$out/sweep-gains.log") of $(grep -c '^sweep, us: .* [0-9.]*$' "$out/sweep.log")"
fi

if want profile; then
  echo "== profile: Nsight Compute, one launch of each linear (inside the bench's graph)"
  prof_ok=1
  ncu_sections=(--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis
    --section Occupancy --section LaunchStats --section SchedulerStats --section WarpStateStats)
  key() {
    grep -E "^ +(Duration|DRAM Throughput|Memory Throughput|L2 Cache Throughput|L1/TEX Cache Throughput|Compute \(SM\) Throughput|Registers Per Thread|Waves Per SM|Theoretical Occupancy|Achieved Occupancy|Issued Warp Per Scheduler|No Eligible|L2 Hit Rate|Mem Busy|Max Bandwidth|Mem Pipes Busy|Warp Cycles Per Issued Instruction|Executed Ipc Active|Block Limit [A-Za-z ]+) " "$1" |
      sed "s/  */ /g" | head -28
  }
  # NAME:M[:fp8] KERNEL (fp8: the same weights in FP8 rows, --quantization fp8's path).
  for job in "o:1:fp8 linear_fp8_kernel" "gate_up:1:fp8 linear_fp8_kernel" "qkv:64:fp8 linear_fp8_kernel" \
    "down:64:fp8 linear_fp8_kernel" "gate_up:256:fp8 linear_fp8_kernel" "down:256:fp8 linear_fp8_kernel" \
    "gate_up:1024:fp8 linear_fp8_kernel" "gate_up:1024 linear_wgmma_kernel"; do
    shape=${job% *} kernel=${job#* }
    fp8=()
    [[ $shape == *:fp8 ]] && fp8=(--fp8) && shape=${shape%:fp8}
    log="$out/ncu-${shape/:/-}${fp8:+-fp8}.log"
    ncu --kernel-name "regex:$kernel" --launch-skip 2 --launch-count 1 "${ncu_sections[@]}" \
      "$bin/model_ops_cuda_bench" --only "$shape" "${fp8[@]}" > "$log" 2>&1 || prof_ok=0
    echo "-- $shape${fp8:+ fp8} ($kernel)"
    key "$log"
  done
  # The tile decode kernel (the default arithmetic) at batch 64, context 4,096, over each pool.
  # Also its warps' stall samples by SASS instruction (SourceCounters), and
  # where they gather: scripts/ncu_stalls.py over the report's source page.
  for pool in bf16 fp8; do
    log="$out/ncu-attention-decode-$pool.log" rep="$out/ncu-attention-decode-$pool"
    ncu --kernel-name "regex:tile_decode_kernel" --launch-skip 2 --launch-count 1 "${ncu_sections[@]}" \
      --section SourceCounters --import-source yes --export "$rep" --force-overwrite \
      "$bin/paged_attention_cuda_bench" $([[ $pool == fp8 ]] && echo --fp8) --custom 64:4096 > "$log" 2>&1 || prof_ok=0
    ncu --import "$rep.ncu-rep" --page details --print-details all >> "$log" 2>&1 || prof_ok=0
    ncu --import "$rep.ncu-rep" --page source --csv --print-source sass > "$rep-sass.csv" 2>&1 || prof_ok=0
    echo "-- attention decode B=64 L=4096 $pool (tile_decode_kernel)"
    key "$log"
    python3 scripts/ncu_stalls.py "$rep-sass.csv" | tee "$rep-stalls.txt" || prof_ok=0
  done
  row "profile (Nsight Compute, 8 linears, 2 attention kernels)" "$( ((prof_ok)) && echo "reports in $out/ncu-*.log" || echo "ncu failed: $out/ncu-*.log")"
fi
