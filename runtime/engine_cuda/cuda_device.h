// The CUDA device, seen from plain C++: no CUDA type crosses this header.
// The factory exists in every build; without CUDA it throws, so the
// session needs no #ifdefs.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "runtime/engine/device.h"

namespace tandem::cuda {

// The GPU a device name means: "cuda" is 0, "cudaN" is N; -1 for any other
// name ("cpu2", "cudax").
int device_index(const std::string& name);

// A device on GPU `device` named "cuda<device>". capacity: the bytes it
// may use (--vram); nullopt: the device's free memory at creation. Throws
// tandem::Error when the build has no CUDA, the device does not exist, or
// the configuration is not supported on CUDA yet (a head size the
// attention kernels do not handle).
std::unique_ptr<Device> make_cuda_device(int device, std::optional<uint64_t> capacity, const gguf::File& file,
                                         const model::ModelSpec& spec, const DeviceConfig& config);

}  // namespace tandem::cuda
