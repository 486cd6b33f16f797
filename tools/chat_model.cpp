#include "tools/chat_model.h"

#include <filesystem>

#include <fmt/format.h>

#include "runtime/serving/scheduler.h"
#include "runtime/common/error.h"
#include "tools/field_flags.h"
#include "tools/session_open.h"
#include "tools/stream_flags.h"
#include "tools/text_input.h"

namespace tandem::tools {

void add_chat_model_flags(CLI::App& cmd, ChatModelFlags& f) {
    cmd.add_option("-m,--model", f.model, "GGUF model file")->required();
    cmd.add_option("-c,--ctx-size", f.n_ctx,
                   "context size, shared by the slots (0: the model's, at most 4096 per slot)")
        ->capture_default_str();
    cmd.add_option("-t,--threads", f.n_threads, "threads (0: physical cores)")->capture_default_str();
    cmd.add_option("--ubatch-size", f.n_ubatch, "tokens per micro-batch (-ub); also the tokens one step evaluates")
        ->capture_default_str();
    cmd.add_option("-b,--batch-size", f.n_batch, "logical batch size (accepted; the micro-batch decides)");
    cmd.add_flag("--no-mmap", f.no_mmap, "read the model into memory instead of mapping it");
    cmd.add_flag("--mlock", f.mlock, "lock the model in RAM");
    cmd.add_flag("--check-tensors", f.check_tensors, "check every row of every weight for NaN and Inf at load");
    cmd.add_option("--chat-template", f.chat_template,
                   "the chat template: chatml, or a file of Jinja text (default: the model's tokenizer.chat_template, "
                   "else ChatML)");
    add_cache_type_flags(cmd, f.cache);
    add_device_flags(cmd, f);
    add_stream_flags(cmd, f.stream);
    add_placement_flags(cmd, f.placement);
}

namespace {

void choose_template(const ChatModelFlags& f, ChatModel& m) {
    if (f.chat_template == "chatml") {
        m.chat_template = chat::ChatTemplate::chatml();
        m.template_origin = "ChatML (--chat-template chatml)";
        return;
    }
    if (!f.chat_template.empty()) {
        if (!std::filesystem::is_regular_file(f.chat_template)) {
            throw Error(fmt::format("--chat-template: expected chatml or a file of Jinja text, found '{}' (no such file)",
                                    f.chat_template));
        }
        m.chat_template = chat::ChatTemplate::parse(read_text_input(f.chat_template, "chat template"));
        m.template_origin = fmt::format("--chat-template {}", f.chat_template);
        return;
    }
    bool fallback = false;
    m.chat_template = chat::template_from_gguf(m.file, &fallback);
    m.template_origin = fallback ? "ChatML (the model file has no tokenizer.chat_template)" : "the model file's";
}

std::string special_text(const Tokenizer& t, int32_t id) {
    return id >= 0 && id < t.n_vocab() ? std::string(t.token_text(id)) : std::string();
}

}  // namespace

std::unique_ptr<ChatModel> open_chat_model(const ChatModelFlags& f, int64_t n_seq,
                                           const std::function<void(SplitRequest&)>& adjust) {
    serving::LoadRequest req;
    req.model_path = f.model;
    req.mmap = !f.no_mmap;
    req.mlock = f.mlock;
    req.split = split_request(f, f.n_ctx, f.n_ubatch);
    req.split.n_seq = n_seq;
    req.cache_per_sequence = true;  // a slot's logits do not depend on the others'
    req.n_threads = f.n_threads;
    req.check_every_row = f.check_tensors;
    if (adjust) adjust(req.split);
    auto m = std::make_unique<ChatModel>(req);
    choose_template(f, *m);
    m->bos_text = special_text(m->tokenizer, m->tokenizer.bos());
    m->eos_text = special_text(m->tokenizer, m->tokenizer.eos());
    for (const std::string& marker : m->chat_template.end_of_turn_markers()) {
        m->end_of_turn_text.push_back(marker);
        const int32_t id = m->tokenizer.find_token(marker);
        if (id >= 0) m->end_of_turn_tokens.push_back(id);
    }
    m->open_session(req, warn_on_stderr, progress_bars());
    m->split_why = in_flags(m->split_why);
    m->draft_why = in_flags(m->draft_why);
    return m;
}

}  // namespace tandem::tools
