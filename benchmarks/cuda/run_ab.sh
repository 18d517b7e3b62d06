#!/usr/bin/env bash
# Runs an A/B of harness builds (build_ab.sh) on the GPU machine: each point on every
# side in turn, then on every side again, so that clock drift falls on all of them;
# prints every time and each side's ratio of the medians' means to side a (below 1:
# faster than a).
#   bash benchmarks/cuda/run_ab.sh gpu-bin "bwd_filter bf16 128 64 64 256 3" "fwd bf16 128 32 32 1024 3 1"
# A point is the harness (fwd or bwd_filter) and its single-point arguments: dtype,
# N H W C K, and for fwd the stride. SIDES (default "a b") names the builds,
# DIR/time_PASS_SIDE, so that one call compares more than two versions.
set -uo pipefail
dir="$1"
shift
read -r -a sides <<<"${SIDES:-a b}"
for point in "$@"; do
  read -r pass args <<<"$point"
  declare -A first=() second=()
  for round in 1 2; do
    for side in "${sides[@]}"; do
      line=$("$dir/time_${pass}_$side" "$side" $args)
      t=$(awk '{for (i = 1; i <= NF; ++i) if ($i == "ms") print $(i - 1)}' <<<"$line")
      if [ "$round" = 1 ]; then first[$side]=$t; else second[$side]=$t; fi
      grep -q "no error" <<<"$line" || echo "  $side: $line"
    done
  done
  summary=$(printf '%-40s' "$point")
  a_mean=$(awk -v x="${first[a]}" -v y="${second[a]}" 'BEGIN { print (x + y) / 2 }')
  for side in "${sides[@]}"; do
    summary+=$(awk -v s="$side" -v x="${first[$side]}" -v y="${second[$side]}" -v a="$a_mean" \
      'BEGIN { m = (x + y) / 2; if (s == "a") printf "  a %.3f %.3f", x, y; else printf "  %s %.3f %.3f %s/a %.3f", s, x, y, s, m / a }')
  done
  echo "$summary"
  unset first second
done
