// POST /v1/embeddings and /embeddings: OpenAI's embeddings API over the
// slots. Each input is a prompt that takes a slot's turn like any other
// (runtime/serving/scheduler.h: GenerationRequest::embed); its final hidden
// states are pooled (--pooling) and normalized (Euclidean by default, as
// llama-server). Only with `tandem serve --embeddings`; otherwise 501, as
// llama-server answers.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace httplib {
class Server;
}

namespace tandem::serve {

struct ServerState;

// One input: text to tokenize, or token ids as given.
struct EmbeddingInput {
    std::optional<std::string> text;
    std::vector<int32_t> tokens;
};

struct EmbeddingRequest {
    std::vector<EmbeddingInput> inputs;
    bool base64 = false;  // encoding_format "base64": little-endian float32
    int embd_normalize = 2;  // llama-server's per-request normalization (normalize_embedding)
};

// OpenAI's limit on inputs per request.
inline constexpr size_t kMaxEmbeddingInputs = 2048;

// `input`: a string, an array of strings, an array of token ids, or an
// array of arrays of token ids (each id in [0, n_vocab)); encoding_format
// "float" (default) or "base64"; dimensions, when given, n_embd. Throws
// ApiError(400) naming the field: missing or empty input, an empty string
// or token list, more than kMaxEmbeddingInputs inputs, a wrong type.
EmbeddingRequest parse_embedding_request(const nlohmann::json& body, int32_t n_vocab, int64_t n_embd);

// The floats' bytes (float32, little endian) in standard base64.
std::string base64_floats(std::span<const float> v);

// {"object": "list", "data": [{"object": "embedding", "index": i,
// "embedding": [...] or "base64"}], "model", "usage": {prompt_tokens,
// total_tokens}}.
nlohmann::json embeddings_response(const std::string& model, const std::vector<std::vector<float>>& vectors,
                                   int64_t prompt_tokens, bool base64);

void add_embedding_routes(httplib::Server& server, ServerState& state);

}  // namespace tandem::serve
