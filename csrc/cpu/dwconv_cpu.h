// CPU depthwise-convolution kernels: direct loops, fp32 accumulation,
// multi-threaded over output rows. T is float, HostHalf or HostBFloat16.
#pragma once

#include "common/epilogue.h"
#include "common/params.h"

namespace flashdwc {

// y = epilogue(conv(prologue(x), w)). Reads x (N, in_h, in_w, C) and w; writes y (N, out_h, out_w, C).
template <typename T>
void dwconv_fwd_cpu(const DwConvParams& p, const T* x, const T* w, T* y, const FwdEpilogue& epilogue = {},
                    const FwdPrologue& prologue = {});

// dx = d(conv)/dx applied to dy. Reads dy (N, out_h, out_w, C); writes dx (N, in_h, in_w, C).
template <typename T>
void dwconv_bwd_data_cpu(const DwConvParams& p, const T* dy, const T* w, T* dx);

// dw = d(conv)/dw applied to dy. Reads x and dy; writes dw (KH, KW, C). The reduction
// order is fixed for a given machine, so the result is reproducible run to run.
template <typename T>
void dwconv_bwd_filter_cpu(const DwConvParams& p, const T* x, const T* dy, T* dw);

}  // namespace flashdwc
