// The CUDA plugin's entry: libtandem_cuda.so (built when nvcc exists) holds
// the kernels, cuBLAS and the CUDA device, and exports one table of plain
// C++ functions. The `tandem` binary links none of it: cuda_loader.cpp opens
// the plugin with dlopen the first time a GPU is wanted, so every command
// starts without mapping the CUDA libraries, and a machine without them
// runs on the CPU. The plugin resolves the engine's own functions (ledger,
// file views, sizes) from the binary that loads it (built with exported
// symbols), so both share one copy of them.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels_cuda/cuda_api.h"
#include "kernels_cuda/cuda_direct.h"
#include "runtime/engine/device.h"

namespace tandem::cuda {

inline constexpr const char* kCudaPluginFile = "libtandem_cuda.so";
// Built with TANDEM_CUDA_EMULATE=ON: the same sources on the host emulator
// (kernels_cuda/emulator), loaded instead when TANDEM_CUDA_EMULATE=1.
inline constexpr const char* kCudaEmulatedPluginFile = "libtandem_cuda_emu.so";
inline constexpr const char* kCudaPluginEntry = "tandem_cuda_plugin";

struct CudaPlugin {
    // The build's id (runtime/engine_cuda/CMakeLists.txt: a hash of the
    // headers whose types cross this table, the compiler and the flags),
    // first so that a plugin of any other layout still reads it.
    const char* build_id = nullptr;
    std::vector<DeviceInfo> (*list_devices)(std::string* why_none) = nullptr;
    BandwidthMeasurement (*measure_bandwidth)(int device, size_t bytes) = nullptr;
    std::unique_ptr<Device> (*make_device)(int device, std::optional<uint64_t> capacity, const gguf::File& file,
                                           const model::ModelSpec& spec, const DeviceConfig& config) = nullptr;
};

// The implementations inside the plugin (and in the static kernel library
// the tests link): what the table points at (kernels_cuda/cuda_direct.h
// has the other two).
namespace direct {
std::unique_ptr<Device> make_cuda_device(int device, std::optional<uint64_t> capacity, const gguf::File& file,
                                         const model::ModelSpec& spec, const DeviceConfig& config);
}  // namespace direct

}  // namespace tandem::cuda

// The plugin's one exported symbol.
extern "C" const tandem::cuda::CudaPlugin* tandem_cuda_plugin();
