// `tandem chat`: a conversation in the terminal through the model's chat
// template. The reply streams as it is generated; Ctrl-C stops the reply
// (Ctrl-C at the prompt, Ctrl-D or /exit ends the program). Each turn
// resends the history, and the slot's cache already holds all but the
// newest message, so only that is evaluated.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "runtime/chat/harmony.h"
#include "runtime/common/error.h"
#include "tools/chat_model.h"
#include "tools/commands.h"
#include "tools/llama_flags.h"
#include "tools/sampling_flags.h"
#include "runtime/serving/scheduler.h"

namespace tandem::tools {
namespace {

struct ChatOptions : ChatModelFlags {
    std::string system_prompt;
    int n_predict = -1;
    SamplingFlags sampling;
    bool verbose = false;
};

std::atomic<bool> g_interrupted{false};  // set by the SIGINT handler only

extern "C" void on_sigint(int) { g_interrupted.store(true); }

// A line from standard input, read with read(2) so that Ctrl-C interrupts
// it. nullopt at end of input or on Ctrl-C.
std::optional<std::string> read_line() {
    std::string line;
    while (true) {
        char c = 0;
        const ssize_t n = ::read(STDIN_FILENO, &c, 1);
        if (n < 0 && errno == EINTR) {
            if (g_interrupted.load()) return std::nullopt;
            continue;
        }
        if (n <= 0) return line.empty() ? std::nullopt : std::optional<std::string>(line);
        if (c == '\n') return line;
        line += c;
        if (line.size() > (size_t{1} << 20)) throw Error("an input line of over 1 MiB; give long text in pieces");
    }
}

void chat(const ChatOptions& o) {
    SamplerParams sampling = resolved_sampling(o.sampling);
    if (o.n_predict < -1 || o.n_predict == 0) {
        throw Error(fmt::format("-n: expected a value >= 1, or -1 (until the end of the reply), found {}", o.n_predict));
    }
    std::unique_ptr<ChatModel> m = open_chat_model(o, 1);
    sampling.grammar = flag_grammar(o.sampling, m->tokenizer);  // each reply matches it
    serve::SchedulerOptions so;
    so.n_slots = 1;
    so.step_tokens = o.n_ubatch;
    serve::Scheduler scheduler(*m->session, m->tokenizer, so);
    scheduler.start();

    struct sigaction sa {};
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;  // no SA_RESTART: a read at the prompt returns
    sigaction(SIGINT, &sa, nullptr);

    fmt::print(stderr, "tandem chat: {} (chat template: {}, {}); context {} tokens\n", o.model, m->template_origin,
               m->chat_template.family(), scheduler.n_ctx_slot());
    fmt::print(stderr, "Ctrl-C stops a reply; /clear forgets the conversation; /exit or Ctrl-D ends.\n");
    std::vector<chat::Message> history;
    if (!o.system_prompt.empty()) history.push_back({"system", o.system_prompt});
    const bool tty = isatty(STDIN_FILENO) != 0;
    const bool out_tty = isatty(STDOUT_FILENO) != 0;
    const bool harmony_family = m->chat_template.family() == "harmony";
    uint64_t turn = 0;
    while (true) {
        if (tty) {
            fmt::print("> ");
            std::fflush(stdout);
        }
        g_interrupted.store(false);
        const std::optional<std::string> line = read_line();
        if (!line) break;
        if (*line == "/exit" || *line == "/quit") break;
        if (*line == "/clear") {
            history.resize(o.system_prompt.empty() ? 0 : 1);
            fmt::print(stderr, "(conversation cleared)\n");
            continue;
        }
        if (line->empty()) continue;
        history.push_back({"user", *line});
        chat::TemplateInputs in;
        in.bos_token = m->bos_text;
        in.eos_token = m->eos_text;
        const bool add_bos = m->tokenizer.add_bos_by_default();
        in.tokenizer_adds_bos = add_bos;
        std::string text;
        try {
            text = m->chat_template.render(history, in);
        } catch (const Error& e) {
            history.pop_back();
            fmt::print(stderr, "tandem: the chat template refused the conversation: {}\n", e.what());
            continue;
        }
        serve::GenerationRequest g;
        g.prompt = m->tokenizer.encode(text, add_bos, true);
        if (static_cast<int64_t>(g.prompt.size()) >= scheduler.n_ctx_slot()) {
            history.pop_back();
            fmt::print(stderr, "tandem: the conversation is {} tokens and the context holds {}: /clear, or restart with a "
                               "larger -c\n",
                       g.prompt.size(), scheduler.n_ctx_slot());
            continue;
        }
        g.sampling = sampling;
        g.sampling.seed = sampling.seed + turn++;
        g.max_tokens = o.n_predict;
        g.stop = m->end_of_turn_text;
        g.stop_tokens = m->end_of_turn_tokens;
        std::shared_ptr<serve::Job> job = scheduler.submit(std::move(g));
        std::string reply;
        // gpt-oss: its thinking shown dimmed on a terminal (not at all
        // otherwise), its answer as the reply that goes back in the history.
        std::optional<chat::HarmonyParser> harmony;
        if (harmony_family) harmony.emplace();
        const auto show = [&](const chat::HarmonyParser::Delta& d) {
            if (!d.reasoning.empty() && out_tty) fmt::print("\033[2m{}\033[0m", d.reasoning);
            fmt::print("{}", d.content);
        };
        while (true) {
            if (g_interrupted.load()) job->cancel();
            std::optional<serve::Event> e = job->next(std::chrono::milliseconds(100));
            if (!e) continue;
            if (harmony) {
                show(harmony->push(e->text, e->done));
            } else {
                reply += e->text;
                fmt::print("{}", e->text);
            }
            std::fflush(stdout);
            if (!e->done) continue;
            if (harmony) reply = harmony->content();
            fmt::print("\n");
            if (e->finish_reason == "cancelled") fmt::print(stderr, "[reply stopped]\n");
            if (e->finish_reason == "error") fmt::print(stderr, "tandem: {}\n", e->error);
            if (e->finish_reason == "length") fmt::print(stderr, "[reply cut at {} tokens]\n", e->usage.completion_tokens);
            if (e->finish_reason == "stop" && e->usage.completion_tokens == 0) {
                fmt::print(stderr, "[the model ended its reply at once, with no text]\n");
            }
            if (o.verbose) {
                const double tg = e->usage.generation_ms > 0 ? 1000.0 * static_cast<double>(e->usage.completion_tokens - 1) /
                                                                   e->usage.generation_ms
                                                             : 0.0;
                fmt::print(stderr, "[prompt {} tokens ({} cached) in {:.0f} ms; {} tokens at {:.1f} tok/s]\n",
                           e->usage.prompt_tokens, e->usage.cached_tokens, e->usage.prompt_ms,
                           e->usage.completion_tokens, tg);
            }
            break;
        }
        g_interrupted.store(false);
        history.push_back({"assistant", reply});
    }
    if (tty) fmt::print("\n");
    scheduler.stop();
}

}  // namespace

void add_chat_command(CLI::App& app) {
    auto opts = std::make_shared<ChatOptions>();
    CLI::App* cmd = app.add_subcommand("chat", "Talk with a model in the terminal, through its chat template");
    add_chat_model_flags(*cmd, *opts);
    cmd->add_option("--system-prompt", opts->system_prompt, "the system message (-sys)");
    cmd->add_option("-n,--n-predict", opts->n_predict, "most tokens per reply (-1: until the model ends it)")
        ->capture_default_str();
    add_sampling_flags(*cmd, opts->sampling);
    cmd->add_flag("--verbose", opts->verbose, "print prompt and generation speed after each reply");
    add_llama_compat_flags(*cmd, LlamaTool::Run);
    cmd->footer(llama_spellings_help(*cmd));
    cmd->callback([opts] { chat(*opts); });
}

}  // namespace tandem::tools
