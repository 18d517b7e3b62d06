#!/usr/bin/env bash
# Builds the kernel-level timing harnesses (time_fwd, time_bwd_filter) of two or more
# versions of the kernels for sm_90, on a machine with nvcc and no GPU, so that an A/B
# costs the GPU machine no compile time (carry OUT_DIR with the call, run run_ab.sh
# there, with SIDES="a b c ..." for more than two versions).
#   bash benchmarks/cuda/build_ab.sh main WORKTREE gpu-bin
#   HARNESSES=fwd bash benchmarks/cuda/build_ab.sh main prep~1 prep gpu-bin
# The last argument is OUT_DIR; the versions before it become sides a, b, c, ... A
# version is a git revision, or WORKTREE for the working tree as it is. HARNESSES
# (default "fwd bwd_filter") picks the harnesses: each version's kernels take minutes
# to compile on two cores, fwd_mma.cu alone about six. Writes
# OUT_DIR/time_HARNESS_SIDE, stripped (about 16 MB each, 8 MB under xz), and
# OUT_DIR/versions.txt naming what each side is.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ "$#" -ge 3 ] || { echo "usage: $0 VERSION_A VERSION_B [VERSION_C ...] OUT_DIR" >&2; exit 2; }
out="${!#}"
versions=("${@:1:$#-1}")
read -r -a harnesses <<<"${HARNESSES:-fwd bwd_filter}"
mkdir -p "$out"
: >"$out/versions.txt"
sides=(a b c d e f g h)
[ "${#versions[@]}" -le "${#sides[@]}" ] || { echo "at most ${#sides[@]} versions" >&2; exit 2; }
for i in "${!versions[@]}"; do
  side=${sides[$i]}
  version=${versions[$i]}
  if [ "$version" = WORKTREE ]; then
    src=.
    echo "$side: working tree at $(git rev-parse --short HEAD) + $(git status --short | wc -l) changed paths" >>"$out/versions.txt"
  else
    src=$(mktemp -d)
    git archive "$version" csrc benchmarks/cuda | tar -x -C "$src"
    echo "$side: $(git rev-parse --short "$version") ($version)" >>"$out/versions.txt"
  fi
  flags=(-std=c++17 -arch=sm_90 -O3 --expt-relaxed-constexpr -I"$src/csrc" -I"$src/benchmarks/cuda" -t 2)
  for harness in "${harnesses[@]}"; do
    case "$harness" in
      fwd) nvcc "${flags[@]}" "$src/benchmarks/cuda/time_fwd.cu" "$src/csrc/dwconv/dwconv_cuda.cu" \
             "$src/csrc/dwconv/fwd_mma.cu" -o "$out/time_fwd_$side" ;;
      bwd_filter) nvcc "${flags[@]}" "$src/benchmarks/cuda/time_bwd_filter.cu" "$src"/csrc/dwconv/bwd_filter_cuda*.cu \
                    -o "$out/time_bwd_filter_$side" ;;
      *) echo "unknown harness $harness (fwd, bwd_filter)" >&2; exit 2 ;;
    esac
    strip "$out/time_${harness}_$side"
  done
  [ "$src" = . ] || rm -rf "$src"
done
cat "$out/versions.txt"
