// The CUDA implementation of Backend, seen from plain C++: no CUDA type
// crosses this header. The factory exists in every build; without CUDA it
// throws, so the scheduler needs no #ifdefs.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "runtime/backend/backend.h"

namespace tandem::cuda {

// A backend on GPU `device` named "cuda<device>". capacity: the bytes it
// may use (--vram); nullopt: the device's free memory at creation. Throws
// tandem::Error when the build has no CUDA, the device does not exist, or
// the configuration is not supported on CUDA yet (a Q8_0 KV cache).
std::unique_ptr<Backend> make_cuda_backend(int device, std::optional<uint64_t> capacity, const gguf::File& file,
                                           const model::ModelSpec& spec, const BackendConfig& config);

}  // namespace tandem::cuda
