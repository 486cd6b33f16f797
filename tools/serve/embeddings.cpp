#include "tools/serve/embeddings.h"

#include <cstring>
#include <deque>
#include <memory>
#include <utility>

#include <fmt/format.h>
#include <httplib.h>

#include "runtime/serving/embedding.h"
#include "tools/serve/completions.h"
#include "tools/serve/http_util.h"
#include "tools/serve/openai_api.h"
#include "tools/serve/server_state.h"

namespace tandem::serve {

using nlohmann::json;

namespace {

bool is_integer(const json& v) {
    return v.is_number_integer() || v.is_number_unsigned();
}

// An array of token ids in [0, n_vocab): `field` names it in errors.
std::vector<int32_t> token_list(const Fields& f, const json& v, const std::string& field, int32_t n_vocab) {
    std::vector<int32_t> out;
    for (size_t j = 0; j < v.size(); ++j) {
        const json& id = v[j];
        const std::string at = fmt::format("{}[{}]", field, j);
        if (!is_integer(id)) f.bad(at, "a token id (an integer)", id);
        const bool in_range = id.is_number_unsigned() ? id.get<uint64_t>() < static_cast<uint64_t>(n_vocab)
                                                      : id.get<int64_t>() >= 0 && id.get<int64_t>() < n_vocab;
        if (!in_range) {
            throw ApiError(400, fmt::format("'{}': expected a token id in [0, {}), found {}", at, n_vocab, id.dump()),
                           at);
        }
        out.push_back(static_cast<int32_t>(id.get<int64_t>()));
    }
    if (out.empty()) throw ApiError(400, fmt::format("'{}': expected at least one token id, found none", field), field);
    return out;
}

EmbeddingInput text_input(const json& v, const std::string& field) {
    std::string text = v.get<std::string>();
    if (text.empty()) throw ApiError(400, fmt::format("'{}': expected text, found an empty string", field), field);
    return {std::move(text), {}};
}

}  // namespace

EmbeddingRequest parse_embedding_request(const json& body, int32_t n_vocab, int64_t n_embd) {
    const Fields f(body);
    EmbeddingRequest r;
    const json* input = f.find("input");
    const char* shapes = "a string, an array of strings, an array of token ids or an array of arrays of token ids";
    if (!input) throw ApiError(400, fmt::format("'input': expected {}, found none", shapes), "input");
    if (input->is_string()) {
        r.inputs.push_back(text_input(*input, "input"));
    } else if (input->is_array()) {
        if (input->empty()) throw ApiError(400, "'input': expected at least one input, found an empty array", "input");
        if (input->size() > kMaxEmbeddingInputs) {
            throw ApiError(400, fmt::format("'input': expected at most {} inputs, found {}", kMaxEmbeddingInputs,
                                            input->size()),
                           "input");
        }
        if (is_integer(input->front())) {
            r.inputs.push_back({std::nullopt, token_list(f, *input, "input", n_vocab)});
        } else {
            for (size_t i = 0; i < input->size(); ++i) {
                const json& v = (*input)[i];
                const std::string field = fmt::format("input[{}]", i);
                if (v.is_string()) {
                    r.inputs.push_back(text_input(v, field));
                } else if (v.is_array()) {
                    r.inputs.push_back({std::nullopt, token_list(f, v, field, n_vocab)});
                } else {
                    f.bad(field, "a string or an array of token ids", v);
                }
            }
        }
    } else {
        f.bad("input", shapes, *input);
    }
    if (const auto format = f.string("encoding_format")) {
        if (*format != "float" && *format != "base64") {
            throw ApiError(400, fmt::format("'encoding_format': expected \"float\" or \"base64\", found \"{}\"", *format),
                           "encoding_format");
        }
        r.base64 = *format == "base64";
    }
    // Vectors are the model's width: a request for another cannot be met.
    if (const auto dims = f.integer("dimensions", 1, 1 << 20); dims && *dims != n_embd) {
        throw ApiError(400, fmt::format("'dimensions': this model's embeddings have {}, found {}", n_embd, *dims),
                       "dimensions");
    }
    r.embd_normalize = static_cast<int>(f.integer("embd_normalize", -1, 64).value_or(2));
    f.string("model");  // any name: there is one model
    return r;
}

std::string base64_floats(std::span<const float> v) {
    static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::vector<uint8_t> bytes;
    bytes.reserve(v.size() * 4);
    for (const float x : v) {
        uint32_t u = 0;
        std::memcpy(&u, &x, sizeof u);
        for (int b = 0; b < 4; ++b) bytes.push_back(static_cast<uint8_t>(u >> (8 * b)));  // little endian
    }
    std::string out;
    out.reserve((bytes.size() + 2) / 3 * 4);
    for (size_t i = 0; i < bytes.size(); i += 3) {
        const size_t n = std::min<size_t>(3, bytes.size() - i);
        uint32_t w = static_cast<uint32_t>(bytes[i]) << 16;
        if (n > 1) w |= static_cast<uint32_t>(bytes[i + 1]) << 8;
        if (n > 2) w |= bytes[i + 2];
        out += kAlphabet[(w >> 18) & 63];
        out += kAlphabet[(w >> 12) & 63];
        out += n > 1 ? kAlphabet[(w >> 6) & 63] : '=';
        out += n > 2 ? kAlphabet[w & 63] : '=';
    }
    return out;
}

json embeddings_response(const std::string& model, const std::vector<std::vector<float>>& vectors,
                         int64_t prompt_tokens, bool base64) {
    json data = json::array();
    for (size_t i = 0; i < vectors.size(); ++i) {
        data.push_back({{"object", "embedding"},
                        {"index", i},
                        {"embedding", base64 ? json(base64_floats(vectors[i])) : json(vectors[i])}});
    }
    return {{"object", "list"},
            {"data", std::move(data)},
            {"model", model},
            {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}}};
}

