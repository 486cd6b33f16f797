// What a session will be, decided before anything loads, from the model's
// metadata, the options and the free RAM alone: the options made whole
// (context, micro-batch), where every tensor and cache goes, whether the
// accelerator holds anything, which layers may stream to it, and whether
// the host copies its matrices out of the mapping. A pure function, so it
// is testable on a header-only file (tests/test_session_plan.cpp); the
// session then builds what it says.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "runtime/engine/session.h"
#include "runtime/model/model_spec.h"
#include "runtime/placement/placement.h"

namespace tandem {

struct SessionPlan {
    SessionOptions opt;         // n_ctx (0: the model's, at most 4096) and n_ubatch (at most n_ctx) resolved
    Placement placement;
    int64_t n_device_layers = 0;  // the leading layers -ngl gives the accelerator
    bool accel_holds = false;     // the accelerator holds a tensor, a cache or the head
    // Layers [stream_first, n_layer) have every streamed matrix on the host:
    // they may stream to the accelerator for long prompt micro-batches.
    int64_t stream_first = 0;
    bool wants_stream = false;    // streaming is asked for and has layers and batches to take
    uint64_t host_matrix_bytes = 0;  // the host's matrices (what a copy takes)
    bool copy_host_weights = false;  // copy them into huge pages
    std::string host_copy_note;      // why not, where the options asked for it
};

// `mapped`: the file is mapped and not locked (only then is a copy worth
// anything); free_ram: what the host has free (nullopt: unknown). Throws
// tandem::Error for options that cannot be honoured: sizes, sequences, a
// cache type the head size does not fit, a device name, a rule that cannot
// be placed.
SessionPlan plan_session(const model::ModelSpec& spec, const SessionOptions& options, bool mapped,
                         std::optional<uint64_t> free_ram);

}  // namespace tandem
