// expf several lanes at a time with the bits of the C library's expf, for
// the softmax steps of decode attention (one exp per score; llama.cpp's
// CPU backend calls expf there, so the same bits keep the same logits).
#pragma once

#include <cstdint>

namespace tandem::cpu::detail {

// y[i] = std::exp(x[i]) for i < n, bit for bit, where expf_lanes_match_libm()
// (AVX-512 only; checked once against std::exp on a spread of inputs:
// another C library's expf, e.g. a correctly rounded one, fails the check
// and the caller keeps calling std::exp).
void expf_lanes_avx512(const float* x, float* y, int64_t n);
bool expf_lanes_match_libm();

}  // namespace tandem::cpu::detail
