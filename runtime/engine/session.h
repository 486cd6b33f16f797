// A loaded model ready to evaluate tokens: weights bound to the mapped file,
// a KV cache per layer, scratch buffers sized for one micro-batch, and the
// step loop (embed, every layer, output head). Prompts are evaluated in
// micro-batches of up to n_ubatch tokens; generation one token at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <span>
#include <vector>

#include "kernels_cpu/matmul.h"
#include "runtime/engine/activation_observer.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/common/memory_ledger.h"
#include "runtime/model/model_spec.h"
#include "runtime/engine/stage_link.h"
#include "runtime/placement/placement.h"

namespace tandem {

struct SessionOptions {
    int64_t n_ctx = 0;        // 0: the model's training context, capped at 4096
    int64_t n_ubatch = 512;   // tokens per micro-batch
    // Sequences decoded side by side (llama.cpp's -np/--parallel): sizes the
    // sliding-window layers' rings, one window per sequence.
    int64_t n_seq_max = 1;
    // Each of the n_seq_max sequences gets its own n_cells / n_seq_max cells
    // of every layer's cache (llama.cpp's non-unified KV cache, what its
    // server uses with several slots), instead of one pool they all draw
    // on. A sequence's cells then depend on its own history only, so its
    // logits are the same bits whatever else shares a batch with it; ids
    // from n_seq_max on cannot store positions.
    bool kv_per_sequence = false;
    int n_threads = 0;        // 0: physical cores
    model::CacheType cache_type = model::kCacheF16;
    bool simd_from_env = true;  // TANDEM_CPU overrides the detected level
    std::optional<cpu::SimdLevel> simd_level;  // set: this level, whatever the environment says
    // The accelerators: "" for none, a name or a comma list of names
    // ("cuda0", "cuda0,cuda1"; "cpu2", "cpu2,cpu3" for stand-in devices:
    // second CPU backends that own their memory, with a capacity, so the
    // split, the hand-overs and the accounting run for real without a GPU).
    // runtime/engine/device_registry.h parses it.
    std::string device;
    // Bytes each accelerator may use, in the order of `device`; a single
    // value applies to each; empty: unlimited (a stand-in) or the GPU's
    // free memory.
    std::vector<uint64_t> device_capacity;
    // Leading layers on the accelerators; more than n_layer also puts the
    // output norm and head there. Ignored without a device.
    int64_t n_gpu_layers = 0;
    // The layer n_gpu_layers counts from (PlacementRequest::first_layer):
    // 0, or a pipeline stage's first layer where it planned its own layers.
    int64_t n_gpu_layers_from = 0;
    // Several accelerators share those layers in these proportions
    // (llama.cpp's -ts with -sm layer; placement.h's layer_device); empty:
    // equal shares.
    std::vector<double> tensor_split;
    // Per-tensor placement on top of n_gpu_layers (runtime/placement):
    // -ot rules, the experts on the host, every K/V cache on the host.
    std::vector<TensorOverride> overrides;
    bool cpu_moe = false;
    int64_t n_cpu_moe = 0;
    bool kv_offload = true;
    // Weight streaming: micro-batches of at least stream_min_batch tokens
    // multiply the CPU-resident layers' matrices on the accelerator, copied
    // there one matrix at a time (runtime/engine/weight_stream.h). Costs
    // the accelerator model::stream_bytes; dropped, with a note, when that
    // does not fit.
    bool weight_stream = true;
    int64_t stream_min_batch = 32;
    // The CPU's weight matrices are copied out of the file mapping into
    // memory the session owns (2 MiB pages where the kernel gives them),
    // which decode streams faster than page-cache pages
    // (runtime/engine/host_weight_arena.h). Costs their size in RAM on top
    // of the (reclaimable) page cache; false multiplies from the mapping.
    // Not done for a file read into memory or locked in RAM, nor when the
    // copy would take more than 90% of the RAM the system reports free.
    bool copy_host_weights = true;
    // Prompt batches of F32/F16/BF16 weights on the CPU go through OpenBLAS
    // where the build links it (faster; within float rounding of llama.cpp's
    // CPU backend, kernels_cpu/blas_matmul.h). false: Tandem's own kernels
    // at every batch size, the same bits as llama.cpp's CPU backend.
    bool cpu_blas = true;
    // Called while the CPU's weights are copied out of the mapping at load
    // (copy_host_weights), with the bytes copied so far and the total.
    std::function<void(uint64_t done, uint64_t total)> host_copy_progress;
    // Called while weights are copied to the accelerator at load, with the
    // bytes copied so far and the total (a progress bar's feed).
    std::function<void(uint64_t done, uint64_t total)> upload_progress;
    // A pipeline (runtime/engine/stage_link.h). The first stage: the link
    // to the others, which says this stage's layers. A later stage (a
    // worker, driven by Session::eval_stage): its layers [stage_first,
    // stage_end). Unset: every layer here.
    std::shared_ptr<StageLink> next_stages;
    int64_t stage_first = 0;
    int64_t stage_end = -1;  // -1: n_layer
    // The first stage under -ngl auto: what the later stages plan their own
    // layers from (the placement fields above are the first stage's plan).
    // Unset: every stage applies the placement fields above as they are.
    std::optional<StageAutoPlacement> stage_auto;
};

// Sequence ids a session's caches can tell apart.
inline constexpr int32_t kMaxSequences = 64;

// One token of a batch that may mix sequences (Session::eval_batch).
struct BatchToken {
    int32_t id = 0;
    int32_t pos = 0;   // its position in its sequence
    int32_t seq = 0;   // sequence id, 0..63
    bool logits = false;  // return its logits
};

class Session {
public:
    // The file and spec must outlive the session. Throws tandem::Error for a
    // header-only file or options the model cannot honour.
    Session(const gguf::File& file, const model::ModelSpec& spec, const SessionOptions& options);
    ~Session();
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;