namespace {

// The input's tokens as a text prompt of llama-server's embeddings: the
// vocabulary's BOS and, where it asks for one (tokenizer.ggml.add_eos_token,
// as Qwen3-Embedding's does), EOS; special tokens parsed.
std::vector<int32_t> input_tokens(const LoadedModel& m, const EmbeddingInput& in, size_t i) {
    std::vector<int32_t> tokens = in.tokens;
    if (in.text) {
        tokens = m.tokenizer->encode(*in.text, m.add_bos, true);
        if (m.tokenizer->add_eos_by_default() && m.tokenizer->eos() >= 0) tokens.push_back(m.tokenizer->eos());
    }
    const std::string field = fmt::format("input[{}]", i);
    if (tokens.empty()) throw ApiError(400, fmt::format("'{}' gives no tokens", field), field);
    const int64_t limit = m.scheduler->n_ctx_slot();
    if (static_cast<int64_t>(tokens.size()) > limit) {
        throw ApiError(400,
                       fmt::format("'{}' has {} tokens but a slot's context holds {}; start the server with a larger "
                                   "-c or fewer --parallel slots",
                                   field, tokens.size(), limit),
                       field, "context_length_exceeded");
    }
    return tokens;
}

void handle(ServerState& state, const httplib::Request& req, httplib::Response& res) {
    const LoadedModel& m = state.model;
    if (!state.config.embeddings) {
        throw ApiError(501, "This server does not support embeddings. Start it with `--embeddings`", "",
                       "not_supported_error");
    }
    if (m.pooling == Pooling::None) {
        throw ApiError(400, "Pooling type 'none' is not OAI compatible. Please use a different pooling type "
                            "(start tandem serve with --pooling mean, cls or last)");
    }
    const json body = parse_body(req.body);
    const EmbeddingRequest r = parse_embedding_request(body, m.tokenizer->n_vocab(), m.n_embd);
    std::vector<std::vector<int32_t>> prompts;
    for (size_t i = 0; i < r.inputs.size(); ++i) prompts.push_back(input_tokens(m, r.inputs[i], i));

    // At most a slot's worth of this request's inputs wait or run at once:
    // a long list takes its turns beside other clients' requests instead of
    // filling the queue ahead of them.
    std::shared_ptr<void> answering = state.answer_token();
    const auto window = static_cast<size_t>(m.scheduler->n_slots());
    std::deque<std::pair<size_t, std::shared_ptr<Job>>> in_flight;
    const auto cancel_all = [&in_flight] {
        for (auto& waiting : in_flight) waiting.second->cancel();
    };
    std::vector<std::vector<float>> vectors(prompts.size());
    int64_t prompt_tokens = 0;
    size_t next = 0;
    while (next < prompts.size() || !in_flight.empty()) {
        for (; next < prompts.size() && in_flight.size() < window; ++next) {
            GenerationRequest g;
            g.prompt = std::move(prompts[next]);
            g.embed = m.pooling;
            g.cache_prompt = false;
            g.client_gone = state.watch_client(req);
            in_flight.emplace_back(next, m.scheduler->submit(std::move(g)));
        }
        auto [i, job] = std::move(in_flight.front());
        in_flight.pop_front();
        const WholeAnswer a = wait_whole(*job);
        if (const auto failed = failure_of(a.last)) {
            cancel_all();
            throw *failed;
        }
        if (a.last.embedding.empty()) {  // cut short by the server stopping
            cancel_all();
            throw ApiError(503, "the server is stopping", "", "unavailable_error");
        }
        vectors[i] = normalize_embedding(a.last.embedding, r.embd_normalize);
        prompt_tokens += a.last.usage.prompt_tokens;
    }
    set_json(res, 200, embeddings_response(m.name, vectors, prompt_tokens, r.base64));
}

}  // namespace

void add_embedding_routes(httplib::Server& server, ServerState& state) {
    for (const char* path : {"/v1/embeddings", "/embeddings"}) {
        server.Post(path, guarded(state, [&state](const httplib::Request& req, httplib::Response& res) {
                        handle(state, req, res);
                    }));
    }
}

}  // namespace tandem::serve
