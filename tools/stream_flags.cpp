#include "tools/stream_flags.h"

#include "tools/llama_flags.h"

namespace tandem::tools {

void add_stream_flags(CLI::App& cmd, StreamFlags& flags) {
    cmd.add_option("--stream-min-batch", flags.min_batch,
                   "prompt micro-batches of at least N tokens multiply the CPU layers' weights on the accelerator, "
                   "streamed there one matrix at a time")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
    cmd.add_flag("--no-stream", flags.no_stream,
                 "never stream weights to the accelerator (its slots' memory goes to layers instead)");
    cmd.add_flag("--no-host-copy", flags.no_host_copy,
                 "multiply the CPU layers' weights straight from the mapped file instead of a copy in huge pages "
                 "(saves that RAM; decode reads the mapping more slowly)");
}

void add_placement_flags(CLI::App& cmd, PlacementFlags& flags) {
    cmd.add_option("--override-tensor", flags.overrides,
                   "-ot REGEX=DEVICE[,...]: tensors whose name matches REGEX go to DEVICE (cpu, or the --device), "
                   "whatever -ngl says, e.g. -ot \"blk\\.[0-9]+\\.ffn_.*=cpu\"; the first matching rule wins")
        ->allow_extra_args(false);
    cmd.add_flag("--cpu-moe", flags.cpu_moe, "keep every MoE expert tensor on the CPU");
    cmd.add_option("--n-cpu-moe", flags.n_cpu_moe, "keep the MoE expert tensors of the first N layers on the CPU")
        ->check(CLI::NonNegativeNumber);
    // llama-cli's -nkvo is a flag, llama-bench's takes 0 or 1: both forms.
    cmd.add_option_function<std::string>(
           "--no-kv-offload",
           [&flags](const std::string& v) { flags.no_kv_offload = parse_switch("-nkvo", v); },
           "-nkvo [0|1]: every layer's KV cache (and its attention) on the CPU, whatever -ngl says")
        ->expected(0, 1)
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)
        ->type_name("[0|1]");
}

serving::StreamOptions stream_options(const StreamFlags& f) {
    serving::StreamOptions s;
    s.weight_stream = !f.no_stream;
    s.min_batch = f.min_batch;
    s.copy_host_weights = !f.no_host_copy;
    return s;
}

serving::PlacementOptions placement_options(const PlacementFlags& f) {
    serving::PlacementOptions p;
    p.overrides = f.overrides;
    p.cpu_moe = f.cpu_moe;
    p.n_cpu_moe = f.n_cpu_moe;
    p.kv_offload = !f.no_kv_offload;
    return p;
}

}  // namespace tandem::tools