    // Evaluates `tokens` at positions n_past() .. n_past() + size - 1 and
    // appends them to the cache. `logits` receives n_vocab floats per token
    // when all_logits, else those of the last token only. Throws
    // tandem::Error if the context would overflow or an id is out of range.
    void eval(std::span<const int32_t> tokens, bool all_logits, std::vector<float>& logits);

    // Evaluates a batch whose tokens may belong to several sequences; each
    // attends only to its own sequence's cells. `logits` receives n_vocab
    // floats for each token with logits set, in batch order. Throws
    // tandem::Error for an id out of range, a sequence outside 0..63 or a
    // full cache. eval() is this for sequence 0 at positions n_past()...
    void eval_batch(std::span<const BatchToken> batch, std::vector<float>& logits);
    // The same, every token getting on the CPU the bits a batch of that one
    // token gets (no batch kernels, panels or BLAS, whose sums run in other
    // orders): a speculative step's verification batch then gives exactly
    // the logits of decoding its tokens one by one. Slower for long batches.
    void eval_batch_single_order(std::span<const BatchToken> batch, std::vector<float>& logits);
    // Evaluation in flight, for keeping every stage of a --pipeline busy.
    // submit() starts a batch and returns once this stage has evaluated
    // its micro-batches and sent them on (without a pipeline: once the
    // whole batch is evaluated); collect() waits for the rows of the
    // oldest batch submitted and not collected. With up to
    // pipeline_stages() batches in flight, each stage works on one of them
    // while the others work on the rest. A batch gets the bits eval_batch
    // gives it (single_order: eval_batch_single_order's; hidden:
    // eval_batch_hidden's rows). Sequences may change between the calls
    // (remove_positions, copy_sequence, saving and restoring, in the order
    // made), but not those of a batch in flight. A submit that throws
    // leaves nothing of its batch in flight (the earlier ones stay
    // collectable); the eval_* calls throw while any batch is in flight.
    void submit(std::span<const BatchToken> batch, bool single_order, bool hidden = false);
    void collect(std::vector<float>& rows);
    size_t in_flight() const;
    int pipeline_stages() const;  // 1 without --pipeline
    // eval_batch, but each token with `logits` set gets the model's final
    // hidden state instead: n_embd floats, after the output norm, the
    // vector the head would multiply (llama.cpp's embeddings before
    // pooling). The head is not run. Throws tandem::Error as eval_batch,
    // and with --pipeline (the last stage sends back logits only).
    void eval_batch_hidden(std::span<const BatchToken> batch, std::vector<float>& hidden);
    // A later stage of a pipeline: the micro-batch `tokens` (at most
    // n_ubatch) enters with hidden state x (tokens.size() rows of n_embd)
    // and goes through this stage's layers; `out` gets the logits of the
    // tokens that ask for them when this stage runs the head, else the
    // hidden state's rows. Throws tandem::Error for a batch it cannot take.
    void eval_stage(std::span<const BatchToken> tokens, bool single_order, std::span<const float> x,
                    std::vector<float>& out);
    // This stage's layers [first, end), and whether it runs the head.
    std::pair<int64_t, int64_t> stage_layers() const;
    bool runs_head() const;
    // Forgets sequence seq's positions [p0, p1) (p1 < 0: to the end; seq <
    // 0: every sequence), e.g. rejected draft tokens.
    void remove_positions(int32_t seq, int32_t p0, int32_t p1);
    // Sequence dst shares src's cache cells of positions [p0, p1) (p1 < 0:
    // to the end) without copying them: a shared prompt prefix.
    void copy_sequence(int32_t src, int32_t dst, int32_t p0, int32_t p1);
    // The largest position sequence seq holds, -1 when it holds none.
    int32_t seq_pos_max(int32_t seq) const;
    // The largest m <= n such that every layer still holds the positions
    // of seq a query at m attends to: [0, m) in a global layer, [m -
    // window, m) in a sliding-window layer, read from the cells themselves
    // (so exact for a restored ring, whatever session saved it). Keeping
    // [0, m), removing the rest and evaluating on from m is then exact.
    int32_t held_prefix(int32_t seq, int32_t n) const;

