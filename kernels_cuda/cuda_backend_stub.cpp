// The CUDA device factory of a build without CUDA.
#include "kernels_cuda/cuda_backend.h"

#include "runtime/common/error.h"

namespace tandem::cuda {

std::unique_ptr<Device> make_cuda_device(int, std::optional<uint64_t>, const gguf::File&, const model::ModelSpec&,
                                         const DeviceConfig&) {
    throw Error("--device cuda: this build of Tandem was built without CUDA (TANDEM_CUDA=OFF)");
}

}  // namespace tandem::cuda
