#!/usr/bin/env bash
# Runs an A/B of two harness builds (build_ab.sh) on the GPU machine: each point on a,
# then b, then a and b again, so that clock drift falls on both sides; prints every
# time and the ratio of the medians' means b / a (below 1: b is faster).
#   bash benchmarks/cuda/run_ab.sh gpu-bin "bwd_filter bf16 128 64 64 256 3" "fwd bf16 128 32 32 1024 3 1"
# A point is the harness (fwd or bwd_filter) and its single-point arguments: dtype,
# N H W C K, and for fwd the stride.
set -uo pipefail
dir="$1"
shift
for point in "$@"; do
  read -r pass args <<<"$point"
  times=()
  for side in a b a b; do
    line=$("$dir/time_${pass}_$side" "$side" $args)
    times+=("$(awk '{for (i = 1; i <= NF; ++i) if ($i == "ms") print $(i - 1)}' <<<"$line")")
    grep -q "no error" <<<"$line" || echo "  $side: $line"
  done
  awk -v p="$point" -v a1="${times[0]}" -v b1="${times[1]}" -v a2="${times[2]}" -v b2="${times[3]}" \
    'BEGIN { a = (a1 + a2) / 2; b = (b1 + b2) / 2; printf "%-40s a %.3f %.3f  b %.3f %.3f  b/a %.3f\n", p, a1, a2, b1, b2, b / a }'
done
