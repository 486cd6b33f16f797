// Planning pipeline stages over hosts (tandem plan --hosts FILE, for
// `mpirun ... --pipeline`): each host, a rank, holds a contiguous range of
// layers (the first also the embedding, the last the head) and places
// them on its own devices and RAM as the one-host planner does. A token's
// decode runs the stages one after the other, so its time is the stages'
// times plus each hop's: the hidden state from host to host (latency +
// n_embd floats over the link) and the logits back to the first
// (latency + n_vocab floats). A long prompt's micro-batches are in several
// stages at once, so prefill runs at the slowest stage's (or hop's) rate.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/planner.h"

namespace tandem::planner {

struct Host {
    std::string name;
    uint64_t ram = 0;
    std::vector<uint64_t> vram;  // one per GPU; none: a host without one
};

struct Link {
    double bytes_per_s = 0;
    double latency_s = 0;
};

struct HostStage {
    std::string host;
    int64_t first = 0, end = 0;  // layers [first, end)
    Plan plan;                   // the host's placement of them
    double decode_s = 0;         // per token, its layers alone
    double batch_s = 0;          // per prompt micro-batch, its layers alone
};

struct HostsPlan {
    std::vector<HostStage> stages;
    std::string split_rule;  // how the layers were shared
    double tg_tps = 0, pp_tps = 0;
    double link_s = 0;       // a token's time on the links
    double link_share = 0;   // of a token's time
    bool fits = true;
    std::vector<std::string> reasons;
};

// The layers [first, end) of `spec` as a model of their own (a stage's).
model::ModelSpec stage_spec(const model::ModelSpec& spec, int64_t first, int64_t end);

// Weighs shares of the layers (by each host's VRAM, by its VRAM and RAM,
// equal) and keeps the fastest decode among those whose every stage fits.
// `base` gives the context, micro-batch, cache type, speeds and rules.
// Throws tandem::Error for no host, more hosts than layers, or a link
// without bandwidth.
HostsPlan plan_hosts(const model::ModelSpec& spec, const std::vector<Host>& hosts, const Link& link,
                     const PlanInputs& base);

nlohmann::json to_json(const HostsPlan& p);

}  // namespace tandem::planner
