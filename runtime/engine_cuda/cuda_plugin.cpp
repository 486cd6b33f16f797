// The table libtandem_cuda.so (or libtandem_cuda_emu.so) exports
// (cuda_plugin.h).
#include "runtime/engine_cuda/cuda_plugin.h"

#ifdef TANDEM_CUDA_EMULATED
#include "kernels_cuda/emulator/emu.h"

namespace {
// The emulated GPU's memory is what --vram gives it (else the emulator's
// default), so that cudaMalloc fails where a card of that size would.
std::unique_ptr<tandem::Device> make_emulated(int device, std::optional<uint64_t> capacity,
                                              const tandem::gguf::File& file, const tandem::model::ModelSpec& spec,
                                              const tandem::DeviceConfig& config) {
    if (device >= 0 && device < tandem::emu::device_count()) {
        tandem::emu::set_capacity(device, capacity.value_or(tandem::emu::default_capacity()));
    }
    return tandem::cuda::direct::make_cuda_device(device, capacity, file, spec, config);
}
}  // namespace
#endif

extern "C" __attribute__((visibility("default"))) const tandem::cuda::CudaPlugin* tandem_cuda_plugin() {
    static const tandem::cuda::CudaPlugin table = [] {
        tandem::cuda::CudaPlugin t;
        t.build_id = TANDEM_CUDA_BUILD_ID;
        t.list_devices = tandem::cuda::direct::list_devices;
        t.measure_bandwidth = tandem::cuda::direct::measure_bandwidth;
#ifdef TANDEM_CUDA_EMULATED
        t.make_device = make_emulated;
#else
        t.make_device = tandem::cuda::direct::make_cuda_device;
#endif
        return t;
    }();
    return &table;
}
