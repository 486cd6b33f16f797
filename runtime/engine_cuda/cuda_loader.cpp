// What every binary links for the GPU: cuda_api.h's device queries and
// cuda_device.h's factory, answered by the plugin (cuda_plugin.h) opened
// with dlopen at the first call, once the NVIDIA driver's library is found.
// Searched, in order: $TANDEM_CUDA_PLUGIN (a file), the folder of the
// running binary, and the build's own folder; the first that loads and has
// this build's id wins. No driver, no plugin, a plugin that cannot load (no
// libcudart, an undefined symbol) or one from another build is a reason,
// never a crash: the CPU runs.
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

// TANDEM_CUDA_EMULATE=1: the emulated build of the plugin (the CUDA sources
// on the host, kernels_cuda/emulator), which needs no driver.
bool emulated() {
    const char* e = std::getenv("TANDEM_CUDA_EMULATE");
    return e && std::string(e) == "1";
}

std::vector<std::filesystem::path> candidates() {
    const char* file = emulated() ? kCudaEmulatedPluginFile : kCudaPluginFile;
    std::vector<std::filesystem::path> out;
    if (const char* env = std::getenv("TANDEM_CUDA_PLUGIN"); env && *env) out.emplace_back(env);
    std::array<char, 4096> exe{};
    const ssize_t n = readlink("/proc/self/exe", exe.data(), exe.size() - 1);
    if (n > 0) out.push_back(std::filesystem::path(std::string(exe.data(), static_cast<size_t>(n))).parent_path() / file);
#ifdef TANDEM_CUDA_PLUGIN_DIR
    out.push_back(std::filesystem::path(TANDEM_CUDA_PLUGIN_DIR) / file);
#endif
    return out;
}

// Opens one candidate: the plugin, or why not (a dlopen failure, no entry,
// another build's id).
const CudaPlugin* try_open(const std::filesystem::path& path, std::string& why) {
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        why = fmt::format("{} cannot be loaded: {}", path.string(), dlerror());
        return nullptr;
    }
    using Entry = const CudaPlugin* (*)();
    auto entry = reinterpret_cast<Entry>(dlsym(handle, kCudaPluginEntry));
    const CudaPlugin* p = entry ? entry() : nullptr;
    // The handle stays open in every case: unloading code that may have run
    // (static constructors) is not safe.
    if (!p) {
        why = fmt::format("{} has no entry {}", path.string(), kCudaPluginEntry);
        return nullptr;
    }
#ifdef TANDEM_CUDA_BUILD_ID
    const std::string id = p->build_id ? p->build_id : "none";
    if (id != TANDEM_CUDA_BUILD_ID) {
        why = fmt::format("{} is from another build of Tandem (build id {}, expected {})", path.string(), id,
                          TANDEM_CUDA_BUILD_ID);
        return nullptr;
    }
#endif
    return p;
}

Loaded open_plugin() {
    Loaded l;
#ifdef TANDEM_CUDA_PLUGIN_DIR
    // No driver, no GPU: then the plugin (and the ~200 MB of cuBLAS behind
    // it) is not worth mapping. CUDA's runtime opens this same library.
    // TANDEM_CUDA_SKIP_DRIVER_CHECK=1 loads the plugin anyway (a check that
    // it loads into this binary, on a machine without a GPU); the emulated
    // plugin needs no driver.
    const char* skip = std::getenv("TANDEM_CUDA_SKIP_DRIVER_CHECK");
    if (!emulated() && !(skip && std::string(skip) == "1") && !dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL)) {
        l.why = fmt::format("no NVIDIA driver ({})", dlerror());
        return l;
    }
#endif
    // Each candidate in turn: one that is missing or fails to load leaves
    // the next its chance, and the reasons of all are kept.
    std::string tried;
    for (const auto& path : candidates()) {
        std::error_code ec;
        std::string why;
        if (!std::filesystem::exists(path, ec)) {
            why = fmt::format("{} not found", path.string());
        } else if (const CudaPlugin* p = try_open(path, why)) {
            l.plugin = p;
            return l;
        }
        tried += (tried.empty() ? "" : "; ") + why;
    }
#ifdef TANDEM_CUDA_PLUGIN_DIR
    l.why = fmt::format("no usable CUDA plugin {}: {}", emulated() ? kCudaEmulatedPluginFile : kCudaPluginFile, tried);
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
