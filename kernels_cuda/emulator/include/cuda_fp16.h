// The CUDA emulator's cuda_fp16.h: __half as its bits, converted by the
// host's own fp16 functions (runtime/quant/fp16.h), so host and "device"
// round alike.
#pragma once

#include <cstdint>

#include "runtime/quant/fp16.h"

struct __half {
    uint16_t bits = 0;
};

inline float __half2float(__half h) { return tandem::quant::fp16_to_fp32(h.bits); }
inline __half __float2half_rn(float f) { return __half{tandem::quant::fp32_to_fp16(f)}; }
inline __half __float2half(float f) { return __float2half_rn(f); }
inline __half __ushort_as_half(unsigned short v) { return __half{v}; }
inline unsigned short __half_as_ushort(__half h) { return h.bits; }
