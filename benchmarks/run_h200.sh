#!/usr/bin/env bash
# One device call's worth of H200 work, in priority order, each step under its own time limit so
# a slow step cannot eat the rest. Usage (from the repository root on the GPU machine):
#   bash benchmarks/run_h200.sh OUT_DIR [STEP ...]
# Steps: tests76 stepprofile replayab tests75 trainab attnstages tests73 hostab eagerhost tests71 biasgrad transformerprofile tests69 softmaxphased e2etransformer tests tests_nm tests_rest tests67 csrbankssweep csrunscatter sddmmahead sddmm68 sddmmtileswalk sddmmstaged sddmmblocked tests66 csrbanks nmrowmajorb tests65 softmaxlevels softmaxgrouped nmpairsblocked nmpad8
# nmpairsfp16 csrslices nmsixteen nmpairs nmstoredas densifylarge expandpad csrpadb nmhalfdense csrlinearlayout nmcliffs nmcliffsfp32 nmwarps nmwarpsfp32 nmalias nmdensified nmfew nmunpackblocks nmfp32few compiledroutes weightcopies nmdecodeblocks sanitize sanitize-suite sanitize-workers scale sweeps expand onehot bitmap decodesplit softmaxheads softmaxalign indexwidth csrfew softmaxaligned softmaxrows nmtall csrlanes csrhints ncu profile trainstep quick llm llm_linear llm_linear_fp16 llm_large nm nmsparse nmsparse32 nmcold nmcold24 nmcoldc nmshared nmselect pdl csrsmall fewrows nmselectdt nmselectidx nmunpack nmunpackmore nmwgmma nmwgmmatests nmmmasp nmmmaspwide nmmmaspsplit nmselectsplit nmpermute nmpermuted cusparselt csrlines csrfewlines csrinplacecheck csrinplace layermemory nmmmaspout nmmmaspfew nmmmaspm2 nmmmaspm2p host csrscatter usertests launch smalllayers encoderlayers nmvwtiles csrroute e2ellama e2ellamainplace e2ellamapdl sddmmdw rowruns attnbwd routekernels nmmmaspfp16 nmvw nmxt csrcold csrdlmc sddmmentry e2e sddmm attention dlmc (default: tests quick
# llm e2e). expand: the N:M expand-and-dot sweep; profile: the sparse Transformer's kernels;
# onehot: the N:M one-hot tensor-core sweep; trainstep: the training step eager and as a graph;
# bitmap: the bitmap tensor-core prototype for unstructured weights (bitmap_sweep.py);
# decodesplit: split-K for the N:M decode kernel (nm_decode_split.py); softmaxheads: heads per
# softmax program (softmax_heads_sweep.py); indexwidth: int32 against int64 offsets in the
# decode kernels and the row softmax (index_width.py); csrfew: the CSR few-token kernel (csr_few_tokens.py);
# softmaxaligned: the row softmax with 16-byte loads and stores (softmax_aligned.py);
# nmtall: the N:M decode kernel with 16-128 rows a program and 16-64 slots a step
# (nm_decode_tall.py); csrlanes: the CSR one-token kernel's lane-major walk against its
# vectors (csr_token_lanes.py); softmaxrows: the row softmax walking many rows a program, the
# next row's loads first
# (softmax_rows.py); csrhints: cache hints for the CSR few-token kernel (csr_few_cache_hints.py); ncu: Nsight
# Compute sections of the kernels in ncu_cases.py. nmcold24 / nmcoldc: 2:4 decode tiles and the
# decode's cache hints cold (nm_decode_tall_cold.py); nmshared: the one-token decode
# gathering x from shared memory; nmxt: linear's x^T copy against a strided
# read (nm_decode_xt.py); csrdlmc: the general CSR kernel's tiles on DLMC (carry .dlmc, built by
# `make dlmc-subset`).
# sweeps: the densify and fused-attention sweeps that set their tuning defaults (never run yet).
# Results land in OUT_DIR/<step>/ with logs; bench steps compare with the last committed run.
set -u
out=${1:?usage: run_h200.sh OUT_DIR [STEP ...]}
shift
steps=${*:-tests quick llm e2e}
export PYTHONPATH=src PYTHONUNBUFFERED=1
# the newest committed run of each suite is its "previous version" (PREVIOUS_RUNS: another card's)
previous_runs=${PREVIOUS_RUNS:-"benchmarks/results/nvidia-h200/2026-12-03/at-49d5fa9 benchmarks/results/nvidia-h200/2026-12-01/at-a00b40d benchmarks/results/nvidia-h200/2026-12-01/at-078a137 benchmarks/results/nvidia-h200/2026-12-01/at-aed82fd benchmarks/results/nvidia-h200/2026-12-01/at-0697cec benchmarks/results/nvidia-h200/2026-12-01/at-b0dbdca benchmarks/results/nvidia-h200/2026-11-30/at-66451f2 benchmarks/results/nvidia-h200/2026-11-30/at-3cf23ad benchmarks/results/nvidia-h200/2026-11-30/at-0488441 benchmarks/results/nvidia-h200/2026-11-30/at-ac18a5d benchmarks/results/nvidia-h200/2026-11-30/at-94aadcc benchmarks/results/nvidia-h200/2026-11-30/at-a36e480 benchmarks/results/nvidia-h200/2026-11-30/at-b10f6fc benchmarks/results/nvidia-h200/2026-11-30/at-bf7c242 benchmarks/results/nvidia-h200/2026-11-30/at-56c4c49 benchmarks/results/nvidia-h200/2026-11-30/at-84bb050 benchmarks/results/nvidia-h200/2026-11-30/at-25e62da benchmarks/results/nvidia-h200/2026-11-30/at-f297d15 benchmarks/results/nvidia-h200/2026-11-30/at-466caa8 benchmarks/results/nvidia-h200/2026-11-30/at-115b193 benchmarks/results/nvidia-h200/2026-11-30/at-dd881b9 benchmarks/results/nvidia-h200/2026-11-30/at-15b48bc benchmarks/results/nvidia-h200/2026-11-30/at-cd77886 benchmarks/results/nvidia-h200/2026-11-30/at-a179149 benchmarks/results/nvidia-h200/2026-11-29-d benchmarks/results/nvidia-h200/2026-11-29"}
mkdir -p "$out"
host_ab() {  # host_ab VARIABLE SUFFIX: host_parts and eager_overhead with VARIABLE 0 / 1, twice
  local variable=$1 suffix=$2 on
  for on in 0 1 0 1; do
    env "$variable=$on" PYTHONPATH="$PWD/src" timeout 70 python3 benchmarks/sweeps/host_parts.py \
      >>"$out/host_parts_$suffix$on.txt" 2>&1
    env "$variable=$on" LS=8192 REPS=20 PYTHONPATH="$PWD/src" timeout 90 python3 \
      benchmarks/sweeps/eager_overhead.py >>"$out/eager_overhead_$suffix$on.txt" 2>&1
  done
}
bench() {  # bench NAME LIMIT ARGS...
  local name=$1 limit=$2
  shift 2
  local compare=() previous
  for previous in $previous_runs; do
    if [ -f "$previous/$name/results.jsonl" ]; then
      compare=(--compare "$previous/$name/results.jsonl")
      break
    fi
  done
  timeout "$limit" python3 -m sparsekernels.bench "$@" "${compare[@]}" --out "$out/$name" \
    >"$out/$name.log" 2>&1
  echo "$name rc=$? $(date +%T)"
}
for step in $steps; do
  case $step in
    tests)
      timeout 400 python3 -m pytest -v -m "gpu and not slow" tests/ -p no:cacheprovider -n 10 -rf \
        >"$out/gpu_tests.log" 2>&1
      echo "tests rc=$? $(tail -1 "$out/gpu_tests.log")" ;;
    tests_nm|tests_rest)  # the GPU suite in two calls (whole, it outgrew one call; N:M ~380 s)
      nm_files="tests/test_kernels_spmm_nm*.py tests/test_nm.py"
      if [ "$step" = tests_nm ]; then selection=$nm_files; else
        selection="tests/ $(for f in $nm_files; do printf -- '--ignore=%s ' "$f"; done)"; fi
      # shellcheck disable=SC2086 # (the file lists split on spaces)
      timeout 540 python3 -m pytest -v -m "gpu and not slow" $selection -p no:cacheprovider \
        -n 12 -rf >"$out/gpu_$step.log" 2>&1
      echo "$step rc=$? $(tail -1 "$out/gpu_$step.log")" ;;
    sanitize)
      timeout 400 make sanitize >"$out/sanitize.log" 2>&1
      echo "sanitize rc=$? $(grep -c 'ERROR SUMMARY: 0 errors' "$out/sanitize.log") clean runs" ;;
    sanitize-suite)
      timeout 570 make sanitize-suite >"$out/sanitize_suite.log" 2>&1
      echo "sanitize-suite rc=$? $(grep -c 'ERROR SUMMARY: 0 errors' "$out/sanitize_suite.log") clean summaries" ;;
    sanitize-workers)  # the suite with each worker under its own sanitizer (Makefile)
      timeout 570 make sanitize-workers SANITIZE_LOGS="$out/memcheck" >"$out/sanitize_workers.log" 2>&1
      echo "sanitize-workers rc=$? $(tail -1 "$out/sanitize_workers.log") |" \
        "$(cat "$out"/memcheck/*.log | grep -c 'ERROR SUMMARY: 0 errors') clean summaries" \
        "in $(ls "$out"/memcheck | wc -l) worker logs" ;;
    scale)
      timeout 200 python3 -m pytest -q -m "gpu and slow" tests/test_scale.py -p no:cacheprovider \
        >"$out/scale.log" 2>&1
      echo "scale rc=$? $(tail -1 "$out/scale.log")" ;;
    sweeps)
      for sweep in densify_sweep attention_sweep; do
        timeout 150 python3 "benchmarks/sweeps/$sweep.py" >"$out/$sweep.txt" 2>&1
        echo "$sweep rc=$? $(tail -1 "$out/$sweep.txt")"
      done ;;
    expand)
      BUDGET_S=200 timeout 240 python3 benchmarks/sweeps/nm_expand_sweep.py >"$out/nm_expand_sweep.txt" 2>&1
      echo "expand rc=$? $(tail -1 "$out/nm_expand_sweep.txt")" ;;
    profile)
      timeout 90 python3 benchmarks/sweeps/transformer_profile.py >"$out/transformer_profile.txt" 2>&1
      timeout 60 python3 benchmarks/sweeps/attention_profile.py >"$out/attention_profile.txt" 2>&1
      timeout 90 python3 benchmarks/sweeps/llama_profile.py >"$out/llama_profile.txt" 2>&1
      echo "profile rc=$? $(head -3 "$out/transformer_profile.txt" | tr '\n' ' ')" ;;
    onehot)
      BUDGET_S=240 timeout 290 python3 benchmarks/sweeps/nm_onehot_sweep.py >"$out/nm_onehot_sweep.txt" 2>&1
      echo "onehot rc=$? $(tail -1 "$out/nm_onehot_sweep.txt")" ;;
    bitmap)  # unstructured sparsity on tensor cores from a bitmap (a prototype)
      BUDGET_S=200 timeout 250 python3 benchmarks/sweeps/bitmap_sweep.py >"$out/bitmap_sweep.txt" 2>&1
      echo "bitmap rc=$? $(tail -1 "$out/bitmap_sweep.txt")" ;;
    decodesplit)  # split-K for the N:M decode kernel (sets tuning.DECODE_SPLIT_PROGRAMS)
      BUDGET_S=150 timeout 190 python3 benchmarks/sweeps/nm_decode_split.py >"$out/nm_decode_split.txt" 2>&1
      echo "decodesplit rc=$? $(tail -1 "$out/nm_decode_split.txt")" ;;
    softmaxalign)  # the row softmax reading whole 16-byte groups ("/a", SOFTMAX_ALIGN) against the route
      FORMS=default,2/2/i64,2/2/i32,2/2/i32/a,2/2/i64/a,2/4/i32/a,4/2/i32/t,4/2/i32/t/a,4/4/i32/t/a,1/4/i32,1/4/i32/a \
        BUDGET_S=150 timeout 190 python3 benchmarks/sweeps/softmax_heads_sweep.py >"$out/softmax_align.txt" 2>&1
      echo "softmaxalign rc=$? $(tail -1 "$out/softmax_align.txt")" ;;
    softmaxheads)  # heads, warps and offset width per softmax program (sddmm_tuning.softmax_csr_config)
      BUDGET_S=150 timeout 190 python3 benchmarks/sweeps/softmax_heads_sweep.py >"$out/softmax_heads_sweep.txt" 2>&1
      echo "softmaxheads rc=$? $(tail -1 "$out/softmax_heads_sweep.txt")" ;;
    indexwidth)  # int32 against int64 offsets in the kernels (sets their INT32_LIMIT)
      timeout 150 python3 benchmarks/sweeps/index_width.py >"$out/index_width.txt" 2>&1
      echo "indexwidth rc=$? $(tail -1 "$out/index_width.txt")" ;;
    csrfew)  # the CSR few-token kernel (sets tuning.CSR_ROW_WALK_MAX_N, spmm_csr_few_config)
      BUDGET_S=150 timeout 200 python3 benchmarks/sweeps/csr_few_tokens.py >"$out/csr_few_tokens.txt" 2>&1
      echo "csrfew rc=$? $(tail -1 "$out/csr_few_tokens.txt")" ;;
    softmaxaligned)  # the row softmax with vector loads and stores (a prototype)
      BUDGET_S=60 timeout 100 python3 benchmarks/sweeps/softmax_aligned.py >"$out/softmax_aligned.txt" 2>&1
      echo "softmaxaligned rc=$? $(tail -1 "$out/softmax_aligned.txt")" ;;
    softmaxrows)  # the row softmax walking many rows a program (a prototype)
      BUDGET_S=90 timeout 130 python3 benchmarks/sweeps/softmax_rows.py >"$out/softmax_rows.txt" 2>&1
      echo "softmaxrows rc=$? $(tail -1 "$out/softmax_rows.txt")" ;;
    nmtall)  # the N:M decode kernel with tall, narrow tiles (nm_decode_tall.py)
      TOKENS=${TOKENS:-1,8} BUDGET_S=170 timeout 220 python3 benchmarks/sweeps/nm_decode_tall.py >"$out/nm_decode_tall.txt" 2>&1
      echo "nmtall rc=$? $(tail -1 "$out/nm_decode_tall.txt")" ;;
    nmcold)  # decode tiles, prefetch and split cold at 1 token, then 8 and 16 (nm_decode_tall_cold.py)
      CONFIGS=4x1024/2w,4x1024/2w/p,4x512/1w/p,4x256/1w,4x256/1w/p,2x256/1w/p,1x256/1w/p,4x256/1w/p/s2,8x256/2w,8x256/2w/p,32x16/1w,32x16/1w/p \
        TOKENS=1 timeout 260 python3 benchmarks/sweeps/nm_decode_tall_cold.py >"$out/nm_cold_1.txt" 2>&1
      echo "nmcold x1 rc=$? $(tail -1 "$out/nm_cold_1.txt")"
      CONFIGS=2x256/1w,2x256/1w/p,4x256/2w,32x16/1w,32x16/1w/p,32x16/2w,16x32/1w/p \
        TOKENS=8,16 timeout 260 python3 benchmarks/sweeps/nm_decode_tall_cold.py >"$out/nm_cold_8_16.txt" 2>&1
      echo "nmcold x8,16 rc=$? $(tail -1 "$out/nm_cold_8_16.txt")" ;;
    nmcold24)  # 2:4 decode tiles cold at 1 and 8 tokens (2:4 runs 0.64x dense at one token)
      PATTERNS=2:4 TOKENS=1,8 CONFIGS=4x1024/2w,4x1024/2w/c,4x1024/2w/p,2x1024/2w/p,4x1024/4w,4x512/1w,4x512/1w/c,4x256/1w,4x256/1w/c,2x256/1w,2x256/1w/p,4x1024/2w/s2 \
        timeout 280 python3 benchmarks/sweeps/nm_decode_tall_cold.py >"$out/nm_cold_24.txt" 2>&1
      echo "nmcold24 rc=$? $(tail -1 "$out/nm_cold_24.txt")" ;;
    nmcoldc)  # the decode's cache hints (/c: weight past L1, x kept) cold, 2:8 and 1:8 at one token
      TOKENS=1 CONFIGS=4x1024/2w,4x1024/2w/c,4x512/1w/c,4x256/1w,4x256/1w/c,4x256/1w/p/c,2x256/1w/c,1x256/1w/c \
        timeout 200 python3 benchmarks/sweeps/nm_decode_tall_cold.py >"$out/nm_cold_hints.txt" 2>&1
      echo "nmcoldc rc=$? $(tail -1 "$out/nm_cold_hints.txt")" ;;
    nmshared)  # one token: x's span of a step gathered from shared memory (/g) against L1 gathers
      TOKENS=1 PATTERNS=2:8,1:8,2:4 ORDERS=row \
        CONFIGS=4x1024/2w,4x1024/2w/g,8x1024/4w/g,4x512/1w,4x512/2w/g,4x256/1w,4x256/1w/g,2x256/1w/g \
        timeout 200 python3 benchmarks/sweeps/nm_decode_tall_cold.py >"$out/nm_cold_shared.txt" 2>&1
      echo "nmshared rc=$? $(tail -1 "$out/nm_cold_shared.txt")" ;;
    nmvw)  # the vector-wise N:M tensor-core kernel's tiles at 2048-4096 tokens (nm_vector_configs.py)
      BUDGET_S=220 timeout 280 python3 benchmarks/sweeps/nm_vector_configs.py >"$out/nm_vector_configs.txt" 2>&1
      echo "nmvw rc=$? $(tail -1 "$out/nm_vector_configs.txt")" ;;
    nmxt)  # linear's copy of x^T at 4-8 tokens against the decode kernel reading x^T strided (nm_decode_xt.py)
      timeout 200 python3 benchmarks/sweeps/nm_decode_xt.py >"$out/nm_decode_xt.txt" 2>&1
      echo "nmxt rc=$? $(tail -1 "$out/nm_decode_xt.txt")" ;;
    csrcold)  # the CSR one-token kernel's configurations cold (csr_token_cold.py)
      timeout 200 python3 benchmarks/sweeps/csr_token_cold.py >"$out/csr_token_cold.txt" 2>&1
      echo "csrcold rc=$? $(tail -1 "$out/csr_token_cold.txt")" ;;
    csrdlmc)  # the general CSR kernel's tiles on DLMC matrices, cold (csr_dlmc_configs.py; carry .dlmc)
      BUDGET_S=230 timeout 290 python3 benchmarks/sweeps/csr_dlmc_configs.py >"$out/csr_dlmc_configs.txt" 2>&1
      echo "csrdlmc rc=$? $(tail -1 "$out/csr_dlmc_configs.txt")" ;;
    csrpadb)  # the general CSR kernel on ResNet-50's DLMC layers with B padded to 16 columns
      # (N = 49 and 196 mask B's loads on N) against the library's B (csr_dlmc_configs.py; carry .dlmc)
      MODELS=rn50 CONFIGS=library/p BUDGET_S=200 timeout 260 python3 \
        benchmarks/sweeps/csr_dlmc_configs.py >"$out/csr_dlmc_padded_b.txt" 2>&1
      echo "csrpadb rc=$? $(tail -1 "$out/csr_dlmc_padded_b.txt")" ;;
    csrlinearlayout)  # linear's x^T for the general CSR kernel past 16 tokens: copied (the route)
      # against read in place (csr_linear_layout.py)
      timeout 280 python3 benchmarks/sweeps/csr_linear_layout.py >"$out/csr_linear_layout.txt" 2>&1
      echo "csrlinearlayout rc=$? $(grep -c . "$out/csr_linear_layout.txt") lines" ;;
    sddmmentry)  # the per-entry SDDMM's configurations (sddmm_entry_configs.py)
      timeout 200 python3 benchmarks/sweeps/sddmm_entry_configs.py >"$out/sddmm_entry_configs.txt" 2>&1
      echo "sddmmentry rc=$? $(tail -1 "$out/sddmm_entry_configs.txt")" ;;
    csrlanes)  # the CSR one-token kernel: lane-major walk against aligned vectors
      timeout 120 python3 benchmarks/sweeps/csr_token_lanes.py >"$out/csr_token_lanes.txt" 2>&1
      echo "csrlanes rc=$? $(tail -1 "$out/csr_token_lanes.txt")" ;;
    csrhints)  # cache hints for the CSR few-token kernel's loads
      timeout 120 python3 benchmarks/sweeps/csr_few_cache_hints.py >"$out/csr_few_cache_hints.txt" 2>&1
      echo "csrhints rc=$? $(tail -1 "$out/csr_few_cache_hints.txt")" ;;
    nmselect)  # the select kernel on the patterns the route does not send it yet (nm_select_cold.py)
      PATTERNS=1:2,1:4,4:8,1:16,2:16,4:16 SHAPES=4096x14336,14336x4096 timeout 420 \
        python3 benchmarks/sweeps/nm_select_cold.py >"$out/nm_select_other.txt" 2>&1
      echo "nmselect rc=$? $(tail -1 "$out/nm_select_other.txt")" ;;
    csrsmall)  # one token on few-row weights: the L1 walk's configurations
      CONFIGS=1x256x1,2x256x1,1x512x1,2x512x1,1x512x2,2x256x2,4x256x4,4x128x4 \
        SHAPES=1024x4096,2048x4096,1024x8192,4096x1024,384x1536,1536x384,768x768,2048x2048 \
        timeout 240 python3 benchmarks/sweeps/csr_token_cold.py >"$out/csr_token_cold_small.txt" 2>&1
      echo "csrsmall rc=$? $(tail -17 "$out/csr_token_cold_small.txt")" ;;
    fewrows)  # few-row weights (<= 2048 rows): the select tiles in fp16 and on the other
      # routed patterns, and the CSR few-token walk's configurations (the one-token rules'
      # idle-GPU question at 2-16 tokens)
      few=1024x4096,1024x8192,2048x4096
      DTYPE=fp16 SHAPES=$few PATTERNS=2:8,1:8 timeout 150 python3 benchmarks/sweeps/nm_select_cold.py \
        >"$out/nm_select_few_fp16.txt" 2>&1
      echo "fewrows select fp16 rc=$? $(tail -7 "$out/nm_select_few_fp16.txt")"
      SHAPES=$few PATTERNS=1:4,4:8 timeout 150 python3 benchmarks/sweeps/nm_select_cold.py \
        >"$out/nm_select_few_more.txt" 2>&1
      echo "fewrows select more rc=$? $(tail -7 "$out/nm_select_few_more.txt")"
      SHAPES=$few BUDGET_S=120 timeout 160 python3 benchmarks/sweeps/csr_few_tokens.py \
        >"$out/csr_few_tokens_few_rows.txt" 2>&1
      echo "fewrows csr few rc=$? $(tail -4 "$out/csr_few_tokens_few_rows.txt")" ;;
    nmring)  # the select kernel fed by a TMA ring: its GPU tests, then the cold sweep (nm_select_ring.py)
      timeout 200 python3 -m pytest -q -m gpu tests/test_kernels_spmm_nm_select_ring.py \
        -p no:cacheprovider -n 8 -rf >"$out/gpu_tests_nm_ring.log" 2>&1
      echo "nmring tests rc=$? $(tail -1 "$out/gpu_tests_nm_ring.log")"
      timeout 330 python3 benchmarks/sweeps/nm_select_ring.py >"$out/nm_select_ring.txt" 2>&1
      echo "nmring rc=$? $(tail -10 "$out/nm_select_ring.txt")" ;;
    nmpermute)  # x picked by byte permutes in the ring and select kernels: GPU tests, then sweeps
      timeout 200 python3 -m pytest -q -m gpu tests/test_kernels_spmm_nm_select_ring.py \
        tests/test_kernels_spmm_nm_select.py -p no:cacheprovider -n 8 -rf \
        >"$out/gpu_tests_nm_permute.log" 2>&1
      echo "nmpermute tests rc=$? $(tail -1 "$out/gpu_tests_nm_permute.log")"
      timeout 200 python3 benchmarks/sweeps/nm_select_ring.py >"$out/nm_select_ring.txt" 2>&1
      echo "ring rc=$? $(tail -9 "$out/nm_select_ring.txt")"
      CONFIGS=4x256/2w,4x256/2w/b,2x128/1w,2x128/1w/b,2x256/2w/b PATTERNS=2:8,1:8,4:8 \
        timeout 200 python3 benchmarks/sweeps/nm_select_cold.py >"$out/nm_select_permute.txt" 2>&1
      echo "select rc=$? $(tail -9 "$out/nm_select_permute.txt")" ;;
    nmpermuted)  # the permuted picks routed: through linear (ring, select), fp16, few-row tiles
      for dt in bf16 fp16; do
        DTYPE=$dt RINGS=16x4w/s2/p4/i/c/b/u PATTERNS=1:8,2:8 timeout 120 \
          python3 benchmarks/sweeps/nm_select_ring.py >"$out/nm_select_ring_$dt.txt" 2>&1
        echo "ring $dt rc=$? $(tail -1 "$out/nm_select_ring_$dt.txt")"
        DTYPE=$dt PATTERNS=2:8,4:8 CONFIGS=4x256/2w/b,2x256/2w/b,2x128/1w/b timeout 120 \
          python3 benchmarks/sweeps/nm_select_cold.py >"$out/nm_select_$dt.txt" 2>&1
        echo "select $dt rc=$? $(tail -1 "$out/nm_select_$dt.txt")"
      done
      SHAPES=1024x4096,1024x8192,2048x4096 PATTERNS=2:8,1:8,4:8 \
        CONFIGS=2x512/4w,2x512/4w/b,1x256/1w,1x256/1w/b timeout 120 \
        python3 benchmarks/sweeps/nm_select_cold.py >"$out/nm_select_few.txt" 2>&1
      echo "few rc=$? $(tail -1 "$out/nm_select_few.txt")" ;;
    cusparselt)  # the cuSPARSELt route: GPU tests, bf16/fp16 sweeps, fp16's transposing copy
      timeout 150 python3 -m pytest -q -m gpu tests/test_cusparselt_algs.py \
        tests/test_semi_structured.py -p no:cacheprovider -n 8 -rf \
        >"$out/gpu_tests_cusparselt.log" 2>&1
      echo "cusparselt tests rc=$? $(tail -1 "$out/gpu_tests_cusparselt.log")"
      for dtype in bf16 fp16; do
        DTYPE=$dtype SHAPES=4096x4096,14336x4096,4096x14336,28672x8192 \
          TOKENS=256,512,1024,2048,8192 timeout 150 \
          python3 benchmarks/sweeps/semistructured_sweep.py >"$out/semistructured_$dtype.txt" 2>&1
        echo "semistructured $dtype rc=$? $(tail -2 "$out/semistructured_$dtype.txt" | head -1)"
      done
      timeout 120 python3 benchmarks/sweeps/transposing_copy.py >"$out/transposing_copy.txt" 2>&1
      echo "transposing copy rc=$?"; tail -35 "$out/transposing_copy.txt" | cut -c1-150 ;;
    csrlines)  # the CSR one-token walks: line layout, inline-PTX gather; GPU tests, cold sweep
      timeout 200 python3 -m pytest -q -m gpu tests/test_kernels_spmm_csr_token_lines.py \
        tests/test_kernels_spmm_csr_token.py -p no:cacheprovider -n 8 -rf \
        >"$out/gpu_tests_csr_lines.log" 2>&1
      echo "csrlines tests rc=$? $(tail -1 "$out/gpu_tests_csr_lines.log")"
      timeout 380 python3 benchmarks/sweeps/csr_lines_cold.py >"$out/csr_lines_cold.txt" 2>&1
      echo "csrlines rc=$? $(tail -9 "$out/csr_lines_cold.txt")" ;;
    csrinplacecheck)  # the line walks on the CSR's own values: their GPU tests under memcheck
      # (a window read past the last entry would show: no caching allocator)
      PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 300 compute-sanitizer --tool memcheck \
        --error-exitcode 1 python3 -m pytest -q -m gpu -p no:cacheprovider -rf \
        tests/test_kernels_spmm_csr_token_lines.py tests/test_kernels_spmm_csr_few_lines.py \
        -k "in_place or routed" >"$out/memcheck_in_place.log" 2>&1
      echo "csrinplace memcheck rc=$? $(grep 'ERROR SUMMARY' "$out/memcheck_in_place.log")"
      ;;
    csrinplace)  # the sweeps' in-place forms (/v, /vm, linear+v) beside the packed ones
      SHAPES=4096x14336,14336x4096,28672x4096,4096x4096 \
        LINE_CONFIGS=2x256/w2/s/h,2x256/w2/s/v,2x256/w2/s/vm,2x256/w2/s/h/l16,2x256/w2/s/v/l16 \
        timeout 380 python3 benchmarks/sweeps/csr_lines_cold.py >"$out/csr_lines_cold.txt" 2>&1
      echo "csrlines rc=$? $(tail -9 "$out/csr_lines_cold.txt")"
      SPARSITIES=0.7,0.9 TOKENS=2,4 LINE_CONFIGS=2x256/w2,2x256/w2/v,2x256/w2/l16 timeout 300 \
        python3 benchmarks/sweeps/csr_few_lines_cold.py >"$out/csr_few_lines_cold.txt" 2>&1
      echo "csrfewlines rc=$? $(tail -17 "$out/csr_few_lines_cold.txt")" ;;
    layermemory)  # what a sparse layer holds once run: its weight and the routes' kept forms
      timeout 300 python3 benchmarks/sweeps/layer_memory.py >"$out/layer_memory.txt" 2>&1
      echo "layermemory rc=$? $(tail -6 "$out/layer_memory.txt")" ;;
    csrfewlines)  # the CSR few-token walk on the line layout: GPU tests, cold sweep at 2-16 tokens
      timeout 200 python3 -m pytest -q -m gpu tests/test_kernels_spmm_csr_few_lines.py \
        -p no:cacheprovider -n 8 -rf >"$out/gpu_tests_csr_few_lines.log" 2>&1
      echo "csrfewlines tests rc=$? $(tail -1 "$out/gpu_tests_csr_few_lines.log")"
      timeout 380 python3 benchmarks/sweeps/csr_few_lines_cold.py >"$out/csr_few_lines_cold.txt" 2>&1
      echo "csrfewlines rc=$? $(tail -17 "$out/csr_few_lines_cold.txt")" ;;
    pdl)  # programmatic dependent launch on the one-token routes (tests, pdl_chain.py)
      timeout 300 python3 -m pytest -q -m gpu tests/test_pdl.py tests/test_kernels_spmm_nm_select.py \
        tests/test_kernels_spmm_csr_token*.py -p no:cacheprovider -n 8 -rf \
        >"$out/gpu_tests_pdl.log" 2>&1
      echo "pdl tests rc=$? $(tail -1 "$out/gpu_tests_pdl.log")"
      timeout 420 python3 benchmarks/sweeps/pdl_chain.py >"$out/pdl_chain.txt" 2>&1
      echo "pdl rc=$? $(tail -1 "$out/pdl_chain.txt")" ;;
    nmselectdt)  # the select kernel in fp16 and fp32 on the routed patterns (nm_select_cold.py)
      for dt in fp16 fp32; do
        DTYPE=$dt PATTERNS=2:8,1:8,2:4 SHAPES=4096x14336,14336x4096 \
          CONFIGS=4x256/2w,2x256/2w,2x128/1w,4x128/2w timeout 200 \
          python3 benchmarks/sweeps/nm_select_cold.py >"$out/nm_select_$dt.txt" 2>&1
        echo "nmselect $dt rc=$? $(tail -1 "$out/nm_select_$dt.txt")"
      done ;;
    nmunpack)  # groups unpacked into a dense tile for one tl.dot at 1-16 tokens (nm_unpack_cold.py)
      timeout 540 python3 benchmarks/sweeps/nm_unpack_cold.py >"$out/nm_unpack.txt" 2>&1
      echo "nmunpack rc=$? $(tail -1 "$out/nm_unpack.txt")" ;;
    nmunpackblocks)  # block-wise 4:8 and 4:16 (v = b = 4) on the unpack kernel against the route
      PYTHONPATH=$PWD/src SHAPES=4096x4096,14336x4096,4096x14336 PATTERNS=4:8,4:16 VECTOR=4 \
        BLOCK=4 TOKENS=4,8,16,32,64 CONFIGS=64x32/4w/s3,64x32/4w/s3/h,64x16/4w/s3,64x16/4w/s3/k2,64x16/4w/s3/k4,64x16/4w/s2/n64 \
        timeout 260 python3 benchmarks/sweeps/nm_unpack_cold.py >"$out/nm_unpack_blocks.txt" 2>&1
      echo "nmunpackblocks rc=$? $(tail -1 "$out/nm_unpack_blocks.txt")" ;;
    nmfp32few)  # strict fp32 vector-wise at 1-16 tokens: the decode route against the few-token tiles
      (cd benchmarks/sweeps && PYTHONPATH=$PWD/../../src timeout 200 python3 nm_fp32_few.py \
        >"$out/nm_fp32_few.txt" 2>&1)
      (cd benchmarks/sweeps && PYTHONPATH=$PWD/../../src DTYPE=fp32 SHAPES=4096x4096,14336x4096 \
        TOKENS=1,8,16 FORMS=route,4r,4r4w timeout 120 python3 nm_decode_blocks.py \
        >"$out/nm_decode_blocks_fp32.txt" 2>&1)
      echo "nmfp32few rc=$? $(tail -1 "$out/nm_fp32_few.txt")" ;;
    nmcliffs|nmcliffsfp32|nmwarps|nmwarpsfp32|nmalias|nmdensified|nmhalfdense|nmstoredas|nmsixteen)
      # (nm_route_cliffs.py, ~150 s); nmcliffsfp32: the spill audit's fp32 element-wise / v = 4
      # cases on 2 and 4 warps; nmwarps: the sixty-first audit's 16-bit 8-row decode step at
      # 5-8 tokens (spilling on one warp) on 2 warps and 4 x 4; nmwarpsfp32: fp32 v = 8 at 17-32
      # tokens (the 4 x 4 step spilling) on 8 warps; nmalias: 1:4 and 1:2 at 17-64 tokens
      # (densified) read as 2:8 and 2:4; nmdensified: the other patterns densified at 17-64
      # tokens (v < 16) against the unpack kernel forced; nmhalfdense: the half-dense
      # vector-wise patterns at 1-12 tokens (0.36-0.7x dense): four warps, wider steps on four
      # warps (results/cpu/2026-12-06-halfdense-decode-analysis), the unpack kernel;
      # nmstoredas: m = 16 / 32 at 17-48 tokens (the expand kernel's m dots a step) stored as
      # 2:8, 1:8 or 4:16 (twice the slots) and routed so
      # nmsixteen: v = 64 at 9-15 tokens on 4096 rows, the 16-token tile (acda5fb) against
      # the route before it (from16)
      if [ "$step" = nmsixteen ]; then
        env_cases=(SHAPES=4096x4096,4096x14336 TOKENS=8,9,12,15,16 FORMS=route,from16
          CASES=bf16/16:32/64/1,bf16/4:8/64/1,bf16/8:32/64/1,fp16/4:8/64/1,fp32/4:8/64/1)
      elif [ "$step" = nmstoredas ]; then
        env_cases=(SHAPES=4096x4096,14336x4096,4096x14336 TOKENS=17,24,33,48
          FORMS=route,as2:8,as1:8,as4:16 CASES=bf16/2:16/8/1,bf16/2:16/1/1,bf16/1:16/8/1,bf16/4:32/8/1)
      elif [ "$step" = nmhalfdense ]; then
        env_cases=(SHAPES=4096x4096,14336x4096 TOKENS=1,2,4,8,12 FORMS=route,w4,s512w4,s1024w4,unpack
          CASES=bf16/4:8/8/1,bf16/4:8/64/1,bf16/16:32/64/1,bf16/64:128/64/64)
      elif [ "$step" = nmdensified ]; then
        env_cases=(SHAPES=4096x4096,14336x4096,4096x14336 TOKENS=17,24,32,48,64 FORMS=route,unpack
          CASES=bf16/4:16/1/1,bf16/8:16/1/1,bf16/16:32/1/1,bf16/8:32/1/1,bf16/4:16/8/1,bf16/8:16/4/1,bf16/4:8/1/4,fp16/8:16/1/1)
      elif [ "$step" = nmalias ]; then
        env_cases=(SHAPES=4096x4096,14336x4096,4096x14336 TOKENS=17,24,32,48,64 FORMS=route,alias
          CASES=bf16/1:4/1/1,bf16/1:4/8/1,bf16/1:2/1/1,fp16/1:4/1/1,bf16/1:4/4/1)
      elif [ "$step" = nmcliffs ]; then
        env_cases=(SHAPES=4096x4096,14336x4096,4096x14336 TOKENS=4,8,12,16 FORMS=route)
      elif [ "$step" = nmwarps ]; then
        env_cases=(SHAPES=4096x4096,14336x4096,4096x14336 TOKENS=5,8 FORMS=route,w2,4r4w
          CASES=bf16/2:16/8/1,bf16/16:32/64/1,bf16/8:16/16/1,bf16/4:16/8/1,bf16/1:32/8/1,fp16/8:32/64/1)
      elif [ "$step" = nmwarpsfp32 ]; then
        env_cases=(SHAPES=4096x4096,14336x4096 TOKENS=17,24,32 FORMS=route,w8
          CASES=fp32/1:8/8/1,fp32/2:16/8/1,fp32/4:32/8/1)
      else
        env_cases=(SHAPES=4096x4096,14336x4096 TOKENS=12,16,24,32 FORMS=route,w2,w4
          CASES=fp32/1:8/1/1,fp32/1:8/4/1,fp32/2:16/4/1,fp32/4:8/4/1,fp32/2:8/1/1,fp32/1:8/8/1)
      fi
      (cd benchmarks/sweeps && env PYTHONPATH="$PWD/../../src" "${env_cases[@]}" timeout 280 \
        python3 nm_route_cliffs.py >"$out/nm_route_$step.txt" 2>&1)
      echo "$step rc=$? $(grep -c . "$out/nm_route_$step.txt") lines" ;;
    nmunpackmore)  # the unpack kernel where it is not routed yet: fp16, 1:4 and 4:8 (bf16), 4-64 tokens
      for dt in bf16 fp16; do
        pats=$([ $dt = bf16 ] && echo 1:4,4:8 || echo 2:8,1:8,2:4)
        DTYPE=$dt PATTERNS=$pats TOKENS=4,8,16,32,64 \
          CONFIGS=64x32/4w/s3,64x32/4w/s3/n32,64x32/4w/s3/n64,64x32/4w/s2/n64/k4 timeout 270 \
          python3 benchmarks/sweeps/nm_unpack_cold.py >"$out/nm_unpack_$dt.txt" 2>&1
        echo "nmunpackmore $dt rc=$? $(tail -1 "$out/nm_unpack_$dt.txt")"
      done ;;
    nmwgmmatests)  # the wgmma kernel's GPU tests (test_kernels_spmm_nm_wgmma.py)
      timeout 300 python3 -m pytest -v -m gpu tests/test_kernels_spmm_nm_wgmma.py -p no:cacheprovider \
        -n 8 -rf -x >"$out/gpu_tests_wgmma.log" 2>&1
      echo "nmwgmmatests rc=$? $(tail -1 "$out/gpu_tests_wgmma.log")" ;;
    nmmmasp)  # the sparse tensor cores: GPU tests, then 2:8 and 1:8 (nm_mma_sp_cold.py; < 9 min)
      timeout 200 python3 -m pytest -q -m gpu tests/test_kernels_spmm_nm_mma_sp.py -n 8 \
        -p no:cacheprovider >"$out/gpu_tests_mma_sp.log" 2>&1
      echo "nmmmasp tests rc=$? $(tail -1 "$out/gpu_tests_mma_sp.log")"
      (cd benchmarks/sweeps && PYTHONPATH=$PWD/../../src PATTERNS=2:8,1:8 TOKENS=1,8,16,32 \
        CONFIGS=m1k8n1/b,m1k8n1,m1k8n2,m1k8n2/b timeout 320 python3 nm_mma_sp_cold.py \
        >"$out/nm_mma_sp_m8.txt" 2>&1)
      echo "nmmmasp m8 rc=$? $(tail -1 "$out/nm_mma_sp_m8.txt")" ;;
    nmmmaspwide)  # mma.sp's GPU tests; 2:8/1:8 at 2-4 tokens; B's 16-byte shared stores; fp16
      timeout 240 python3 -m pytest -q -m gpu tests/test_kernels_spmm_nm_mma_sp.py -n 8 \
        -p no:cacheprovider >"$out/gpu_tests_mma_sp.log" 2>&1
      echo "nmmmaspwide tests rc=$? $(tail -1 "$out/gpu_tests_mma_sp.log")"
      (cd benchmarks/sweeps && export PYTHONPATH=$PWD/../../src &&
        PATTERNS=2:8,1:8 TOKENS=2,3,4 CONFIGS=m1k8n1/b,m1k8n1/v timeout 100 python3 \
          nm_mma_sp_cold.py >"$out/nm_mma_sp_m8_few.txt" 2>&1
        echo "few rc=$? $(tail -1 "$out/nm_mma_sp_m8_few.txt")"
        PATTERNS=2:4,2:8,1:8 TOKENS=8,16 CONFIGS=m1k8n1/b,m1k8n1/v,m1k8n2,m1k8n2/b,m1k8n2/v \
          timeout 130 python3 nm_mma_sp_cold.py >"$out/nm_mma_sp_wide.txt" 2>&1
        echo "wide rc=$? $(tail -1 "$out/nm_mma_sp_wide.txt")"
        DTYPE=fp16 PATTERNS=2:4,2:8,1:8 TOKENS=1,8,16 CONFIGS=m1k8n1/b,m1k8n2 timeout 110 \
          python3 nm_mma_sp_cold.py >"$out/nm_mma_sp_fp16.txt" 2>&1
        echo "fp16 rc=$? $(tail -1 "$out/nm_mma_sp_fp16.txt")") ;;
    nmmmaspsplit)  # 2:8 and 1:8 on mma.sp: more programs an SM, loads a step ahead (bytes in flight)
      timeout 120 python3 -m pytest -q -m gpu tests/test_kernels_spmm_nm_mma_sp.py -k prefetch \
        -n 8 -p no:cacheprovider >"$out/gpu_tests_prefetch.log" 2>&1
      echo "prefetch tests rc=$? $(tail -1 "$out/gpu_tests_prefetch.log")"
      (cd benchmarks/sweeps && PYTHONPATH=$PWD/../../src PATTERNS=2:8,1:8 TOKENS=1,4,8,16 \
        CONFIGS=m1k8n1/b,m1k8n1/b/w8,m1k8n1/b/p,m1k8n1/b/p/w8,m1k8n1/v/w8,m1k8n2,m1k8n2/w8 timeout 300 \
        python3 nm_mma_sp_cold.py >"$out/nm_mma_sp_split.txt" 2>&1)
      echo "nmmmaspsplit rc=$? $(tail -1 "$out/nm_mma_sp_split.txt")" ;;
    nmselectsplit)  # the one-token select kernel with split-K (1:8 on 4096 rows: 0.65 waves)
      timeout 150 python3 -m pytest -q -m gpu tests/test_kernels_spmm_nm_select.py -k split \
        -n 8 -p no:cacheprovider >"$out/gpu_tests_select_split.log" 2>&1
      echo "select split tests rc=$? $(tail -1 "$out/gpu_tests_select_split.log")"
      SHAPES=4096x14336,14336x4096,4096x4096 PATTERNS=1:8,2:8,2:4 \
        CONFIGS=4x256/2w,4x256/2w/k2,4x256/2w/k4,4x256/2w/k8,2x128/1w,2x128/1w/k2,2x128/1w/k4 \
        timeout 300 python3 benchmarks/sweeps/nm_select_cold.py >"$out/nm_select_split.txt" 2>&1
      echo "nmselectsplit rc=$? $(tail -1 "$out/nm_select_split.txt")" ;;
    nmmmaspout)  # mma.sp into linear's column-major out: as now (/o) and stored by rows (/c)
      timeout 150 python3 -m pytest -q -m gpu tests/test_kernels_spmm_nm_mma_sp.py -k out_by_rows \
        -n 8 -p no:cacheprovider >"$out/gpu_tests_out_by_rows.log" 2>&1
      echo "out-by-rows tests rc=$? $(tail -1 "$out/gpu_tests_out_by_rows.log")"
      (cd benchmarks/sweeps && PYTHONPATH=$PWD/../../src PATTERNS=2:4,2:8,1:8 TOKENS=8,16 \
        CONFIGS=m1k8n1/b/o,m1k8n1/b/c,m1k8n1/v/o,m1k8n1/v/c,m1k8n1/b/w8/o,m1k8n1/b/w8/c,m1k8n1/v/w8/o,m1k8n1/v/w8/c,m1k8n2/o,m1k8n2/c timeout 300 \
        python3 nm_mma_sp_cold.py >"$out/nm_mma_sp_out.txt" 2>&1)
      echo "nmmmaspout rc=$? $(tail -1 "$out/nm_mma_sp_out.txt")" ;;
    nmmmaspfew)  # 2:8 and 1:8 at 1-3 tokens: waves of 4 against 8 programs an SM (select at 1-2)
      (cd benchmarks/sweeps && PYTHONPATH=$PWD/../../src PATTERNS=2:8,1:8 TOKENS=1,2,3 \
        CONFIGS=m1k8n1/b/w4,m1k8n1/b/w8,m1k8n1/v/w4,m1k8n1/v/w8 timeout 200 \
        python3 nm_mma_sp_cold.py >"$out/nm_mma_sp_few_w8.txt" 2>&1)
      echo "nmmmaspfew rc=$? $(tail -1 "$out/nm_mma_sp_few_w8.txt")" ;;
    nmmmaspm2)  # 2:8 and 1:8 with 2 and 4 m16 tiles a warp: B (L2 to shared, shared to
      # registers) shared by more rows (ncu at-4fd8525: 1:8's L1 77% busy, DRAM 37%)
      (cd benchmarks/sweeps && PYTHONPATH=$PWD/../../src PATTERNS=1:8,2:8 TOKENS=1,2,8,16 \
        CONFIGS=m1k8n1/b/w8,m2k8n1/b/w8,m2k8n1/b/w4,m4k8n1/b/w8,m2k8n1/v/w8,m1k8n2/w4,m2k8n2/w4 \
        timeout 400 python3 nm_mma_sp_cold.py >"$out/nm_mma_sp_m2.txt" 2>&1)
      echo "nmmmaspm2 rc=$? $(tail -1 "$out/nm_mma_sp_m2.txt")" ;;
    nmmmaspm2p)  # two m16 tiles a warp with each step's loads a step ahead (/p), and fewer
      # ranges (/s4, /s8): with B's share halved, is the walk's latency what holds 1:8 now?
      (cd benchmarks/sweeps && PYTHONPATH=$PWD/../../src PATTERNS=1:8,2:8 TOKENS=1,2,8,16 \
        CONFIGS=m2k8n1/b/w8,m2k8n1/b/w8/p,m2k8n1/b/p/s4,m2k8n1/b/p/s8,m2k8n2/w4,m2k8n2/w4/p \
        timeout 400 python3 nm_mma_sp_cold.py >"$out/nm_mma_sp_m2_prefetch.txt" 2>&1)
      echo "nmmmaspm2p rc=$? $(tail -1 "$out/nm_mma_sp_m2_prefetch.txt")" ;;
    host)  # host time of eager calls and where it goes (cProfile): sweeps/host_overhead.py
      PYTHONPATH=$PWD/src timeout 200 python3 benchmarks/sweeps/host_overhead.py \
        >"$out/host_overhead.txt" 2>&1
      echo "host rc=$? $(tail -14 "$out/host_overhead.txt" | tr '\n' ';')" ;;
    csrscatter)  # the scatter-into-shared-memory CSR kernel: its GPU tests, then the cold sweep
      timeout 240 python3 -m pytest -q -m gpu tests/test_kernels_spmm_csr_scatter.py \
        tests/test_csr_scatter_route.py -n 8 \
        >"$out/gpu_tests_csr_scatter.log" 2>&1
      echo "csrscatter tests rc=$? $(tail -1 "$out/gpu_tests_csr_scatter.log")"
      PYTHONPATH=$PWD/src timeout 300 python3 benchmarks/sweeps/csr_scatter_cold.py \
        >"$out/csr_scatter_cold.txt" 2>&1
      echo "csrscatter sweep rc=$?" ;;
    usertests)  # GPU cases of the route, inference_mode, autocast, launch plan and demo graph files
      timeout 240 python3 -m pytest -q -m gpu tests/test_csr_scatter_route.py tests/test_gpu.py \
        tests/test_inference_mode.py tests/test_autocast.py tests/test_launch_plans.py \
        tests/test_minilm_graphs.py -n 8 >"$out/gpu_tests_user.log" 2>&1
      echo "usertests rc=$? $(tail -1 "$out/gpu_tests_user.log")" ;;
    launch)  # eager host time by layer: sk.linear, the JIT launch, the compiled kernel's launcher
      PYTHONPATH=$PWD/src timeout 120 python3 benchmarks/sweeps/launch_overhead.py \
        >"$out/launch_overhead.txt" 2>&1
      echo "launch rc=$? $(tail -8 "$out/launch_overhead.txt" | tr '\n' ';')" ;;
    layerhost)  # a SparseLinear call's host time at MiniLM's sizes; the densify replay off and on
      PYTHONPATH=$PWD/src timeout 150 python3 benchmarks/sweeps/layer_host_time.py \
        >"$out/layer_host_time.txt" 2>&1
      echo "layerhost rc=$? $(tail -22 "$out/layer_host_time.txt" | tr '\n' ';')" ;;
    weightcopies)  # set_weight_copies: each choice's us a call and held bytes (weight_copies.py)
      PYTHONPATH=$PWD/src timeout 300 python3 benchmarks/sweeps/weight_copies.py \
        >"$out/weight_copies.txt" 2>&1
      echo "weightcopies rc=$? $(tail -29 "$out/weight_copies.txt" | tr '\n' ';')" ;;
    compiledroutes)  # compiled linear (the op's body chooses) against eager, forced cuSPARSELt
      PYTHONPATH=$PWD/src timeout 300 python3 benchmarks/sweeps/compiled_routes.py \
        >"$out/compiled_routes.txt" 2>&1
      echo "compiledroutes rc=$? $(tail -19 "$out/compiled_routes.txt" | tr '\n' ';')" ;;
    nmvwtiles)  # the vector-wise tensor-core kernel's tiles on small and encoder-sized weights
      PYTHONPATH=$PWD/src timeout 500 python3 benchmarks/sweeps/nm_vw_tiles.py \
        >"$out/nm_vw_tiles.txt" 2>&1
      echo "nmvwtiles rc=$?" ;;
    encoderlayers)  # BERT-base / large layers through linear: where vector-wise tiles are few
      SHAPES=768x768,3072x768,768x3072,1024x4096,4096x1024 TOKENS=128,256,512,1024 \
        PATTERNS=2:8v64,1:8v64,2:4v64,70%,90% PYTHONPATH=$PWD/src timeout 500 \
        python3 benchmarks/sweeps/small_layer_routes.py >"$out/encoder_layer_routes.txt" 2>&1
      echo "encoderlayers rc=$?" ;;
    smalllayers)  # MiniLM-sized layers through linear, every backend, warm and cold L2
      PYTHONPATH=$PWD/src timeout 420 python3 benchmarks/sweeps/small_layer_routes.py \
        >"$out/small_layer_routes.txt" 2>&1
      echo "smalllayers rc=$?" ;;
    csrroute)  # the scatter backend through linear against the CSR kernels, densify and dense
      PYTHONPATH=$PWD/src timeout 260 python3 benchmarks/sweeps/csr_scatter_route.py \
        >"$out/csr_scatter_route.txt" 2>&1
      echo "csrroute rc=$?" ;;
    sddmmdw)  # a CSR weight's gradient at 8192 tokens: the route, its product and gathers
      PYTHONPATH=$PWD/src timeout 200 python3 benchmarks/sweeps/sddmm_weight_grad.py \
        >"$out/sddmm_weight_grad.txt" 2>&1
      echo "sddmmdw rc=$? $(tail -1 "$out/sddmm_weight_grad.txt")" ;;
    rowruns)  # the H200 reading a weight in runs of 64-512 bytes a row a step (row_run_reads.py)
      PYTHONPATH=$PWD/src timeout 300 python3 benchmarks/sweeps/row_run_reads.py \
        >"$out/row_run_reads.txt" 2>&1
      echo "rowruns rc=$?" ;;
    attnstages)  # the fused attention's pipeline stages (the sm_90 audit's suggestions)
      (cd benchmarks/sweeps && PYTHONPATH=$PWD/../../src timeout 150 python3 \
        attention_stages.py >"$out/attention_stages.txt" 2>&1)
      echo "attnstages rc=$? $(tail -6 "$out/attention_stages.txt" | tr '\n' '|')" ;;
    attnbwd)  # the fused attention's forward and backward against SDPA's (attention_backward.py)
      (cd benchmarks/sweeps && PYTHONPATH=$PWD/../../src timeout 200 python3 \
        attention_backward.py >"$out/attention_backward.txt" 2>&1)
      echo "attnbwd rc=$?" ;;
    tests65)  # the GPU tests of the sixty-fourth's untimed changes and the softmax's new forms
      timeout 200 python3 -m pytest -q -m "gpu and not slow" -n 12 -p no:cacheprovider \
        tests/test_kernels_spmm_nm_pairs.py tests/test_kernels_spmm_nm.py \
        tests/test_kernels_spmm_nm_route_cliffs.py tests/test_kernels_spmm_nm_expand.py \
        tests/test_kernels_softmax_csr.py tests/test_softmax.py >"$out/gpu_tests65.log" 2>&1
      echo "tests65 rc=$? $(tail -1 "$out/gpu_tests65.log")" ;;
    softmaxlevels)  # causal rows read once on 2 or 4 blocks' lanes (/lN), the walk's max per
      # thread (/cN), 8 warps; forward (softmax_heads_sweep.py) and backward, L = 4096 and 8192
      for L in ${LS:-4096 8192}; do
        (cd benchmarks/sweeps && PYTHONPATH=$PWD/../../src L=$L KINDS=causal BUDGET_S=60 \
          FORMS=default,1/8/i32,1/4/i32/c8,1/4/i32/l2,1/8/i32/l1,1/8/i32/l2,1/8/i64/l2,1/8/i32/l2/c4 \
          timeout 75 python3 softmax_heads_sweep.py >"$out/softmax_levels_L$L.txt" 2>&1)
        (cd benchmarks/sweeps && PYTHONPATH=$PWD/../../src L=$L KINDS=causal \
          FORMS=default,8/l0,4/l2,8/l1,8/l2 timeout 60 python3 softmax_backward_levels.py \
          >"$out/softmax_backward_L$L.txt" 2>&1)
      done
      echo "softmaxlevels rc=$?" ;;
    eagerhost)  # the Sparse Transformer eager against graphs: host time, syncs, cProfile
      PYTHONPATH=$PWD/src timeout "${LIMIT:-300}" python3 benchmarks/sweeps/eager_overhead.py \
        >"$out/eager_overhead.txt" 2>&1
      echo "eagerhost rc=$? $(tail -9 "$out/eager_overhead.txt" | tr '\n' '|')" ;;
    tests73)  # the eager plans' GPU tests: training plans, densified linear, attention plans
      timeout "${LIMIT:-150}" python3 -m pytest -q -m gpu -n 8 -p no:cacheprovider \
        tests/test_densified_linear.py tests/test_eager_plans.py tests/test_eager_plans_gradient.py \
        tests/test_attention_plans.py tests/test_attention_packed.py tests/test_launch_plans.py \
        tests/test_linear.py tests/test_bias_grad.py tests/test_eager_plans_sequences.py \
        >"$out/gpu_tests73.log" 2>&1
      echo "tests73 rc=$? $(tail -1 "$out/gpu_tests73.log")" ;;
    tests76)  # the layers' own replays: their GPU tests, then the layer files with them on
      timeout "${LIMIT:-200}" python3 -m pytest -q -m gpu -n 8 -p no:cacheprovider \
        tests/test_repeat_calls.py tests/test_repeat_calls_attention.py tests/test_refit.py tests/test_dense_target.py \
        >"$out/gpu_tests76.log" 2>&1
      echo "tests76 rc=$? $(tail -1 "$out/gpu_tests76.log")"
      SPARSEKERNELS_LAYER_REPLAYS=1 timeout "${LIMIT:-200}" python3 -m pytest -q -m gpu -n 8 \
        -p no:cacheprovider tests/test_eager_plans.py tests/test_eager_plans_gradient.py \
        tests/test_linear.py tests/test_nn.py tests/test_nn_state.py tests/test_launch_plans.py \
        tests/test_prune.py tests/test_eager_plans_sequences.py tests/test_densified_linear.py \
        tests/test_attention_plans.py tests/test_attention_packed.py >"$out/gpu_tests76_on.log" 2>&1
      echo "tests76 replays on rc=$? $(tail -1 "$out/gpu_tests76_on.log")" ;;
    stepprofile)  # a SparseLinear's training step's host time by op, against nn.Linear's
      PYTHONPATH="$PWD/src" timeout 90 python3 benchmarks/sweeps/host_linear_step_profile.py \
        >"$out/host_linear_step_profile.txt" 2>&1
      echo "stepprofile rc=$? $(grep -h '^###' "$out/host_linear_step_profile.txt" | tr '\n' '|')" ;;
    replayab)  # eager host time with the layers' own replays off (0) and on (1), one tree
      host_ab SPARSEKERNELS_LAYER_REPLAYS replays
      echo "replayab: $(grep -h 'no grad' "$out"/host_parts_replays*.txt | tr '\n' '|')" ;;
    tests75)  # training launch plans: their GPU tests, then tests73's files with them on
      timeout "${LIMIT:-200}" python3 -m pytest -q -m gpu -n 8 -p no:cacheprovider \
        tests/test_launch_plans.py tests/test_attention_plans.py tests/test_densified_linear.py \
        >"$out/gpu_tests75.log" 2>&1
      echo "tests75 rc=$? $(tail -1 "$out/gpu_tests75.log")"
      SPARSEKERNELS_TRAINING_LAUNCH_PLANS=1 timeout "${LIMIT:-200}" python3 -m pytest -q -m gpu \
        -n 8 -p no:cacheprovider tests/test_eager_plans.py tests/test_eager_plans_gradient.py \
        tests/test_attention_packed.py tests/test_linear.py tests/test_eager_plans_sequences.py \
        tests/test_bias_grad.py >"$out/gpu_tests75_training_on.log" 2>&1
      echo "tests75 training on rc=$? $(tail -1 "$out/gpu_tests75_training_on.log")" ;;
    trainab)  # eager host time with training launch plans off (0) and on (1), one tree
      host_ab SPARSEKERNELS_TRAINING_LAUNCH_PLANS training
      echo "trainab: $(grep -h 'fwd+bwd' "$out"/host_parts_training*.txt | tr '\n' '|')" ;;
    hostab)  # eager host time, this tree against OLD (an older tree's src, carried untracked)
      for tree in "$PWD/src" ${OLD:+"$PWD/$OLD"}; do
        name=$(basename "$(dirname "$tree")")
        PYTHONPATH=$tree timeout 70 python3 benchmarks/sweeps/host_parts.py \
          >"$out/host_parts_$name.txt" 2>&1
        LS=8192 REPS=20 PYTHONPATH=$tree timeout 70 python3 benchmarks/sweeps/eager_overhead.py \
          >"$out/eager_overhead_$name.txt" 2>&1
        echo "hostab $name: $(tail -5 "$out/host_parts_$name.txt" | tr '\n' '|')"
        echo "  $(tail -4 "$out/eager_overhead_$name.txt" | tr '\n' '|')"
      done ;;
    tests71)  # the packed attention's GPU tests, with the fused attention's own
      timeout "${LIMIT:-120}" python3 -m pytest -q -m gpu -n 14 -p no:cacheprovider \
        tests/test_attention_packed.py tests/test_attention_block.py >"$out/gpu_tests71.log" 2>&1
      echo "tests71 rc=$? $(tail -1 "$out/gpu_tests71.log")" ;;
    biasgrad)  # a linear's bias gradient: torch's column sums against a GEMV (bias_grad.py)
      timeout 90 python3 benchmarks/sweeps/bias_grad.py >"$out/bias_grad.txt" 2>&1
      echo "biasgrad rc=$?" ;;
    transformerprofile)  # the Sparse Transformer's kernels alone (profile's first part)
      timeout 90 python3 benchmarks/sweeps/transformer_profile.py >"$out/transformer_profile.txt" 2>&1
      echo "transformerprofile rc=$? $(head -3 "$out/transformer_profile.txt" | tr '\n' ' ')" ;;
    tests69)  # the GPU tests of code never run on a GPU: the tiles kernel's reordered plan
      # loads (routed) and walks, the staged SDDMM, the softmax's phased groups and grouped walk
      timeout "${LIMIT:-200}" python3 -m pytest -q -m gpu -n 14 -p no:cacheprovider \
        tests/test_kernels_sddmm_tiles.py tests/test_kernels_sddmm_staged.py \
        tests/test_kernels_softmax_csr.py tests/test_softmax.py >"$out/gpu_tests69.log" 2>&1
      echo "tests69 rc=$? $(tail -1 "$out/gpu_tests69.log")" ;;
    softmaxphased)  # rows read once in whole 16-byte groups on the unpadded arrays (/u: groups
      # from the arrays' starts, each head's own) against padded ones (/a) and entry by entry
      # and causal rows walked in groups (1/4/i32/c8/u: causal's arrays are aligned)
      (cd benchmarks/sweeps && PYTHONPATH=$PWD/../../src KINDS=causal,local:256,strided:128:128,random:0.1 \
        DTYPES=bf16 FORMS=default,1/4/i32/c8/u,2/2/i64/u,2/2/i64/u/r40,2/2/i32/u/r40,4/2/i32/t/u,4/2/i32/t/u/r40,2/2/i32/u \
        BUDGET_S=${BUDGET_S:-120} timeout "${LIMIT:-150}" python3 softmax_heads_sweep.py >"$out/softmax_phased.txt" 2>&1)
      echo "softmaxphased rc=$?" ;;
    softmaxgrouped)  # rows read once in whole 16-byte groups, padded arrays (/a), maxnreg (/r40)
      (cd benchmarks/sweeps && PYTHONPATH=$PWD/../../src KINDS=local:256,strided:128:128,random:0.1 \
        DTYPES=bf16 FORMS=default,2/2/i64/a,2/2/i64/a/r40,2/2/i32/a/r40,2/2/i32/r40,4/2/i32/t/a \
        BUDGET_S=80 timeout 100 python3 softmax_heads_sweep.py >"$out/softmax_grouped.txt" 2>&1)
      echo "softmaxgrouped rc=$?" ;;
    nmpairsblocked)  # the pairs kernel's blocked step (/b) and tiles against the route
      (cd benchmarks/sweeps && PYTHONPATH=$PWD/../../src PATTERNS=4:32,1:32,1:16,4:16,2:16 \
        TOKENS=24,40 FORMS=p2s64,p2s64/b,p2s128,p2s128/b,p4s64,p4s64/b,p4s32/b,p2s64/k2,p2s64/k2/b,p2s64/w2/b,p4s64/k2/b \
        timeout "${LIMIT:-300}" python3 nm_pairs.py >"$out/nm_pairs_blocked.txt" 2>&1)
      echo "nmpairsblocked rc=$?" ;;
    tests67)  # every GPU test not run since 5b1e44a: the sixty-fifth's fixed route tests, the
      # sixty-sixth's B_COLS, bank orders and unscatter (one pytest, so workers share compiles)
      timeout "${LIMIT:-300}" python3 -m pytest -q -m "gpu and not slow" -n 14 -p no:cacheprovider \
        tests/test_kernels_spmm_nm_unpack.py tests/test_kernels_spmm_nm_wgmma.py \
        tests/test_kernels_spmm_nm_expand.py tests/test_nm_pairs_route.py tests/test_nm_stored_as.py \
        tests/test_kernels_spmm_nm_route_cliffs.py tests/test_kernels_softmax_csr.py \
        tests/test_kernels_spmm_nm_pairs.py tests/test_kernels_spmm_csr_scatter.py \
        tests/test_csr_scatter_route.py tests/test_formats_edited_after_checks.py \
        >"$out/gpu_tests67.log" 2>&1
      echo "tests67 rc=$? $(tail -1 "$out/gpu_tests67.log")" ;;
    csrbankssweep)  # csrbanks' sweep alone (its tests are in tests67)
      PYTHONPATH=$PWD/src TOKENS=16,32 CONFIGS=n16/w8,n16/w8/sp,n16/w8/u,n32/w4,n32/w4/sp,n32/w4/u,n16/w4/m128/g4,n16/w4/m128/g4/sp \
        timeout "${LIMIT:-300}" python3 benchmarks/sweeps/csr_scatter_cold.py >"$out/csr_scatter_banks.txt" 2>&1
      echo "csrbankssweep rc=$?" ;;
    sddmmblocked)  # the blocked SDDMM walk (not routed): its GPU tests, then the sweep
      timeout 150 python3 -m pytest -q -m gpu -n 8 -p no:cacheprovider \
        tests/test_kernels_sddmm_blocked.py >"$out/gpu_tests_sddmm_blocked.log" 2>&1
      echo "sddmmblocked tests rc=$? $(tail -1 "$out/gpu_tests_sddmm_blocked.log")"
      PYTHONPATH=$PWD/src BUDGET_S=${BUDGET_S:-200} timeout "${LIMIT:-260}" \
        python3 benchmarks/sweeps/sddmm_blocked.py >"$out/sddmm_blocked.txt" 2>&1
      echo "sddmmblocked sweep rc=$?" ;;
    csrunscatter)  # the scatter kernel zeroing only the last step's places (/u) at 80-95%, on
      # 64- and 128-row tiles, 16 and 32 tokens (at-0d00394: /u won ~8% at 90%, lost at 70%)
      timeout 100 python3 -m pytest -q -m gpu -n 4 -p no:cacheprovider -k zeroing \
        tests/test_csr_scatter_route.py >"$out/gpu_tests_unscatter.log" 2>&1
      echo "csrunscatter tests rc=$? $(tail -1 "$out/gpu_tests_unscatter.log")"
      PYTHONPATH=$PWD/src TOKENS=16,32 SPARSITIES=0.8,0.9,0.95 CONFIGS=n16/w8,n16/w8/u,n16/w4,n16/w4/u,n16/w4/m128/g4,n16/w4/m128/g4/u,n32/w4,n32/w4/u,n32/w2/m128/g4,n32/w2/m128/g4/u \
        timeout "${LIMIT:-240}" python3 benchmarks/sweeps/csr_scatter_cold.py >"$out/csr_scatter_unscatter.txt" 2>&1
      echo "csrunscatter rc=$?" ;;
    sddmmahead)  # the blocked SDDMM walk with each step's loads a step ahead (/a), K = 64: can
      # few warps an SM, whose blocks then stay in L1, keep enough loads in flight?
      timeout 120 python3 -m pytest -q -m gpu -n 8 -p no:cacheprovider \
        tests/test_kernels_sddmm_blocked.py >"$out/gpu_tests_sddmm_ahead.log" 2>&1
      echo "sddmmahead tests rc=$? $(tail -1 "$out/gpu_tests_sddmm_ahead.log")"
      PYTHONPATH=$PWD/src KS=64 DENSITIES=0.02,0.1 BUDGET_S=${BUDGET_S:-150} \
        FORMS=b128x128/e32/w2,b256x256/e256/w16,b128x128/e32/w2/a,b128x128/e64/w4/k64/a,b128x128/e64/w8/k64/a,b256x256/e128/w8/k64/a,b192x192/e64/w8/k64/a/p2,b256x256/e64/w8/k64/a/p1,b128x128/e64/w4/k64/a/p4,b96x96/e32/w2/a/p8 \
        timeout "${LIMIT:-200}" python3 benchmarks/sweeps/sddmm_blocked.py >"$out/sddmm_ahead.txt" 2>&1
      echo "sddmmahead sweep rc=$?" ;;
    sddmm68)  # the sixty-eighth's SDDMM kernels in one call (~8 min): the tiles walks, then
      # the staged kernel, each sweep cut short to fit
      BUDGET_S=150 LIMIT=200 bash "$0" "$out" sddmmtileswalk
      BUDGET_S=100 LIMIT=140 bash "$0" "$out" sddmmstaged ;;
    sddmmtileswalk)  # the tensor-core SDDMM at K = 64: a program a tile at 1-3 stages (fewer
      # stages, more programs an SM) against programs walking tiles (/pN), uniform 0.5-30%; the
      # walk overlaps a tile's loads with the one before only from 5 stages (sm_90 compile)
      timeout 100 python3 -m pytest -q -m gpu -n 8 -p no:cacheprovider \
        tests/test_kernels_sddmm_tiles.py >"$out/gpu_tests_sddmm_tiles.log" 2>&1
      echo "sddmmtileswalk tests rc=$? $(tail -1 "$out/gpu_tests_sddmm_tiles.log")"
      PYTHONPATH=$PWD/src KS=64 DTYPES=bf16,fp32 DENSITIES=0.005,0.02,0.05,0.1,0.3 BUDGET_S=${BUDGET_S:-200} \
        CONFIGS=64x64x64/w4/s3,64x64x64/w4/s1,64x64x64/w4/s2,128x128x64/w8/s1,64x64x64/w4/s2/p4,64x64x64/w4/s5/p1,64x64x64/w4/s5/p2,64x64x64/w4/s5/p3,64x64x64/w8/s5/p2,64x64x64/w4/s7/p2,64x64x64/w4/s1/p2/r,64x64x64/w8/s1/p2/r,64x64x64/w8/s1/p4/r \
        timeout "${LIMIT:-240}" python3 benchmarks/sweeps/sddmm_tiles_sweep.py >"$out/sddmm_tiles_walk.txt" 2>&1
      echo "sddmmtileswalk sweep rc=$?" ;;
    sddmmstaged)  # the staged SDDMM (rows in shared memory, fp32): its GPU tests (never run),
      # then against the per-entry kernel, cuSPARSE and the blocked walk's best, K = 16-64
      timeout 120 python3 -m pytest -q -m gpu -n 8 -p no:cacheprovider \
        tests/test_kernels_sddmm_staged.py >"$out/gpu_tests_sddmm_staged.log" 2>&1
      echo "sddmmstaged tests rc=$? $(tail -1 "$out/gpu_tests_sddmm_staged.log")"
      PYTHONPATH=$PWD/src DTYPES=fp32 KS=64,32 DENSITIES=0.02,0.05,0.1 BATCHES=1 BUDGET_S=${BUDGET_S:-150} \
        FORMS=staged,staged/w8,staged/e128,staged/b64x64,staged/b128x64/w8,staged/w2/e32,b128x128/e64/w8/k64/a \
        timeout "${LIMIT:-200}" python3 benchmarks/sweeps/sddmm_blocked.py >"$out/sddmm_staged.txt" 2>&1
      echo "sddmmstaged sweep rc=$?" ;;
    tests66)  # the sixty-sixth session's GPU tests: B_COLS in the unpack and wgmma kernels
      timeout 200 python3 -m pytest -q -m "gpu and not slow" -n 12 -p no:cacheprovider \
        tests/test_kernels_spmm_nm_unpack.py tests/test_kernels_spmm_nm_wgmma.py \
        tests/test_kernels_spmm_nm_expand.py >"$out/gpu_tests66.log" 2>&1
      echo "tests66 rc=$? $(tail -1 "$out/gpu_tests66.log")" ;;
    csrbanks)  # the scatter kernel's runs placed store by store (greedy, the default since the
      # sixty-sixth) against dealt in bank order (/sp), and zeros at the places only (/u):
      # GPU tests, then the routed tiles
      timeout 240 python3 -m pytest -q -m gpu tests/test_kernels_spmm_csr_scatter.py \
        tests/test_csr_scatter_route.py -n 8 >"$out/gpu_tests_csr_banks.log" 2>&1
      echo "csrbanks tests rc=$? $(tail -1 "$out/gpu_tests_csr_banks.log")"
      PYTHONPATH=$PWD/src TOKENS=16,32 CONFIGS=n16/w8,n16/w8/sp,n16/w8/u,n32/w4,n32/w4/sp,n32/w4/u,n16/w4/m128/g4,n16/w4/m128/g4/sp \
        timeout 300 python3 benchmarks/sweeps/csr_scatter_cold.py >"$out/csr_scatter_banks.txt" 2>&1
      echo "csrbanks sweep rc=$?" ;;
    nmrowmajorb)  # spmm with a row-major B of N % 16 != 0: in place against copied aligned
      # (_layout.ALIGN_ROW_MAJOR_B; nm_row_major_b.py)
      (cd benchmarks/sweeps && PYTHONPATH=$PWD/../../src timeout "${LIMIT:-300}" \
        python3 nm_row_major_b.py >"$out/nm_row_major_b.txt" 2>&1)
      echo "nmrowmajorb rc=$?" ;;
    nmpad8)  # B padded to 16 columns at 2-8 tokens (route) against 8 (pad8); the 16-token tile
      # from 5 tokens (route) against from 9
      (cd benchmarks/sweeps && PYTHONPATH=$PWD/../../src SHAPES=4096x4096,4096x14336,14336x4096 \
        TOKENS=2,5,8 FORMS=route,pad8,from9 CASES=bf16/16:32/64/1,bf16/4:8/64/1,bf16/8:32/64/1,fp16/4:8/64/1,fp32/4:8/64/1,bf16/64:128/64/64 \
        timeout 300 python3 nm_route_cliffs.py >"$out/nm_route_pad8.txt" 2>&1)
      echo "nmpad8 rc=$?" ;;
    nmpairsfp16)  # the pairs kernel in fp16 against the route
      (cd benchmarks/sweeps && PYTHONPATH=$PWD/../../src DTYPE=float16 PATTERNS=4:32,1:16,4:16,2:16 \
        TOKENS=24,40 FORMS=p2s64/w2/b,p2s128/b,p4s64/k2/b,p2s64 timeout "${LIMIT:-250}" python3 nm_pairs.py \
        >"$out/nm_pairs_fp16.txt" 2>&1)
      echo "nmpairsfp16 rc=$?" ;;
    csrslices)  # the CSR scatter kernel with warp-private K slices (not routed): GPU tests,
      # then a first timing against the scatter kernel at 16 tokens (csr_scatter_slices.py)
      timeout 150 python3 -m pytest -q -m gpu -n 12 -p no:cacheprovider \
        tests/test_kernels_spmm_csr_scatter_slices.py >"$out/gpu_csrslices.log" 2>&1
      echo "csrslices tests rc=$? $(tail -1 "$out/gpu_csrslices.log")"
      PYTHONPATH=src:tests timeout 150 python3 benchmarks/sweeps/csr_scatter_slices.py \
        >"$out/csr_scatter_slices.txt" 2>&1
      echo "csrslices rc=$?" ;;
    nmpairs)  # the condensed-K kernel for 8-row vectors (spmm_nm_pairs.py): GPU tests, then
      # against the route and cuBLAS at m = 16 / 32 (nm_pairs.py; ~400 s)
      timeout 120 python3 -m pytest -q -m gpu -n 12 -p no:cacheprovider \
        tests/test_kernels_spmm_nm_pairs.py >"$out/gpu_nmpairs.log" 2>&1
      echo "nmpairs tests rc=$? $(tail -1 "$out/gpu_nmpairs.log")"
      (cd benchmarks/sweeps && PYTHONPATH=$PWD/../../src PATTERNS=2:16,4:32,1:32,4:16 \
        TOKENS=24,40 timeout 300 python3 nm_pairs.py >"$out/nm_pairs.txt" 2>&1)
      echo "nmpairs rc=$?" ;;
    densifylarge)  # the densify kernel's select form on n = 4-16 of a group against its scatter
      (cd benchmarks/sweeps && PYTHONPATH=$PWD/../../src CSR=0 VECTORS=1 TOKENS=24 \
        PATTERNS=2:8,4:16,8:16,16:32,8:32 SHAPES=4096x4096,14336x4096 timeout 200 python3 \
        densify_sweep.py >"$out/densify_large_n.txt" 2>&1)
      echo "densifylarge rc=$?" ;;
    expandpad)  # linear's x^T padded to 16 columns for the expand and condensed-K kernels (the
      # route) against unpadded (their B loads masked on N)
      (cd benchmarks/sweeps && PYTHONPATH=$PWD/../../src SHAPES=4096x4096,14336x4096 \
        CASES=bf16/2:16/8/1,bf16/2:16/1/1,bf16/1:16/8/1,bf16/4:32/8/1,bf16/2:8/64/1,bf16/16:32/64/1 \
        TOKENS=17,24,31,32,33,40,48 FORMS=route,unpad timeout 280 python3 nm_route_cliffs.py \
        >"$out/nm_route_expandpad.txt" 2>&1)
      echo "expandpad rc=$?" ;;
    nmdecodeblocks)  # the decode kernel on block-wise patterns: bits and tiles (nm_decode_blocks.py)
      (cd benchmarks/sweeps && PYTHONPATH=$PWD/../../src timeout 150 python3 nm_decode_blocks.py \
        >"$out/nm_decode_blocks.txt" 2>&1
       PYTHONPATH=$PWD/../../src SHAPES=4096x4096,14336x4096 PATTERNS=4:8,4:16 VECTOR=4 BLOCK=4 \
        TOKENS=8,16 FORMS=route,4r,4r128 timeout 120 python3 nm_decode_blocks.py \
        >"$out/nm_decode_blocks_4.txt" 2>&1)
      echo "nmdecodeblocks rc=$?" ;;
    routekernels)  # the kernels linear launches against its mma.sp kernel alone (route_kernels.py)
      (cd benchmarks/sweeps && PYTHONPATH=$PWD/../../src timeout 120 python3 route_kernels.py \
        >"$out/route_kernels.txt" 2>&1)
      echo "routekernels rc=$?" ;;
    nmmmaspfp16)  # the sparse tensor cores in fp16, 2:4 (to route fp16)
      (cd benchmarks/sweeps && PYTHONPATH=$PWD/../../src DTYPE=fp16 TOKENS=1,8,16,32 \
        CONFIGS=m1k8n1/b,m1k8n2 timeout 300 python3 nm_mma_sp_cold.py >"$out/nm_mma_sp_fp16.txt" 2>&1)
      echo "nmmmaspfp16 rc=$? $(tail -1 "$out/nm_mma_sp_fp16.txt")" ;;
    nmwgmma)  # the tile built in the wgmma operand's registers (nm_wgmma_cold.py)
      timeout 400 python3 benchmarks/sweeps/nm_wgmma_cold.py >"$out/nm_wgmma.txt" 2>&1
      echo "nmwgmma rc=$? $(tail -1 "$out/nm_wgmma.txt")" ;;
    nmselectidx)  # the select kernel's int64 group indices (/i: int32) and Triton pipelining (/sN)
      PATTERNS=2:8,1:8,2:4,4:8,1:4 SHAPES=4096x14336,14336x4096 \
        CONFIGS=4x256/2w,4x256/2w/i,4x256/2w/s3,2x256/2w,2x256/2w/i,2x128/1w,2x128/1w/i,2x128/1w/s3,4x128/2w,2x256/4w \
        timeout 420 python3 benchmarks/sweeps/nm_select_cold.py >"$out/nm_select_idx.txt" 2>&1
      echo "nmselectidx rc=$? $(tail -1 "$out/nm_select_idx.txt")" ;;
    ncu)  # Nsight Compute on the kernels whose limits are not understood (ncu_cases.py; CASES=)
      timeout 300 ncu --clock-control none --profile-from-start off --nvtx \
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
        --section Occupancy --section LaunchStats --section SchedulerStats \
        --section InstructionStats --section ComputeWorkloadAnalysis --section SourceCounters \
        python3 benchmarks/sweeps/ncu_cases.py >"$out/ncu.txt" 2>&1
      echo "ncu rc=$? $(grep -c 'profiled:' "$out/ncu.txt") cases" ;;
    ncusrc)  # Nsight Compute's stall reasons and per-SASS-instruction samples for CASES (ncu_cases.py)
      timeout 300 ncu --clock-control none --profile-from-start off --nvtx --set full \
        --import-source yes -f -o /tmp/ncu_src python3 benchmarks/sweeps/ncu_cases.py \
        >"$out/ncu_src.log" 2>&1
      timeout 60 ncu -i /tmp/ncu_src.ncu-rep --page details --section WarpStateStats \
        --section SourceCounters --print-details all >"$out/ncu_stalls.txt" 2>&1
      timeout 120 ncu -i /tmp/ncu_src.ncu-rep --page source --csv --print-source sass \
        >"$out/ncu_source.csv" 2>&1
      echo "ncusrc rc=$? $(wc -l <"$out/ncu_source.csv") lines" ;;
    trainstep)
      timeout 150 python3 benchmarks/sweeps/train_step_graph.py >"$out/train_step_graph.txt" 2>&1
      echo "trainstep rc=$? $(tail -1 "$out/train_step_graph.txt")" ;;
    quick) bench quick 120 --quick ;;
    llm) bench llm 270 --suite llm --no-plots ;;
    llm_large) bench llm_large 400 --suite llm_large --no-plots ;;
    llm_linear) bench llm_linear 200 --suite llm_linear --no-plots ;;
    llm_linear_fp16) bench llm_linear_fp16 200 --suite llm_linear --dtype fp16 --no-plots ;;
    nm) bench nm 150 --suite nm --limit 50 --no-plots ;;
    nmfew) bench nmfew 560 --suite nmfew --limit 120 --no-plots ;;
    nmsparse) bench nmsparse 560 --suite nmsparse --dtype bf16 --limit 100 --no-plots ;;
    nmsparse32) bench nmsparse32 400 --suite nmsparse --dtype fp32 --no-plots ;;
    e2e) bench e2e 420 --suite e2e --no-plots ;;
    e2ellama) bench e2e 200 --suite e2e --match e2e_llama --no-plots ;;  # the Llama step alone
    e2etransformer)  # the Sparse Transformer alone (inference and training at 8192 and 16384)
      bench e2e_transformer "${LIMIT_E2E:-300}" --suite e2e --match e2e_transformer --no-plots ;;
    e2ellamainplace)  # the Llama step with the line walks reading the CSR's own values
      timeout 200 python3 -c "import runpy, sys
from sparsekernels.kernels import csr_lines_tuning
csr_lines_tuning.CSR_LINES_VALUES_IN_PLACE = True
sys.argv[0] = 'sparsekernels.bench'
runpy.run_module('sparsekernels.bench', run_name='__main__')" --suite e2e --match e2e_llama \
        --no-plots --out "$out/e2e_in_place" >"$out/e2e_in_place.log" 2>&1
      echo "e2e_in_place rc=$? $(date +%T)" ;;
    e2ellamapdl)  # the Llama step with PDL (PDL_LEVEL, 2 unless set) on the decode routes (_pdl.py)
      SPARSEKERNELS_PDL=${PDL_LEVEL:-2} bench e2e_pdl 200 --suite e2e --match e2e_llama --no-plots ;;
    sddmm) bench sddmm 200 --suite sddmm --suite softmax --no-plots ;;
    attention) bench attention 300 --suite attention --no-plots ;;  # speed and peak memory
    dlmc) bench dlmc 320 --suite dlmc --dlmc .dlmc --limit 24 --dtype bf16,fp32 ;;
    *) echo "unknown step $step" ;;
  esac
done
