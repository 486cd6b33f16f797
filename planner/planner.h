// The planner: a pure function from a model's metadata, a device capacity
// and the run options to a placement (-ngl and, for the per-tensor
// candidates, the -ot / --n-cpu-moe rules that make it), the bytes each
// device will hold by category, predicted decode and prefill speed, and the
// reasons for the choice. Bytes come from runtime/model/model_spec.h, the
// same functions the Session reserves with, and follow the same placement
// rules as runtime/engine/session.cpp, so a plan equals the runtime's
// ledgers.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/model/model_spec.h"
#include "runtime/placement/placement.h"
#include "runtime/quant/quant_types.h"

namespace tandem::planner {

// Assumed hardware speeds when nothing was measured. Each plan says which
// of these it used, so a reader knows what is a default.
inline constexpr double kDefaultCpuGBps = 30.0;      // dual-channel DDR5 desktop
inline constexpr double kDefaultGpuGBps = 3000.0;    // between an RTX 4090 (1 TB/s) and an H200 (4.8 TB/s)
inline constexpr double kDefaultPcieGBps = 25.0;     // PCIe 4.0 x16, achieved
inline constexpr double kDefaultCpuGflops = 150.0;   // quantized GEMM on ~8 AVX2 cores
inline constexpr double kDefaultGpuGflops = 50000.0; // quantized GEMM, well below the tensor-core peak
// Latency of one hidden-state hand-over between devices (launch + copy
// setup), which dominates the few KiB actually moved per token.
inline constexpr double kHandOverLatencyS = 10e-6;
// Fixed costs of a step when bench --calibrate has not measured them: a
// product handed to the threads (the activations quantized, the threads
// woken and met), any other op spread over the threads (a batch's norms,
// RoPE, adds; a decode step's attention), an op a decode step runs on the
// calling thread (its norms, RoPE and adds over one row), and each
// evaluated batch's own (the embedding lookup, the logits copied out, the
// session's bookkeeping).
inline constexpr double kDefaultMatmulCallS = 6e-6;
inline constexpr double kDefaultPoolOpS = 4e-6;
inline constexpr double kDefaultInlineOpS = 0.3e-6;
inline constexpr double kDefaultBatchS = 20e-6;
// The micro-batch sizes bench --calibrate measures the GEMM rate at; the
// rate at other sizes is interpolated on log2 of the batch.
inline constexpr int64_t kGemmSmallBatch = 32;
// A few tokens (a serving step of four streams; a prompt's tokens spread
// over the experts): the several-tokens decode kernels, which read the
// weights from memory as a one-token product does but unpack each block
// once for all the tokens; neither a one-token product nor a GEMM.
inline constexpr int64_t kGemmFewBatch = 4;
// The row widths bench --calibrate measures the rates at.
inline constexpr int64_t kWideCols = 4096;
inline constexpr int64_t kNarrowCols = 256;
// The row widths bench --calibrate also measures the kGemmSmallBatch rate
// at, from memory over matrices of kGemmByColsRows rows each, each
// product's hand-over taken out: the rate moves with the width (Q4_K on
// Zen 4: ~300 GFLOP/s at 256 columns, ~365 at 1024, ~410 at 2048, ~465 at
// 4096), more than the narrow/wide factor (one matrix from cache) says.
inline constexpr std::array<int64_t, 6> kGemmByCols = {256, 512, 1024, 2048, 4096, 8192};
inline constexpr int64_t kGemmByColsRows = 4096;
// Micro-batches from this many tokens take the tiled attention kernel
// (kernels_cpu/attention_tiled.h; the planner does not link kernels).
inline constexpr int64_t kTiledAttentionMinTokens = 64;
inline constexpr int64_t kGemmLargeBatch = 512;

// What one device's kernels achieve on this machine, measured by bench
// --calibrate (planner/calibration.h). Per weight type: a one-token
// product's rate in GB/s of weights read from memory (matvec_gbps), the
// same for weights the last-level cache holds (matvec_cached_gbps, used
// while a token's weights fit in cache_bytes), and a micro-batch
// product's GFLOP/s at kGemmSmallBatch (weights from memory, as a model's
// prompt reads them) and kGemmLargeBatch tokens. A type
// without an entry takes the device's GB/s and GFLOP/s speeds. Then the
// fixed costs above, and the hand-overs to the other device: a fixed
// part per crossing and the bytes at copy_gbps (the stand-in copies host
// memory; a GPU's go over PCIe). Unset: the defaults.
struct KernelCosts {
    std::map<quant::Type, double> matvec_gbps, matvec_cached_gbps, gemm_small_gflops, gemm_large_gflops;
    // The same one-token (from cache) and kGemmSmallBatch rates for rows of
    // kNarrowCols instead of kWideCols: a short row pays its per-row work
    // over fewer weights (the tiny model's Q6_K head, 256 columns, ran
    // 25 GB/s against 40 for 4096). A model's products take the rate at its
    // n_embd, interpolated on log2 between the two, as a factor on the
    // type's rates. Unset: the wide rates for every width.
    std::map<quant::Type, double> matvec_narrow_gbps, gemm_small_narrow_gflops;
    // GFLOP/s of a product of kGemmFewBatch tokens with weights from memory
    // (as matvec_gbps): a third point of the rate over the batch size,
    // used where the weights do not fit in the cache. Unset: interpolated
    // between one token and kGemmSmallBatch.
    std::map<quant::Type, double> gemm_few_gflops;
    // GFLOP/s of a kGemmSmallBatch product with weights from memory, by row
    // width (kGemmByCols), each product's hand-over taken out: a product
    // of another width takes the rate interpolated on log2 of the width,
    // flat past either end. Unset: the narrow/wide factor on
    // gemm_small_gflops.
    std::map<quant::Type, std::map<int64_t, double>> gemm_small_by_cols;
    std::optional<uint64_t> cache_bytes;
    // batch_call_s: a product of a micro-batch handed over (its rows
    // quantized, the panels set up); unset: matmul_call_s.
    std::optional<double> matmul_call_s, batch_call_s, pool_op_s, inline_op_s, batch_s;
    // inline_op_elem_s: per element of the row (the model's n_embd) of an
    // op on the calling thread, beside inline_op_s as its fixed part (a
    // decode step's norm sums its row in a chain, ~4 cycles an element).
    // Unset: inline_op_s is the whole op.
    std::optional<double> inline_op_elem_s;
    // pool_op_elem_s: per element of a micro-batch's op over rows (norms,
    // RoPE, residual adds, the FFN activation) handed to the threads,
    // beside pool_op_s as its fixed part; counted over each op's own width
    // (the activation's n_ff, RoPE's Q and K widths). Unset: none.
    std::optional<double> pool_op_elem_s;
    // Attention of a decode step and of micro-batches under
    // kTiledAttentionMinTokens tokens, by head dimension: seconds per query
    // head and cached position it attends, over the threads (the per-token
    // kernel; head dimensions under its 64-element step run the dot's
    // scalar tail). Between measured dimensions the cost is interpolated,
    // past them scaled with the dimension. Unset: the F16 GEMM rate.
    std::map<int64_t, double> attn_pos_s;
    std::optional<double> crossing_s, copy_gbps;
    bool empty() const;
};
// Default margin: 3% of the capacity but at least 64 MiB (allocator
// fragmentation, CUDA/cuBLAS workspaces the ledger does not see yet), and
// never more than 1/8 of the capacity so small what-if capacities and the
// stand-in device stay usable.
inline constexpr double kDefaultMarginFraction = 0.03;
inline constexpr uint64_t kDefaultMarginFloor = 64ull << 20;

// Decode rates within this fraction of the best count as a tie, which
// the prefill rate then breaks: the predictions are not that precise (the
// goal is 10% of measured), and a few percent of decode is not worth what
// (b) can cost in prefill (llama3-70b at 24 GiB: (b) predicted 2.4% faster
// decode than (a), with no weight streaming and 2.5 against ~40 tok/s of
// prefill).
inline constexpr double kDecodeTieFraction = 0.05;
// Two decode (or prefill) rates within kDecodeTieFraction of the larger.
inline bool rates_tie(double a, double b) { return std::abs(a - b) <= kDecodeTieFraction * std::max(a, b); }
// Beyond a tie, a decode lead still loses when its prefill is so slow that
// a reference request, llama-bench's default tests (a prompt of
// kReferencePrompt tokens, then kReferenceGen generated), takes more than
// kPrefillLossLimit times as long as on the rival (llama3-70b, 24 GiB,
// context 32768, q4_0 cache: (b) 16% faster decode than (a), prefill 2.3
// against 165 tok/s, 311 s against 106). A smaller prefill loss is what a
// chat is willing to pay for decode (mixtral-8x7b at 12 GiB: (c) 19%
// faster decode, prefill 8.5 against 10.6 tok/s, 83 s against 76).
inline constexpr double kReferencePrompt = 512, kReferenceGen = 128;
inline constexpr double kPrefillLossLimit = 1.5;

// The placements -ngl auto weighs.
//  (a) Layers: leading whole layers, as -ngl N.
//  (b) Ffn: the attention, norms and KV cache of every layer and the head
//      on the accelerator, then the FFN of as many layers as fit.
//  (c) Experts (mixtures of experts only): everything but the expert
//      tensors there, then the experts of as many layers as fit.
// In (b) and (c) the host keeps the FFN (experts) of the leading layers
// [0, host_layers), as llama.cpp's --n-cpu-moe does, and at least one
// layer's: with none they are an (a) placement.
enum class Candidate { Layers, Ffn, Experts };
inline constexpr Candidate kAllCandidates[] = {Candidate::Layers, Candidate::Ffn, Candidate::Experts};
std::string candidate_name(Candidate c);    // "layers", "ffn", "experts"
std::string candidate_letter(Candidate c);  // "(a)", "(b)", "(c)"

// The user's per-tensor rules (-ot, --cpu-moe, --n-cpu-moe, -nkvo). When
// any is given they decide on top of whole layers, and only (a) is weighed,
// sized with them.
struct PlacementRules {
    std::vector<TensorOverride> overrides;
    bool cpu_moe = false;
    int64_t n_cpu_moe = 0;
    bool kv_offload = true;
    bool any() const { return !overrides.empty() || cpu_moe || n_cpu_moe > 0 || !kv_offload; }
};

struct PlanInputs {
    std::optional<uint64_t> device_capacity;  // bytes the accelerator may use; nullopt: no accelerator
    std::optional<uint64_t> host_ram;         // bytes of host RAM; nullopt: not checked
    int64_t n_ctx = 0;                        // 0: the model's training context, capped at 4096 (as Session)
    int64_t n_ubatch = 512;
    // Sequences decoded side by side (serve -np, chat, bench --parallel):
    // a sliding-window layer keeps a window for each (Session's n_seq_max).
    int64_t n_seq = 1;
    model::CacheType cache_type = model::kCacheF16;
    std::optional<uint64_t> margin;  // nullopt: default_margin(capacity)
    std::optional<int64_t> ngl;      // evaluate this split instead of choosing one
    // What -ngl auto weighs. Whole layers unless asked: bench sweeps and
    // tune measure whole layers; run and plan ask for all.
    std::vector<Candidate> candidates{Candidate::Layers};
    PlacementRules rules;
    std::string device_name = "cuda0";  // the accelerator's name (several: a comma list), for -ot's device names
    // Several accelerators splitting the layers (llama.cpp's -sm layer):
    // each one's capacity, in device_name's order (device_capacity is then
    // unset), and their shares as given (-ts; empty: the planner chooses).
    std::vector<uint64_t> device_capacities;
    std::vector<double> tensor_split;
    // A pipeline stage (planner/hosts.h) that does not hold the token
    // embedding (not the first) or the output norm and head (not the last).
    bool stage_embeds = true;
    bool stage_outputs = true;
    int64_t first_layer = 0;  // the stage's first layer in the whole model: its tensors' names
    // Weight streaming for long prompts, as SessionOptions: wanted when an
    // accelerator exists and micro-batches reach stream_min_batch.
    bool weight_stream = true;
    int64_t stream_min_batch = 32;
    std::optional<double> cpu_gbps, gpu_gbps, pcie_gbps, cpu_gflops, gpu_gflops;
    // Kernel rates and fixed costs of the host and of the accelerator (on
    // the stand-in, the host's: the same kernels on the same cores).
    KernelCosts host_costs, device_costs;
};

// Bytes one device holds, by the ledger's categories.
struct DeviceBytes {
    uint64_t weights = 0;
    uint64_t kv = 0;
    uint64_t compute = 0;
    uint64_t staging = 0;
    uint64_t overhead = 0;
    uint64_t total() const { return weights + kv + compute + staging + overhead; }
};

struct Prediction {
    double tg_tps = 0.0;  // decode tokens per second at the average context (n_ctx / 2)
    double pp_tps = 0.0;  // prompt tokens per second (one full micro-batch from an empty cache)
};

// A run to predict in detail: n_prompt prompt tokens in micro-batches of
// n_ubatch (only the last position gets logits, as bench's ppN), then
// n_gen tokens one at a time, after n_depth tokens already in the cache.
struct Workload {
    int64_t n_prompt = 0;
    int64_t n_gen = 0;
    int64_t n_depth = 0;
};

// One assumed speed and whether it was the built-in default.
struct Assumption {
    std::string name;  // "cpu_gbps", ...
    double value = 0.0;
    bool is_default = true;
};

// One placement the planner weighed: how a session is told it, what each
// device holds and how fast it should run.
struct Option {
    Candidate candidate = Candidate::Layers;
    int64_t ngl = 0;          // as SessionOptions::n_gpu_layers: n_layer + 1 puts the head there too
    int64_t host_layers = 0;  // (b), (c): layers [0, host_layers) keep their FFN (experts) on the host
    bool output_on_gpu = false;
    bool vram_fits = true;        // the device total plus the margin is within the capacity
    bool ram_fits = true;         // the host total is within host_ram (true when not given)
    bool weight_stream = false;   // prompts of stream_min_batch+ tokens stream the CPU layers' weights
    uint64_t stream_bytes = 0;    // what that reserves on the accelerator (part of vram.compute)
    DeviceBytes vram, ram;
    Prediction predicted;
};

struct Plan {
    int64_t ngl = 0;  // as SessionOptions::n_gpu_layers: n_layer + 1 puts the head there too
    int64_t n_layer = 0;
    bool output_on_gpu = false;
    bool has_device = false;
    bool fits = true;       // vram_fits and ram_fits: the placement runs as planned
    bool vram_fits = true;  // the device total plus the margin is within the capacity
    bool ram_fits = true;   // the host total is within host_ram (true when not given)
    bool forced = false;    // ngl came from the inputs
    bool weight_stream = false;   // prompts of stream_min_batch+ tokens stream the CPU layers' weights
    uint64_t stream_bytes = 0;    // what that reserves on the accelerator (part of vram.compute)
    // The chosen placement beyond ngl: the candidate, the layers whose FFN
    // (experts) stay on the host, and the rules that tell the session so
    // (the user's rules when given), for SessionOptions beside ngl.
    Candidate candidate = Candidate::Layers;
    int64_t host_layers = 0;
    PlacementRules rules;
    bool user_rules = false;  // the rules came from the inputs
    // Every placement weighed, the chosen first, each the best of its
    // candidate; the runner-up is the best of another candidate.
    std::vector<Option> weighed;
    std::optional<Option> runner_up;
    std::optional<uint64_t> host_ram;
    int64_t stream_min_batch = 0;
    std::optional<uint64_t> capacity;
    uint64_t margin = 0;
    int64_t n_ctx = 0;
    int64_t n_ubatch = 0;
    model::CacheType cache_type = model::kCacheF16;
    model::KvRotation kv_rotation;  // what the cache type stores rotated (model::kv_rotation)
    DeviceBytes vram, ram;
    Prediction predicted;
    std::vector<Assumption> assumptions;
    std::vector<std::string> reasons;
    // Several accelerators: the shares of the layers (-ts, as
    // SessionOptions::tensor_split takes them) and, per device in order,
    // its name, capacity, margin and bytes (vram is then their sum).
    std::vector<double> tensor_split;
    struct DevicePart {
        std::string name;
        uint64_t capacity = 0, margin = 0;
        DeviceBytes vram;
        bool fits = true;
    };
    std::vector<DevicePart> devices;
};

// The -ot rule of (b): the FFN tensors (norms, router and experts
// included) of layers [0, host_layers) on the CPU.
// first_layer: a pipeline stage's first layer (its tensors keep the whole
// model's names), so the rule names those layers.
TensorOverride ffn_override(int64_t host_layers, int64_t first_layer = 0);
// The rules that make a candidate: (b) that -ot rule, (c) --n-cpu-moe
// host_layers, (a) none.
// For a stage whose first layer is not 0 (c) is an -ot rule over its
// layers' experts instead of --n-cpu-moe.
PlacementRules option_rules(const Option& o, int64_t first_layer = 0);

// How a session is told to place the plan's way, as command-line flags
// (-ngl, then the rules in Plan::rules): "-ngl 49 --n-cpu-moe 18".
std::string placement_flags(const Plan& p);

// Shares of the layers as -ts takes them, each over the smallest above 0:
// "2,1" for 24 and 12 GiB of room.
std::string tensor_split_text(const std::vector<double>& shares);

// The margin used when PlanInputs::margin is not given.
uint64_t default_margin(uint64_t capacity);

// Bytes per device for a given split, exactly as the Session reserves them
// (ngl is clamped to [0, n_layer + 1]; has_device says whether an
// accelerator exists at all, which decides whether it reserves scratch;
// weight_stream: the accelerator also holds the stream's slots whenever a
// layer is left on the host). Throws tandem::Error when the cache type does
// not fit the head size.
DeviceBytes device_bytes(const model::ModelSpec& spec, int64_t ngl, int64_t n_ctx, int64_t n_ubatch,
                         model::CacheType cache_type, bool weight_stream = false, int64_t n_seq = 1);
DeviceBytes host_bytes(const model::ModelSpec& spec, int64_t ngl, bool has_device, int64_t n_ctx, int64_t n_ubatch,
                       model::CacheType cache_type, int64_t n_seq = 1);

// Chooses (or, with inputs.ngl, evaluates) a placement: of the candidates
// weighed, the one with the best predicted decode rate among those whose
// host share fits host_ram (if any does), prefill breaking ties. No I/O, no
// globals. Throws tandem::Error for inputs no runtime could honour
// (negative sizes, layers asked of a missing accelerator, a cache type the
// heads do not fit, a -ot rule naming another device).
Plan plan(const model::ModelSpec& spec, const PlanInputs& inputs);

// Predicted seconds of a workload at the plan's placement (its candidate,
// ngl, host layers and rules), with the speeds and costs of `inputs` (the
// inputs the plan was made from). Throws tandem::Error for a negative
// count, or a workload longer than the plan's context.
double predict_seconds(const model::ModelSpec& spec, const PlanInputs& inputs, const Plan& plan, const Workload& w);

// The JSON form `tandem plan --json` prints: ngl, n_layer, output_on_gpu,
// fits (vram_fits and ram_fits), vram/ram {weights, kv, compute, staging,
// overhead, total}, predicted {tg_tps, pp_tps}, placement {candidate,
// flags, ranges of tensor classes per device}, runner_up, weighed,
// reasons, assumptions and the inputs that shaped it.
nlohmann::json to_json(const Plan& p);
// One weighed placement: candidate, ngl, host_layers, label, flags, ranges,
// fits, vram, ram, predicted.
nlohmann::json to_json(const Option& o, int64_t n_layer);

// Short and long names of a placement: "(c) exps 30/48" and "(c)
// everything but the experts on the accelerator, and the experts of layers
// [18, 48)".
std::string option_label(const Option& o, int64_t n_layer);
std::string option_text(const Option& o, int64_t n_layer);

using model::cache_type_name;

}  // namespace tandem::planner
