#include "runtime/serving/loader.h"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "runtime/common/error.h"
#include "runtime/serving/scheduler.h"

namespace tandem::serving {
namespace {

gguf::File open_file(const LoadRequest& r) {
    r.validate();
    gguf::OpenOptions open;
    open.mode = r.mmap ? gguf::LoadMode::Mmap : gguf::LoadMode::ReadIntoMemory;
    open.mlock = r.mlock;
    return gguf::File::open(r.model_path, open);
}

}  // namespace

void LoadRequest::validate() const {
    if (!std::filesystem::is_regular_file(model_path)) {
        throw FieldError("model_path", fmt::format("{{model_path}} {}: expected a GGUF model file, found {}", model_path,
                                                   std::filesystem::exists(model_path) ? "something else"
                                                                                       : "nothing there"));
    }
    serve::check_slot_count(split.n_seq);
    if (split.n_ctx < 0) throw FieldError("n_ctx", fmt::format("{{n_ctx}}: expected 0 or more positions, found {}", split.n_ctx));
    if (split.n_ubatch < 1) {
        throw FieldError("n_ubatch", fmt::format("{{n_ubatch}}: expected 1 or more tokens, found {}", split.n_ubatch));
    }
}

LoadedModel::LoadedModel(const LoadRequest& r)
    : file(open_file(r)), spec(model::load_model_spec(file)), tokenizer(Tokenizer::from_gguf(file)) {}

void LoadedModel::open_session(const LoadRequest& r, const Warn& warn, const ProgressFactory& progress) {
    SplitRequest req = r.split;
    if (req.n_ctx == 0) {
        const int64_t train = spec.hp.n_ctx_train > 0 ? spec.hp.n_ctx_train : 4096;
        req.n_ctx = std::min<int64_t>(train, 4096) * req.n_seq;
    }
    Split split = resolve_split(req, file, spec, warn);
    SessionOptions& so = split.so;
    so.n_threads = r.n_threads;
    if (r.n_threads == 0 && split.threads) so.n_threads = *split.threads;  // a thread count given wins
    so.n_seq_max = req.n_seq;
    so.kv_per_sequence = r.cache_per_sequence || req.n_seq > 1;
    split_why = split.why;
    draft_placement = split.draft;
    draft_why = split.draft_why;
    session = serving::open_session(file, spec, so, warn, progress, r.check_every_row);
    session_options = so;
    // Under a pipeline with -ngl auto, each later stage's own plan, a line each.
    if (so.next_stages) {
        for (const std::string& note : so.next_stages->placement_notes()) split_why += "\n" + note;
    }
}

std::unique_ptr<LoadedModel> load_model(const LoadRequest& request, const Warn& warn, const ProgressFactory& progress) {
    auto m = std::make_unique<LoadedModel>(request);
    m->open_session(request, warn, progress);
    return m;
}

}  // namespace tandem::serving
