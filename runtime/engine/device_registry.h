// The accelerators a session can open, and their names, parsed in one
// place: "" (none), "cpuN" for N >= 2 (a stand-in: a second CPU backend
// that owns its memory, with a capacity, so the split, the hand-over and
// the accounting run for real without a GPU; several stand-ins are several
// devices), "cuda" or "cudaN" (GPU N, through the CUDA plugin,
// runtime/engine_cuda/cuda_loader.cpp). --device takes one name or a
// comma list ("cuda0,cuda1", "cpu2,cpu3"). The session and every tool ask
// here; no other code compares device names.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels_cpu/matmul.h"
#include "kernels_cpu/thread_pool.h"
#include "runtime/engine/device.h"

namespace tandem {

enum class AcceleratorKind { None, StandIn, Cuda };

struct AcceleratorName {
    AcceleratorKind kind = AcceleratorKind::None;
    int cuda_index = -1;  // Cuda: the GPU
};

// One name. Throws tandem::Error naming what was expected and what was found.
AcceleratorName parse_accelerator(const std::string& name);

// The names of a --device list in order ("" gives none), each checked by
// parse_accelerator and spelled canonically ("cuda" is "cuda0"). Throws
// tandem::Error for a bad name, an empty item or a device named twice.
std::vector<std::string> parse_accelerators(const std::string& list);

// Every device of the list is a stand-in (false for none).
bool all_stand_ins(const std::string& list);

// Opens accelerator `name` (not ""): its capacity (nullopt: a GPU's free
// memory; the stand-in unlimited), over the model, with the host's pool
// and SIMD level for the stand-in. Throws tandem::Error (OutOfDeviceMemory
// for a full device).
std::unique_ptr<Device> open_accelerator(const std::string& name, std::optional<uint64_t> capacity,
                                         const gguf::File& file, const model::ModelSpec& spec,
                                         const DeviceConfig& config, cpu::ThreadPool& pool, cpu::SimdLevel level);

}  // namespace tandem