    // The cache rows of sequence seq (every layer, K and V as stored: F16
    // or Q8_0 blocks) with their positions, and the token ids the caller
    // says they hold, as a self-describing blob (runtime/engine/
    // sequence_state.h has the format). Throws tandem::Error for a sequence
    // outside 0..63 or a token id outside the vocabulary. Under --pipeline
    // the first stage gathers the other stages' layers: the same blob.
    std::vector<uint8_t> save_sequence(int32_t seq, std::span<const int32_t> tokens) const;
    // Replaces sequence seq's cells with a blob from save_sequence and
    // returns the tokens stored with it. A sliding-window layer gets the
    // newest of the saved positions its ring keeps. Throws tandem::Error
    // (expected vs found) when the blob is malformed, truncated or
    // corrupted, was made by another model (architecture, vocabulary,
    // tensor names/types/shapes, a sample of the weights) or cache layout
    // (layer count, cache type, row sizes), holds a position past this
    // context, or does not fit the cells free: the sequence is then left
    // unchanged. (Should a device copy fail half-way, the sequence is left
    // empty, never half-restored.)
    std::vector<int32_t> restore_sequence(int32_t seq, std::span<const uint8_t> blob);

    // From now on, every product of a layer's weight shows its input to
    // `observer` first (activation_observer.h), until set to null. The
    // observer must outlive its use.
    void set_activation_observer(ActivationObserver* observer);

    void reset();
    int64_t n_past() const;
    int64_t n_ctx() const;
    int64_t n_ubatch() const;  // tokens per micro-batch (at most n_ctx)
    int64_t n_vocab() const;
    int64_t n_embd() const;
    int n_threads() const;
    cpu::SimdLevel simd_level() const;
    // Bytes of weights a single-token step reads (every layer, the head, one
    // embedding row; of expert tensors the used experts' share): the
    // numerator of decode GB/s.
    uint64_t weight_bytes_per_token() const;
    uint64_t kv_cache_bytes() const;
    // Layers [0, n_device_layers()) run on the accelerator (before -ot).
    int64_t n_device_layers() const;
    // Where every tensor and cache lives, and a compact description of it
    // (runs of layers) for --verbose.
    const Placement& placement() const;
    std::string placement_summary() const;
    // Activation bytes moved between devices so far, and the moves.
    uint64_t activation_bytes_moved() const;
    int64_t activation_crossings() const;
    bool output_on_device() const;
    // Name of the device holding layer il's weights and KV cache.
    const std::string& layer_device(int64_t il) const;
    // Name of the device holding the output head ("cpu" for the host).
    const std::string& output_device() const;
    // Whether micro-batches of stream_min_batch or more tokens stream the
    // CPU layers' weights to the accelerator, and if not, why (empty when
    // streaming was not asked for or nothing could stream).
    bool weight_stream_active() const;
    const std::string& weight_stream_note() const;
    // Whether the CPU's weight matrices were copied out of the mapping
    // (SessionOptions::copy_host_weights), and if asked for but not done,
    // why (too little free RAM).
    bool host_weights_copied() const;
    const std::string& host_copy_note() const;
    // Micro-batches evaluated with streaming so far.
    int64_t streamed_batches() const;
    // The memory ledgers: host first, then each accelerator opened, in order.
    std::vector<const MemoryLedger*> ledgers() const;
    // Accelerator d's Device::host_waits (nullopt: none, or it cannot
    // count them).
    std::optional<uint64_t> accelerator_host_waits(int d = kAccelDevice) const;
    // Accelerator d's Device::peak_bytes (nullopt: none, or it cannot
    // tell).
    std::optional<uint64_t> accelerator_peak_bytes(int d = kAccelDevice) const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace tandem
