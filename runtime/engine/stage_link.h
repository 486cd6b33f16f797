// A pipeline of stages (tandem ... --pipeline under mpirun): each stage, a
// process, holds a contiguous range of layers; the first also embeds the
// tokens, the last also runs the output head. The first stage's Session
// talks to the others through a StageLink; the transport is not the
// engine's (tools/pipeline.cpp carries it over MPI point-to-point
// messages). Everything that changes which positions the caches hold goes
// down the pipeline in the order it happens, so every stage's cells stay
// the first stage's.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace tandem {

namespace gguf {
class File;
}
struct BatchToken;
struct SessionOptions;

// -ngl auto under a pipeline: the placement flags as the user gave them,
// from which each later stage plans its own layers on its own devices
// (tools/pipeline.cpp), as the first stage planned its own.
struct StageAutoPlacement {
    std::string device;
    std::vector<uint64_t> capacity;  // as given; empty: each GPU's free memory on its own host
    std::vector<double> tensor_split;
    std::vector<std::string> overrides;  // -ot's values as given, each "REGEX=DEVICE[,...]"
    bool cpu_moe = false;
    int64_t n_cpu_moe = 0;
};

class StageLink {
public:
    virtual ~StageLink() = default;
    // Opens the other stages on the model `file` (each stage opens its own
    // copy: at the same path, or where its host says, if its size and data
    // offset are the same) with the first stage's options (context,
    // micro-batch, sequences, cache type, threads, placement flags);
    // returns the first stage's layers [0, end). Throws tandem::Error with
    // the failing stage's reason.
    virtual int64_t open(const gguf::File& file, int64_t n_layer, const SessionOptions& options) = 0;
    // Stages in the pipeline, this one included (stage_layers' n_ranks).
    virtual int n_stages() const = 0;
    // The micro-batch `tokens`, evaluated by this stage up to the hidden
    // state `x` (tokens.size() rows of n_embd floats), goes to the next
    // stage. single_order: the one-token order (Session::eval_batch_single_order).
    virtual void send_batch(std::span<const BatchToken> tokens, bool single_order, std::span<const float> x) = 0;
    // The logits the last stage computed for the tokens of the oldest
    // micro-batch sent and not yet answered that asked for them
    // (out.size() / n_vocab of them, in batch order; none: not called).
    virtual void receive_logits(std::span<float> out) = 0;
    virtual void remove_positions(int32_t seq, int32_t p0, int32_t p1) = 0;
    virtual void copy_sequence(int32_t src, int32_t dst, int32_t p0, int32_t p1) = 0;
    virtual void reset() = 0;
    // Each later stage's Session::save_sequence(seq) in stage order: a
    // blob whose layers hold rows only where that stage holds the layer.
    virtual std::vector<std::vector<uint8_t>> save_sequence(int32_t seq) = 0;
    // A state the first stage checked and placed goes to every later stage,
    // which places its cells and writes its own layers' rows.
    virtual void restore_sequence(int32_t seq, std::span<const uint8_t> blob) = 0;
    // After open under -ngl auto: each later stage's line on how it placed
    // its layers, in stage order (fields named {field}); otherwise none.
    virtual std::vector<std::string> placement_notes() const { return {}; }
};

// Layers [first, end) of n_layer for stage `rank` of `n_ranks`: equal
// shares of whole layers, the earlier stages taking the remainder.
inline std::pair<int64_t, int64_t> stage_layers(int64_t n_layer, int rank, int n_ranks) {
    const auto share = [&](int r) { return n_layer * r / n_ranks; };
    return {share(rank), share(rank + 1)};
}

}  // namespace tandem
