// The emulator's shared-memory race detector, checked: built under
// ThreadSanitizer (TANDEM_SANITIZE=thread), where each GPU thread is a TSan
// fiber ordered only by the barriers the kernel calls (fiber.h, block.cpp).
//   tandem_emu_race_check clean  -> a block reduction with its barriers: no report, exit 0
//   tandem_emu_race_check racy   -> the same without the barrier after the
//                                   writes: TSan reports the data race (exit 66)
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <vector>

namespace {

template <bool kBarrier>
__global__ void block_sum(const float* x, float* out) {
    __shared__ float part[128];
    part[threadIdx.x] = x[threadIdx.x];
    if (kBarrier) __syncthreads();
    for (int s = 64; s > 0; s >>= 1) {
        if (threadIdx.x < static_cast<unsigned>(s)) part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = part[0];
}

}  // namespace

int main(int argc, char** argv) {
    const bool racy = argc > 1 && std::strcmp(argv[1], "racy") == 0;
    std::vector<float> x(128, 1.0f);
    float *dx = nullptr, *dout = nullptr;
    if (cudaMalloc(&dx, x.size() * sizeof(float)) != cudaSuccess || cudaMalloc(&dout, sizeof(float)) != cudaSuccess) return 2;
    cudaMemcpy(dx, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice);
    if (racy) {
        block_sum<false> % ::tandem::emu::launch(__FILE__, __LINE__, 1, 128)(dx, dout);
    } else {
        block_sum<true> % ::tandem::emu::launch(__FILE__, __LINE__, 1, 128)(dx, dout);
    }
    float out = 0.0f;
    if (cudaMemcpy(&out, dout, sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess) return 2;
    std::printf("sum %g (%s)\n", out, racy ? "racy" : "clean");
    cudaFree(dx);
    cudaFree(dout);
    return 0;
}
