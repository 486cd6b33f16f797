// --pipeline: `mpirun -np N tandem run|serve|bench|perplexity ... --pipeline`
// runs the model as N pipeline stages, one per rank, each holding a
// contiguous range of layers (runtime/engine/stage_link.h's equal shares).
// Rank 0 runs the command: it reads the prompt, embeds, runs its layers,
// and writes every output (text, --dump-logits, the server's port); the
// other ranks run nothing but their stage, driven by rank 0's messages
// (MPI point-to-point, over whatever transport mpirun chose: shared
// memory, TCP, InfiniBand). Tandem opens no port of its own for it.
//
// Messages, in MPI_COMM_WORLD: rank 0 sends each stage the open request
// (JSON: the model path and the session options) and takes its answer;
// a micro-batch (header, tokens, hidden state) and the cache commands
// (remove, copy, reset) go from each rank to the next in order; the last
// rank sends each micro-batch's logits to rank 0; rank 0 ends every stage
// with a stop message when it is done. A stage that fails prints one line
// naming its rank and why and aborts the job (mpirun then ends every rank).
//
// Placement: each rank applies rank 0's flags to its own layers (an -ngl
// count over the whole model's layer numbers), with its host's
// TANDEM_PIPELINE_DEVICE / TANDEM_PIPELINE_VRAM in place of --device /
// --vram where given (mpirun -x). Under -ngl auto each rank plans its own
// layers alone on its own devices (serving::resolve_split with a stage)
// and answers the open with its choice, which rank 0 prints under --verbose
// (StageLink::placement_notes).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/engine/stage_link.h"

namespace tandem {
class Session;
}

namespace tandem::tools {

// --pipeline appears among the arguments.
bool wants_pipeline(const std::vector<std::string>& args);

// The MPI world of this process while it lives. Throws tandem::Error when
// the build has no MPI, or the job has a single rank.
class PipelineWorld {
public:
    PipelineWorld(int& argc, char**& argv);
    ~PipelineWorld();  // rank 0: stops every stage; then MPI_Finalize
    PipelineWorld(const PipelineWorld&) = delete;
    PipelineWorld& operator=(const PipelineWorld&) = delete;
    int rank() const { return rank_; }
    int size() const { return size_; }
    // Ranks above 0: serves this rank's stage until rank 0 stops it;
    // returns the exit status.
    int serve_stage();

private:
    int rank_ = 0, size_ = 1;
    std::shared_ptr<StageLink> link_;  // rank 0's
};

// Rank 0's link to the other stages while a PipelineWorld lives (the one
// process-wide thing here, as MPI's own state is); nullptr otherwise.
std::shared_ptr<StageLink> pipeline_link();

// Where a stage's session put its layers [first, end) (their -ngl device)
// and, on the last stage, the head: "blk 2 cpu2, blk 3 cpu2, head cpu2".
std::string stage_holds(const Session& session, std::pair<int64_t, int64_t> layers, bool last);

}  // namespace tandem::tools
