// The model as `serve` and `chat` open it: the file, tokenizer, chat
// template (the file's, --chat-template's, or ChatML), and a session with a
// sequence per slot, placed by the same split flags as `run`.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "runtime/chat/chat_template.h"
#include "runtime/engine/session.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/model/model_spec.h"
#include "runtime/serving/loader.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tools/split.h"

namespace tandem::tools {

struct ChatModelFlags : SplitFlags {
    std::string model;
    int64_t n_ctx = 0;  // 0: the model's training context, at most 4096 per slot
    int n_threads = 0;
    int64_t n_ubatch = 512;
    int64_t n_batch = 0;  // accepted for llama.cpp compatibility
    bool no_mmap = false;
    bool mlock = false;
    bool check_tensors = false;
    std::string chat_template;  // "": the file's; a builtin name or a file
};

// -m, -c, -t, -ub, -b, --no-mmap, --mlock, --check-tensors, --chat-template
// and the split flags (--device, --vram, -ngl, cache type, streaming, -ot...).
void add_chat_model_flags(CLI::App& cmd, ChatModelFlags& f);

// The model (serving::LoadedModel: file, spec, tokenizer, session, where
// it is placed and why, in flags) and its chat template.
struct ChatModel : serving::LoadedModel {
    using serving::LoadedModel::LoadedModel;
    chat::ChatTemplate chat_template = chat::ChatTemplate::chatml();
    std::string template_origin;  // "the model file", "ChatML (the model has no template)", "--chat-template FILE"
    std::string bos_text, eos_text;
    std::vector<std::string> end_of_turn_text;
    std::vector<int32_t> end_of_turn_tokens;
};

// Opens the model for n_seq sequences; adjust (if any) may change the
// split request first (serve asks for a draft's placement there). Throws
// tandem::Error for bad input.
std::unique_ptr<ChatModel> open_chat_model(const ChatModelFlags& f, int64_t n_seq,
                                           const std::function<void(SplitRequest&)>& adjust = {});

}  // namespace tandem::tools
