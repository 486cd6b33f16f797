// Built when TANDEM_CUDA is OFF or no nvcc was found: the single-kernel
// functions tests and benches call, always answering "no CUDA", so callers
// need no #ifdefs (device queries go through cuda_loader.cpp in every build).
#include "tests/cuda_ops/cuda_test_ops.h"
#include "runtime/common/error.h"

namespace tandem::cuda {

namespace {
[[noreturn]] void no_cuda() { throw Error("this build of Tandem has no CUDA support (TANDEM_CUDA=OFF)"); }
}  // namespace

void dequantize_row_on_device(int, quant::Type, const void*, float*, int64_t) { no_cuda(); }
void matmul_on_device(int, quant::Type, const void*, int64_t, int64_t, const float*, int64_t, float*, bool) { no_cuda(); }
double time_matmul_on_device(int, quant::Type, const void*, int64_t, int64_t, const float*, int64_t, int) {
    no_cuda();
    return 0.0;
}
void rms_norm_on_device(int, const float*, const float*, float*, int64_t, int64_t, float) { no_cuda(); }
void rope_on_device(int, float*, int64_t, int64_t, int64_t, const int32_t*, const kernels::RopeArgs&) { no_cuda(); }
void glu_on_device(int, bool, const float*, const float*, float*, int64_t) { no_cuda(); }
void attention_on_device(int, const float*, const int32_t*, int64_t, const kernels::AttentionArgs&, model::CacheType,
                         const void*, const void*, const int32_t*, int64_t, int64_t, int64_t, float*) {
    no_cuda();
}
void kv_store_on_device(int, model::CacheType, const float*, const float*, int64_t, const int32_t*, int64_t, int64_t,
                        int64_t, uint8_t*, uint8_t*) {
    no_cuda();
}
void add_rows_on_device(int, float*, const float*, int64_t, int64_t) { no_cuda(); }
void copy_cols_on_device(int, const float*, int64_t, int64_t, float*, int64_t, int64_t) { no_cuda(); }
void matmul_experts_on_device(int, quant::Type, const void*, int64_t, int64_t, int64_t, const float*, const float*,
                              int64_t, int64_t, bool, bool, float*) {
    no_cuda();
}

// Declared with the kernels (kernels_cuda/cuda_kernels.h), which this build
// does not compile: test_cuda_kernels.cpp calls it past its GPU check, which
// skips here, but the binary still has to link.
namespace kernels {
int64_t attention_splits(const AttentionArgs&, const KvCache&, int64_t) { no_cuda(); }
}  // namespace kernels

}  // namespace tandem::cuda
