// Built when TANDEM_CUDA is OFF or no nvcc was found: the same API, always
// answering "no GPU", so callers need no #ifdefs.
#include "kernels_cuda/cuda_api.h"
#include "runtime/common/error.h"

namespace tandem::cuda {

bool compiled_with_cuda() { return false; }

std::vector<DeviceInfo> list_devices(std::string* why_none) {
    if (why_none) *why_none = "this build of Tandem has no CUDA support (TANDEM_CUDA=OFF)";
    return {};
}

void dequantize_row_on_device(int, quant::Type, const void*, float*, int64_t) {
    throw Error("this build of Tandem has no CUDA support (TANDEM_CUDA=OFF)");
}

}  // namespace tandem::cuda
