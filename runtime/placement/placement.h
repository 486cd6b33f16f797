// Where every tensor lives: a device for each weight tensor, for each
// layer's K/V cache and for the output head, resolved once from what the
// user asked (-ngl, -ot/--override-tensor, --cpu-moe, --n-cpu-moe,
// --no-kv-offload). Pure: it reads the model's tensor names and never its
// data, so the planner, the session and `tandem plan` share it.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/model/model_spec.h"

namespace tandem {

// Device indices: the host is always 0, the accelerators 1, 2, ... in
// --device's order (kAccelDevice: the first, the one a single-accelerator
// plan and weight streaming use).
inline constexpr int kHostDevice = 0;
inline constexpr int kAccelDevice = 1;

// One rule of -ot: tensors whose name contains a match of `pattern`
// (std::regex_search, as llama.cpp) go to `device` ("cpu" for the host,
// or an accelerator's name). Earlier rules win, as in llama.cpp.
struct TensorOverride {
    std::string pattern;
    std::string device;
};

// Parses "REGEX=DEVICE[,REGEX=DEVICE...]" (the value of -ot). Throws
// tandem::Error naming the part that is not REGEX=DEVICE or whose regex
// does not compile.
std::vector<TensorOverride> parse_tensor_overrides(const std::string& text);

// What the user asked for.
struct PlacementRequest {
    // The accelerators' names ("cpu2", "cuda0"), in order; none: empty.
    std::vector<std::string> devices;
    // Leading layers on the accelerators; past n_layer the output norm and
    // head go there too (llama.cpp's -ngl).
    int64_t n_gpu_layers = 0;
    // The layer n_gpu_layers counts from: 0 (llama.cpp's -ngl), or a
    // pipeline stage's first layer where the stage planned its own layers
    // (-ngl auto under --pipeline); the layers before it stay on the host.
    int64_t first_layer = 0;
    // How those layers are shared between several accelerators
    // (llama.cpp's -ts, split by layers): proportions, one per device;
    // empty: equal shares. See layer_device().
    std::vector<double> split;
    std::vector<TensorOverride> overrides;
    bool cpu_moe = false;       // every expert tensor on the host
    int64_t n_cpu_moe = 0;      // the expert tensors of the model's first N layers on the host
    bool kv_offload = true;     // false: every K/V cache on the host (-nkvo)
    // The model's number of the spec's layer 0: 0, or a stage's first layer
    // where the spec is that stage's alone (planner::stage_spec), whose
    // tensors keep the model's names; n_cpu_moe counts the model's layers.
    int64_t spec_first_layer = 0;
};

struct Placement {
    std::vector<std::string> devices;  // [kHostDevice] = "cpu", then the accelerators
    // Every layer tensor and the output norm. The head is apart: tied to
    // the embedding it is still placed (and copied) on its own.
    std::unordered_map<const gguf::TensorInfo*, int> tensor;
    std::vector<int> kv;               // per layer
    std::vector<int> layer;            // per layer: its -ngl device (before overrides)
    int head = kHostDevice;            // output.weight, or the tied embedding used as the head
    const gguf::TensorInfo* head_tensor = nullptr;
    const gguf::TensorInfo* embd_tensor = nullptr;  // the lookup stays on the host, as in llama.cpp
    bool overridden = false;           // some rule moved a tensor off its -ngl device

    int of(const gguf::TensorInfo* t) const;  // kHostDevice for nullptr or an unknown tensor
    bool uses(int device) const;              // holds any tensor, cache or the head there
    // Bytes of weights placed on `device`: its tensors, the head where it
    // is (a tied head counted again on an accelerator, which holds a copy),
    // and on the host the embedding table.
    uint64_t weight_bytes(int device) const;
};

// The device of the i-th of n offloaded units (the leading layers, then
// the output as unit n_layer) under the proportions `split` of n_devices
// accelerators, as llama.cpp's -ts: the accelerators take consecutive runs,
// device k the units i with i / n below the sum of the first k + 1
// proportions over their total. Equal shares when split is empty. Throws
// tandem::Error for a split with another count of entries, a negative
// entry, or none above 0.
int layer_device(int64_t i, int64_t n, int64_t n_devices, const std::vector<double>& split);

// Resolves the request against the model: -ngl first, then the expert
// rules, then -ot in order (the first matching rule decides). A K/V cache
// lives with its layer's attn_k weight (attn_qkv where K is fused into it)
// unless kv_offload is false. Throws
// tandem::Error for a negative -ngl, a device name that is neither "cpu"
// nor an accelerator in use, layers asked of an accelerator that is
// absent, or a bad split.
Placement place_tensors(const model::ModelSpec& spec, const PlacementRequest& request);

// A few lines for --verbose: runs of layers with the same devices, e.g.
// "blk 0-15: cpu2 | blk 16-21: attn cpu2, ffn cpu, kv cpu2 | output: cpu".
std::string describe_placement(const model::ModelSpec& spec, const Placement& p);

}  // namespace tandem
