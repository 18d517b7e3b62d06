"""How busy the fp32 gemv filter gradient's grid keeps the GPU, modelled on the host.

The grid of dwconv_bwd_filter_gemv_kernel (csrc/dwconv/bwd_filter_gemv.cuh) is row
groups x channel blocks x image chunks, launched in that order (row groups fastest).
A block's length is taken as its images times the share of dy rows its row group
sums: a row group of 4 filter rows skips the dy rows whose x rows are all padding
for every one of its 4 rows (at k = 51 on a 128-wide map with 25 rows of padding,
106 of 128 rows at the edges). Blocks go to the first free one of `resident` slots
(2 blocks an SM of 132 on the H200), in launch order. The model prints, for each
map and k, the grid that make_bwd_filter_gemv_grid chose before and after the
merge-taps bound (csrc/dwconv/bwd_filter_launch.cuh), the fraction of the slots'
time that is busy, and the modelled time after over before.

It is a model, not a measurement: the kernel-level A/B on the GPU decides.

  python3 benchmarks/cuda/bwd_filter_gemv_waves_model.py
"""
import heapq

TARGET_BLOCKS = 2048  # kBwdFilterTargetBlocks
ROWS_PER_GROUP = 4  # GemvFwdTraits<float>::kRowsPerWarp
BLOCK_CHANNELS = 32  # GemvFwdTraits<float>::kBlockChannels
MERGE_TAPS = 8192  # kBwdFilterGemvMergeTaps
H200_RESIDENT = 2 * 132


def ceil_div(a, b):
  return -(-a // b)


def row_group_share(group, k, h, pad):
  """The share of the Ho dy rows that the row group's loop runs (stride 1, 'same')."""
  first = max(0, pad - (ROWS_PER_GROUP * group + ROWS_PER_GROUP - 1))
  last = min(h - 1, h - 1 + pad - ROWS_PER_GROUP * group)
  return max(last - first + 1, 0) / h


def chunks_of(n, h, c, k, merge_taps):
  blocks_xy = ceil_div(k, ROWS_PER_GROUP) * ceil_div(c, BLOCK_CHANNELS)
  wanted = ceil_div(TARGET_BLOCKS, blocks_xy)
  if merge_taps:
    wanted = max(wanted, ceil_div(n, ceil_div(merge_taps, h * h)))
  chunks = max(min(wanted, n, 65535), 1)
  per_chunk = ceil_div(n, chunks)
  return ceil_div(n, per_chunk), per_chunk


def busy(n, h, c, k, merge_taps, resident=H200_RESIDENT):
  """(launched chunks, blocks, busy fraction, modelled time) for one point."""
  pad = k // 2
  chunks, per_chunk = chunks_of(n, h, c, k, merge_taps)
  lengths = []
  for z in range(chunks):
    images = min(per_chunk, n - z * per_chunk)
    for _ in range(ceil_div(c, BLOCK_CHANNELS)):
      lengths += [images * row_group_share(g, k, h, pad) for g in range(ceil_div(k, ROWS_PER_GROUP))]
  slots = [0.0] * resident
  for length in lengths:
    heapq.heappush(slots, heapq.heappop(slots) + length)
  time = max(slots)
  return chunks, len(lengths), sum(lengths) / resident / time, time


def main():
  print("map (N x H x W x C)   k   before: chunks blocks busy   after: chunks blocks busy   after/before")
  for n, h, c in ((128, 128, 128), (128, 64, 256), (128, 32, 1024), (128, 56, 128), (128, 28, 256)):
    for k in (27, 31, 51):
      b_chunks, b_blocks, b_busy, b_time = busy(n, h, c, k, merge_taps=0)
      a_chunks, a_blocks, a_busy, a_time = busy(n, h, c, k, merge_taps=MERGE_TAPS)
      print(f"{n}x{h}x{h}x{c:<6d} {k:3d}   {b_chunks:6d} {b_blocks:6d} {b_busy:5.3f}"
            f"   {a_chunks:6d} {a_blocks:6d} {a_busy:5.3f}   {a_time / b_time:.3f}")


if __name__ == "__main__":
  main()
