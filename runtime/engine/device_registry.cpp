#include "runtime/engine/device_registry.h"

#include <algorithm>

#include <fmt/format.h>

#include "runtime/common/error.h"
#include "runtime/engine/stand_in_device.h"
#include "runtime/engine_cuda/cuda_device.h"

namespace tandem {

AcceleratorName parse_accelerator(const std::string& name) {
    if (name.empty()) return {};
    if (name.size() > 3 && name.compare(0, 3, "cpu") == 0 &&
        name.find_first_not_of("0123456789", 3) == std::string::npos && name[3] != '0') {
        const std::string digits = name.substr(3);
        if (digits.size() <= 2 && std::stoi(digits) >= 2) return {AcceleratorKind::StandIn, -1};
    }
    const int index = cuda::device_index(name);
    if (index >= 0) return {AcceleratorKind::Cuda, index};
    throw Error(fmt::format(
        "--device: expected cuda, cudaN (a GPU) or cpuN with N >= 2 (a stand-in device), or a comma list of them, "
        "found '{}'",
        name));
}

std::vector<std::string> parse_accelerators(const std::string& list) {
    std::vector<std::string> names;
    if (list.empty()) return names;
    std::vector<AcceleratorName> seen;
    size_t start = 0;
    while (start <= list.size()) {
        const size_t comma = std::min(list.find(',', start), list.size());
        std::string name = list.substr(start, comma - start);
        start = comma + 1;
        if (name.empty()) throw Error(fmt::format("--device: expected names between the commas, found '{}'", list));
        const AcceleratorName a = parse_accelerator(name);
        if (a.kind == AcceleratorKind::Cuda) name = fmt::format("cuda{}", a.cuda_index);
        if (std::find(names.begin(), names.end(), name) != names.end()) {
            throw Error(fmt::format("--device: '{}' names {} twice", list, name));
        }
        names.push_back(std::move(name));
    }
    return names;
}

bool all_stand_ins(const std::string& list) {
    const std::vector<std::string> names = parse_accelerators(list);
    return !names.empty() && std::all_of(names.begin(), names.end(), [](const std::string& n) {
        return parse_accelerator(n).kind == AcceleratorKind::StandIn;
    });
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
