// Loading a model for a front-end (run, chat, serve, the C API): the file,
// its model spec and tokenizer, then a session placed as the request says
// (runtime/serving/split.h) and opened with the out-of-memory step-down
// (open_session.h). Two steps, so that a front-end can check its prompt
// against the tokenizer before any weight is read. The request holds no
// flags: validate() names its fields, and warnings go to a callback.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "runtime/engine/session.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/model/model_spec.h"
#include "runtime/serving/open_session.h"
#include "runtime/serving/split.h"
#include "runtime/tokenizer/tokenizer.h"

namespace tandem::serving {

struct LoadRequest {
    std::string model_path;
    bool mmap = true;    // false: read the file into memory
    bool mlock = false;  // pin the weights in RAM
    // Where it runs. split.n_ctx 0: the model's training context (4096
    // where it names none), at most 4096, for each of split.n_seq
    // sequences.
    SplitRequest split;
    // Each sequence its own part of the cache, so that its logits do not
    // depend on the others' (the scheduler's slots need it; always so with
    // more than one sequence).
    bool cache_per_sequence = false;
    int n_threads = 0;  // 0 (or -1): the tune entry's, else the physical cores; the pool checks the range
    bool check_every_row = false;  // NaN/Inf check of every weight row, not the first and last

    // Throws FieldError: {model_path} not a file, {n_slots} (split.n_seq)
    // out of range, {n_ctx} below 0, {n_ubatch} below 1.
    void validate() const;
};

struct LoadedModel {
    // Opens the file (after validate()), reads its model spec and
    // tokenizer; no session yet. Throws tandem::Error for a bad file.
    explicit LoadedModel(const LoadRequest& request);
    LoadedModel(const LoadedModel&) = delete;
    LoadedModel& operator=(const LoadedModel&) = delete;
    virtual ~LoadedModel() = default;

    // Places the model and opens its session (request as given to the
    // constructor, or with changes such as a draft's placement).
    void open_session(const LoadRequest& request, const Warn& warn, const ProgressFactory& progress = {});

    gguf::File file;
    model::ModelSpec spec;  // points into file
    Tokenizer tokenizer;
    std::unique_ptr<Session> session;  // after open_session
    SessionOptions session_options;    // what it was opened with (the layer count as finally loaded)
    std::string split_why;             // why it is placed so, naming fields
    std::optional<SessionOptions> draft_placement;  // with split.draft: where the draft goes
    std::string draft_why;
};

// Both steps.
std::unique_ptr<LoadedModel> load_model(const LoadRequest& request, const Warn& warn,
                                        const ProgressFactory& progress = {});

}  // namespace tandem::serving
