// The int8 tensor-core product the batch kernels use: one warp computes
// C[16][8] += A[16][16] B[16][8] in exact 32-bit integers
// (mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32). Fragments, per PTX,
// for lane = 4 g + t:
//   a[0] = A[g][4t..4t+3], a[1] = A[g+8][4t..4t+3]  (four signed bytes each)
//   b    = B[4t..4t+3][g]
//   c[0] = C[g][2t], c[1] = C[g][2t+1], c[2] = C[g+8][2t], c[3] = C[g+8][2t+1]
// Ampere on (sm_80+) has the instruction; Turing (sm_75) runs it as two
// m8n8k16 products, rows g and g+8, whose fragments are these halves; the
// emulator computes it as a warp collective (emulator/emu.h). Every lane of
// the warp must call it together.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tandem::cuda {

__device__ __forceinline__ void mma_s8_16x8x16(int32_t (&c)[4], uint32_t a0, uint32_t a1, uint32_t b) {
#if defined(TANDEM_CUDA_EMULATED)
    ::tandem::emu::MmaS8Fragments f{c, {a0, a1}, b};
    ::tandem::emu::mma_s8_m16n8k16(f, __FILE__, __LINE__);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                 : "r"(a0), "r"(a1), "r"(b));
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 750
    asm volatile("mma.sync.aligned.m8n8k16.row.col.s32.s8.s8.s32 {%0,%1}, {%2}, {%3}, {%0,%1};"
                 : "+r"(c[0]), "+r"(c[1])
                 : "r"(a0), "r"(b));
    asm volatile("mma.sync.aligned.m8n8k16.row.col.s32.s8.s8.s32 {%0,%1}, {%2}, {%3}, {%0,%1};"
                 : "+r"(c[2]), "+r"(c[3])
                 : "r"(a1), "r"(b));
#elif defined(__CUDA_ARCH__)
#error "the int8 tensor-core product needs sm_75 or later"
#else
    (void)c, (void)a0, (void)a1, (void)b;  // nvcc's host pass: never called
#endif
}

}  // namespace tandem::cuda
