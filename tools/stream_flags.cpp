#include "tools/stream_flags.h"

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

void apply_stream_flags(const StreamFlags& flags, SessionOptions& so) {
    so.weight_stream = !flags.no_stream;
    so.stream_min_batch = flags.min_batch;
    so.copy_host_weights = !flags.no_host_copy;
}

void apply_stream_flags(const StreamFlags& flags, planner::PlanInputs& in) {
    in.weight_stream = !flags.no_stream;
    in.stream_min_batch = flags.min_batch;
}

}  // namespace tandem::tools
