// What every binary links for the GPU: cuda_api.h's device queries and
// cuda_device.h's factory, answered by the plugin (cuda_plugin.h) opened
// with dlopen at the first call, once the NVIDIA driver's library is found.
// Searched, in order: $TANDEM_CUDA_PLUGIN (a file), the folder of the
// running binary, and the build's own folder. No driver, no plugin, a
// plugin that cannot load (no libcudart, an undefined symbol) or one from
// another build is a reason, never a crash: the CPU runs.
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "runtime/engine_cuda/cuda_device.h"
#include "runtime/engine_cuda/cuda_plugin.h"
#include "runtime/common/error.h"

namespace tandem::cuda {
namespace {

struct Loaded {
    const CudaPlugin* plugin = nullptr;
    std::string why;  // when plugin is null
};

std::vector<std::filesystem::path> candidates() {
    std::vector<std::filesystem::path> out;
    if (const char* env = std::getenv("TANDEM_CUDA_PLUGIN"); env && *env) out.emplace_back(env);
    std::array<char, 4096> exe{};
    const ssize_t n = readlink("/proc/self/exe", exe.data(), exe.size() - 1);
    if (n > 0) out.push_back(std::filesystem::path(std::string(exe.data(), static_cast<size_t>(n))).parent_path() /
                             kCudaPluginFile);
#ifdef TANDEM_CUDA_PLUGIN_DIR
    out.push_back(std::filesystem::path(TANDEM_CUDA_PLUGIN_DIR) / kCudaPluginFile);
#endif
    return out;
}

Loaded open_plugin() {
    Loaded l;
#ifdef TANDEM_CUDA_PLUGIN_DIR
    // No driver, no GPU: then the plugin (and the ~200 MB of cuBLAS behind
    // it) is not worth mapping. CUDA's runtime opens this same library.
    // TANDEM_CUDA_SKIP_DRIVER_CHECK=1 loads the plugin anyway (a check that
    // it loads into this binary, on a machine without a GPU).
    const char* skip = std::getenv("TANDEM_CUDA_SKIP_DRIVER_CHECK");
    if (!(skip && std::string(skip) == "1") && !dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL)) {
        l.why = fmt::format("no NVIDIA driver ({})", dlerror());
        return l;
    }
#endif
    std::string tried;
    for (const auto& path : candidates()) {
        std::error_code ec;
        if (!std::filesystem::exists(path, ec)) {
            tried += (tried.empty() ? "" : ", ") + path.string();
            continue;
        }
        void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (!handle) {
            l.why = fmt::format("the CUDA plugin {} cannot be loaded: {}", path.string(), dlerror());
            return l;
        }
        using Entry = const CudaPlugin* (*)();
        auto entry = reinterpret_cast<Entry>(dlsym(handle, kCudaPluginEntry));
        const CudaPlugin* p = entry ? entry() : nullptr;
        if (!p || p->abi != kCudaPluginAbi) {
            l.why = fmt::format("the CUDA plugin {} is from another build of Tandem (ABI {}, expected {})",
                                path.string(), p ? p->abi : -1, kCudaPluginAbi);
            return l;  // the handle stays open: unloading code that may have run is not safe
        }
        l.plugin = p;
        return l;
    }
#ifdef TANDEM_CUDA_PLUGIN_DIR
    l.why = fmt::format("the CUDA plugin {} was not found (looked in {})", kCudaPluginFile, tried);
#else
    l.why = "this build of Tandem has no CUDA support (TANDEM_CUDA=OFF)";
#endif
    return l;
}

const Loaded& plugin() {
    static std::once_flag once;
    static Loaded loaded;
    std::call_once(once, [] { loaded = open_plugin(); });
    return loaded;
}

}  // namespace

int device_index(const std::string& name) {
    if (name.rfind("cuda", 0) != 0) return -1;
    if (name.size() == 4) return 0;
    if (name.size() > 7 || !std::all_of(name.begin() + 4, name.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        return -1;
    }
    return std::stoi(name.substr(4));
}

std::vector<DeviceInfo> list_devices(std::string* why_none) {
    const Loaded& l = plugin();
    if (!l.plugin) {
        if (why_none) *why_none = l.why;
        return {};
    }
    return l.plugin->list_devices(why_none);
}

BandwidthMeasurement measure_bandwidth(int device, size_t bytes) {
    const Loaded& l = plugin();
    if (!l.plugin) throw Error(l.why);
    return l.plugin->measure_bandwidth(device, bytes);
}

std::unique_ptr<Device> make_cuda_device(int device, std::optional<uint64_t> capacity, const gguf::File& file,
                                         const model::ModelSpec& spec, const DeviceConfig& config) {
    const Loaded& l = plugin();
    if (!l.plugin) throw Error(fmt::format("--device cuda{}: {}", device, l.why));
    return l.plugin->make_device(device, capacity, file, spec, config);
}

}  // namespace tandem::cuda
