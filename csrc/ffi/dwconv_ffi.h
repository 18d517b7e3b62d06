// The XLA FFI handler symbols, one per pass and platform; module.cc registers them.
#pragma once

#include "xla/ffi/api/ffi.h"

namespace flashdwc {

XLA_FFI_DECLARE_HANDLER_SYMBOL(DwConvFwdCpuFfi);
XLA_FFI_DECLARE_HANDLER_SYMBOL(DwConvFwdFusedCpuFfi);
XLA_FFI_DECLARE_HANDLER_SYMBOL(DwConvBwdDataCpuFfi);
XLA_FFI_DECLARE_HANDLER_SYMBOL(DwConvBwdFilterCpuFfi);

#ifdef FLASHDWC_WITH_CUDA
XLA_FFI_DECLARE_HANDLER_SYMBOL(DwConvFwdCudaFfi);
XLA_FFI_DECLARE_HANDLER_SYMBOL(DwConvFwdFusedCudaFfi);
XLA_FFI_DECLARE_HANDLER_SYMBOL(DwConvBwdDataCudaFfi);
XLA_FFI_DECLARE_HANDLER_SYMBOL(DwConvBwdFilterCudaFfi);
#endif

}  // namespace flashdwc
