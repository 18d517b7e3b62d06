#!/usr/bin/env bash
# Builds the kernel-level timing harnesses (time_fwd, time_bwd_filter) of two or more
# versions of the kernels for sm_90, on a machine with nvcc and no GPU, so that an A/B
# costs the GPU machine no compile time (carry OUT_DIR with the call, run run_ab.sh
# there, with SIDES="a b c ..." for more than two versions).
#   bash benchmarks/cuda/build_ab.sh main WORKTREE gpu-bin
#   HARNESSES=fwd bash benchmarks/cuda/build_ab.sh main prep~1 prep gpu-bin
# The last argument is OUT_DIR; the versions before it become sides a, b, c, ... A
# version is a git revision, or WORKTREE for the working tree as it is. HARNESSES
# (default "fwd bwd_filter") picks the harnesses. Each translation unit is compiled
# once per distinct content: its object is kept under OBJ_CACHE (default
# build/ab-objects, git-ignored) by a hash of the flags and of every file it
# includes (nvcc -M), so that sides sharing a file, and later runs, link the same
# object instead of compiling it again (fwd_mma.cu alone takes about six minutes on
# two cores); two compiles run at once (JOBS). Writes OUT_DIR/time_HARNESS_SIDE,
# stripped (about 16 MB each, 8 MB under xz), and OUT_DIR/versions.txt naming what
# each side is.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ "$#" -ge 3 ] || { echo "usage: $0 VERSION_A VERSION_B [VERSION_C ...] OUT_DIR" >&2; exit 2; }
out="${!#}"
versions=("${@:1:$#-1}")
read -r -a harnesses <<<"${HARNESSES:-fwd bwd_filter}"
mkdir -p "$out"
: >"$out/versions.txt"
cache="${OBJ_CACHE:-build/ab-objects}"
mkdir -p "$cache"
cache=$(cd "$cache" && pwd)
flags=(-std=c++17 -arch=sm_90 -O3 --expt-relaxed-constexpr)

# object SRC_ROOT FILE: prints the cached object of SRC_ROOT/FILE, compiling it first
# where no object of the same content is cached. The key covers the compiler, the
# flags, the file's path in the tree, and the path and bytes of every non-system file
# it includes.
object() {
  local root file="$2" key obj dep
  root=$(cd "$1" && pwd)
  local inc=(-I"$root/csrc" -I"$root/benchmarks/cuda")
  key=$( {
    nvcc --version | tail -1
    echo "${flags[*]} $file"
    nvcc "${flags[@]}" "${inc[@]}" -M "$root/$file" | tr ' \\' '\n\n' | grep -v ':$' | grep "^$root/" | sort |
      while read -r dep; do echo "${dep#"$root/"}"; cat "$dep"; done
  } | sha256sum | cut -c1-24)
  obj="$cache/$(basename "${file%.*}")-$key.o"
  if [ ! -f "$obj" ]; then
    nvcc "${flags[@]}" "${inc[@]}" -c "$root/$file" -o "$obj.$$.tmp" || return 1
    mv -f "$obj.$$.tmp" "$obj"
  fi
  echo "$obj"
}
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
    # tests/cuda holds the harness the programs share, where the version has one.
    paths=(csrc benchmarks/cuda)
    git cat-file -e "$version:tests/cuda/harness.cuh" 2>/dev/null && paths+=(tests/cuda)
    git archive "$version" "${paths[@]}" | tar -x -C "$src"
    echo "$side: $(git rev-parse --short "$version") ($version)" >>"$out/versions.txt"
  fi
  for harness in "${harnesses[@]}"; do
    case "$harness" in
      # A version laid out by pass (csrc/plan/), or one from before (csrc/dwconv/).
      fwd) if [ -d "$src/csrc/plan" ]; then
             files=(benchmarks/cuda/time_fwd.cu csrc/fwd/launch.cu csrc/fwd/mma.cu csrc/fwd/regfilter.cu
                    $(cd "$src" && ls csrc/plan/*.cc))
           else
             files=(benchmarks/cuda/time_fwd.cu csrc/dwconv/dwconv_cuda.cu csrc/dwconv/fwd_mma.cu
                    $(cd "$src" && ls csrc/dwconv/fwd_regfilter.cu 2>/dev/null || true))
           fi ;;
      bwd_filter) if [ -d "$src/csrc/plan" ]; then
                    files=(benchmarks/cuda/time_bwd_filter.cu $(cd "$src" && ls csrc/bwd_filter/*.cu csrc/plan/*.cc))
                  else
                    files=(benchmarks/cuda/time_bwd_filter.cu $(cd "$src" && ls csrc/dwconv/bwd_filter_cuda*.cu))
                  fi ;;
      *) echo "unknown harness $harness (fwd, bwd_filter)" >&2; exit 2 ;;
    esac
    # JOBS compiles at a time; each prints its object into a numbered list file.
    list=$(mktemp)
    pids=()
    for i in "${!files[@]}"; do
      while [ "$(jobs -rp | wc -l)" -ge "${JOBS:-2}" ]; do sleep 1; done
      ( object "$src" "${files[$i]}" >"$list.$i" ) &
      pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid" || { echo "build of $harness ($side) failed" >&2; exit 1; }; done
    objects=()
    for i in "${!files[@]}"; do objects+=("$(cat "$list.$i")"); done
    rm -f "$list" "$list".*
    nvcc -arch=sm_90 "${objects[@]}" -o "$out/time_${harness}_$side"
    strip "$out/time_${harness}_$side"
  done
  [ "$src" = . ] || rm -rf "$src"
done
cat "$out/versions.txt"
