// Problem description shared by every depthwise-convolution kernel, CPU and CUDA.
//
// Layouts: x and dx are (N, H, W, C); y and dy are (N, Ho, Wo, C); the filter is
// (KH, KW, 1, C), i.e. (KH, KW, C) in memory. All row-major, channels fastest.
#pragma once

#include <cstdint>

#include "common/host_device.h"

namespace flashdwc {

// Passed by value to kernels; every size is 64-bit so that index products never
// overflow on tensors of more than 2^31 elements.
struct DwConvParams {
  // Batch size N.
  int64_t batch;
  // Spatial size of the convolution input (x in the forward pass, dx in backward-data).
  int64_t in_h, in_w;
  // Spatial size of the convolution output (y in the forward pass, dy in the backward passes).
  int64_t out_h, out_w;
  // Channel count C; the filter has one (KH, KW) slice per channel.
  int64_t channels;
  // Filter size.
  int64_t kernel_h, kernel_w;
  // Step between neighbouring output positions, in input elements.
  int64_t stride_h, stride_w;
  // Zero rows/columns added before the input. Negative values crop; the padding
  // after the input is implied by out_h/out_w and needs no field.
  int64_t pad_top, pad_left;
  // Step between neighbouring filter taps, in input elements.
  int64_t dilation_h, dilation_w;
  // Read the filter rotated by 180 degrees (backward-data as a forward conv).
  bool flip_filter;
};

// Strides, padding before the input and dilations: the problem apart from its
// buffers' shapes (the FFI handlers' `geometry` attribute). Padding after the input
// is implied by the output size.
struct ConvGeometry {
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_top = 0, pad_left = 0;
  int64_t dilation_h = 1, dilation_w = 1;
};

// The one way a DwConvParams is filled: from the sizes of x (batch, in_h, in_w,
// channels), of y (out_h, out_w) and of the filter, and the geometry.
inline DwConvParams make_dwconv_params(int64_t batch, int64_t in_h, int64_t in_w, int64_t out_h, int64_t out_w,
                                       int64_t channels, int64_t kernel_h, int64_t kernel_w, const ConvGeometry& g,
                                       bool flip_filter = false) {
  DwConvParams p{};
  p.batch = batch;
  p.in_h = in_h;
  p.in_w = in_w;
  p.out_h = out_h;
  p.out_w = out_w;
  p.channels = channels;
  p.kernel_h = kernel_h;
  p.kernel_w = kernel_w;
  p.stride_h = g.stride_h;
  p.stride_w = g.stride_w;
  p.pad_top = g.pad_top;
  p.pad_left = g.pad_left;
  p.dilation_h = g.dilation_h;
  p.dilation_w = g.dilation_w;
  p.flip_filter = flip_filter;
  return p;
}

// Index of tap (kh, kw) in the (KH, KW) filter slice, honouring flip_filter.
inline FLASHDWC_HOST_DEVICE int64_t filter_tap(const DwConvParams& p, int64_t kh, int64_t kw) {
  return p.flip_filter ? (p.kernel_h - 1 - kh) * p.kernel_w + (p.kernel_w - 1 - kw)
                       : kh * p.kernel_w + kw;
}

// Backward-data with stride 1 is a forward convolution of dy with the filter rotated
// by 180 degrees, padded by (K-1)*d - pad before. Returns those forward params;
// `p` describes the backward-data problem (in_* = dx, out_* = dy).
inline DwConvParams stride1_bwd_data_as_fwd(const DwConvParams& p) {
  DwConvParams f = p;
  f.in_h = p.out_h;
  f.in_w = p.out_w;
  f.out_h = p.in_h;
  f.out_w = p.in_w;
  f.pad_top = (p.kernel_h - 1) * p.dilation_h - p.pad_top;
  f.pad_left = (p.kernel_w - 1) * p.dilation_w - p.pad_left;
  f.flip_filter = !p.flip_filter;
  return f;
}

}  // namespace flashdwc
