#include "runtime/engine/device_registry.h"

#include <fmt/format.h>

#include "runtime/common/error.h"
#include "runtime/engine/stand_in_device.h"
#include "runtime/engine_cuda/cuda_device.h"

namespace tandem {

AcceleratorName parse_accelerator(const std::string& name) {
    if (name.empty()) return {};
    if (name == "cpu2") return {AcceleratorKind::StandIn, -1};
    const int index = cuda::device_index(name);
    if (index >= 0) return {AcceleratorKind::Cuda, index};
    throw Error(
        fmt::format("--device: expected cuda, cudaN (a GPU) or cpu2 (the stand-in device), found '{}'", name));
}

std::unique_ptr<Device> open_accelerator(const std::string& name, std::optional<uint64_t> capacity,
                                         const gguf::File& file, const model::ModelSpec& spec,
                                         const DeviceConfig& config, cpu::ThreadPool& pool, cpu::SimdLevel level) {
    const AcceleratorName a = parse_accelerator(name);
    switch (a.kind) {
        case AcceleratorKind::Cuda: return cuda::make_cuda_device(a.cuda_index, capacity, file, spec, config);
        case AcceleratorKind::StandIn:
            return std::make_unique<StandInDevice>(name, capacity, file, spec, config, pool, level);
        case AcceleratorKind::None: break;
    }
    throw Error("open_accelerator: no device named");
}

}  // namespace tandem
