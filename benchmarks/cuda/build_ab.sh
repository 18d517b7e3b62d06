#!/usr/bin/env bash
# Builds the kernel-level timing harnesses (time_fwd, time_bwd_filter) of two versions
# of the kernels for sm_90, on a machine with nvcc and no GPU, so that an A/B costs
# the GPU machine no compile time (carry OUT_DIR with the call, run run_ab.sh there).
#   bash benchmarks/cuda/build_ab.sh main WORKTREE gpu-bin
# A version is a git revision, or WORKTREE for the working tree as it is. Writes
# OUT_DIR/{time_fwd,time_bwd_filter}_{a,b}, stripped (about 12 MB each), and
# OUT_DIR/versions.txt naming what a and b are.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ "$#" -eq 3 ] || { echo "usage: $0 VERSION_A VERSION_B OUT_DIR" >&2; exit 2; }
out="$3"
mkdir -p "$out"
: >"$out/versions.txt"
for side in a b; do
  version=$([ "$side" = a ] && echo "$1" || echo "$2")
  if [ "$version" = WORKTREE ]; then
    src=.
    echo "$side: working tree at $(git rev-parse --short HEAD) + $(git status --short | wc -l) changed paths" >>"$out/versions.txt"
  else
    src=$(mktemp -d)
    git archive "$version" csrc benchmarks/cuda | tar -x -C "$src"
    echo "$side: $(git rev-parse --short "$version")" >>"$out/versions.txt"
  fi
  flags=(-std=c++17 -arch=sm_90 -O3 --expt-relaxed-constexpr -I"$src/csrc" -I"$src/benchmarks/cuda" -t 2)
  nvcc "${flags[@]}" "$src/benchmarks/cuda/time_fwd.cu" "$src/csrc/dwconv/dwconv_cuda.cu" \
    "$src/csrc/dwconv/fwd_mma.cu" -o "$out/time_fwd_$side"
  nvcc "${flags[@]}" "$src/benchmarks/cuda/time_bwd_filter.cu" "$src"/csrc/dwconv/bwd_filter_cuda*.cu \
    -o "$out/time_bwd_filter_$side"
  strip "$out/time_fwd_$side" "$out/time_bwd_filter_$side"
  [ "$src" = . ] || rm -rf "$src"
done
cat "$out/versions.txt"
