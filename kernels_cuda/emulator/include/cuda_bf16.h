// The CUDA emulator's cuda_bf16.h: __nv_bfloat16 as its bits, converted by
// the host's own bf16 functions (runtime/quant/fp16.h).
#pragma once

#include <cstdint>

#include "runtime/quant/fp16.h"

struct __nv_bfloat16 {
    uint16_t bits = 0;
};

inline float __bfloat162float(__nv_bfloat16 h) { return tandem::quant::bf16_to_fp32(h.bits); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16{tandem::quant::fp32_to_bf16(f)}; }
inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
