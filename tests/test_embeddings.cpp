// Embeddings: the pooling and normalization (runtime/serving/embedding.h),
// the /v1/embeddings request and response (tools/serve/embeddings.h), and
// end to end through the scheduler against llama.cpp's llama-embedding
// (tests/data/embeddings/llamacpp.json, made by
// scripts/llamacpp/embedding_reference.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/serving/embedding.h"
#include "runtime/serving/scheduler.h"
#include "tests/serve_helpers.h"
#include "tests/test_paths.h"
#include "tools/serve/embeddings.h"
#include "tools/serve/openai_api.h"

namespace {

using nlohmann::json;
using tandem::serve::ApiError;
using tandem::serve::EmbeddingRequest;
using tandem::serve::GenerationRequest;
using tandem::serve::normalize_embedding;
using tandem::serve::parse_embedding_request;
using tandem::serve::Pooler;
using tandem::serve::Pooling;
using tandem::serve::Scheduler;
using tandem::serve::SchedulerOptions;
using tandem::testing::collect;
using tandem::testing::ServeModel;

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
    EXPECT_EQ(a.size(), b.size());
    float d = 0;
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) d = std::max(d, std::abs(a[i] - b[i]));
    return d;
}

// ---- pooling and normalization

TEST(EmbeddingPooling, MeanClsAndLastOfKnownRows) {
    const std::vector<std::vector<float>> rows = {{1, 2}, {3, -4}, {5, 8}};
    const auto pool = [&](Pooling p) {
        Pooler pooler(p, 2, 3);
        for (int64_t pos = 0; pos < 3; ++pos) {
            if (pooler.wants(pos)) pooler.add(pos, rows[static_cast<size_t>(pos)]);
        }
        return pooler.pooled();
    };
    EXPECT_EQ(pool(Pooling::Mean), (std::vector<float>{3, 2}));
    EXPECT_EQ(pool(Pooling::Cls), (std::vector<float>{1, 2}));
    EXPECT_EQ(pool(Pooling::Last), (std::vector<float>{5, 8}));
    // Only the rows the pooling takes are asked for.
    Pooler last(Pooling::Last, 2, 3);
    EXPECT_FALSE(last.wants(0));
    EXPECT_FALSE(last.wants(1));
    EXPECT_TRUE(last.wants(2));
    Pooler cls(Pooling::Cls, 2, 3);
    EXPECT_TRUE(cls.wants(0));
    EXPECT_FALSE(cls.wants(2));
}

TEST(EmbeddingPooling, NormalizesAsLlamaCpp) {
    const std::vector<float> v = {3, -4};
    EXPECT_LT(max_abs_diff(normalize_embedding(v), {0.6f, -0.8f}), 1e-7f);  // Euclidean, the default
    EXPECT_EQ(normalize_embedding(v, -1), v);                                // none
    EXPECT_LT(max_abs_diff(normalize_embedding(v, 0), {24570, -32760}), 1e-2f);  // int16 range
    EXPECT_LT(max_abs_diff(normalize_embedding(v, 1), {3.0f / 7, -4.0f / 7}), 1e-7f);  // taxicab
    EXPECT_LT(max_abs_diff(normalize_embedding(v, 3), {0.66697f, -0.88930f}), 1e-4f);  // a p-norm
    EXPECT_EQ(normalize_embedding(std::vector<float>{0, 0}), (std::vector<float>{0, 0}));
    EXPECT_THROW(normalize_embedding(v, -2), tandem::Error);
}

TEST(EmbeddingPooling, NamesAndGgufValues) {
    EXPECT_EQ(tandem::serve::parse_pooling("mean"), Pooling::Mean);
    EXPECT_EQ(tandem::serve::parse_pooling("cls"), Pooling::Cls);
    EXPECT_EQ(tandem::serve::parse_pooling("last"), Pooling::Last);
    EXPECT_EQ(tandem::serve::parse_pooling("none"), Pooling::None);
    EXPECT_TRUE(tandem::testing::contains(tandem::testing::error_of([] { tandem::serve::parse_pooling("max"); }),
                                          "expected none, mean, cls or last, found 'max'"));
    EXPECT_THROW(tandem::serve::parse_pooling("rank"), tandem::Error);
    // llama.cpp's enum llama_pooling_type, as GGUF files store it.
    EXPECT_EQ(tandem::serve::pooling_from_gguf(0), Pooling::None);
    EXPECT_EQ(tandem::serve::pooling_from_gguf(1), Pooling::Mean);
    EXPECT_EQ(tandem::serve::pooling_from_gguf(2), Pooling::Cls);
    EXPECT_EQ(tandem::serve::pooling_from_gguf(3), Pooling::Last);
    EXPECT_THROW(tandem::serve::pooling_from_gguf(4), tandem::Error);
    EXPECT_THROW(tandem::serve::pooling_from_gguf(7), tandem::Error);
}

// ---- the request and the response

EmbeddingRequest parse(const json& body) { return parse_embedding_request(body, 100, 8); }

// The 400 a body gets, naming its field; "" when accepted.
std::string refusal(const json& body) {
    try {
        parse(body);
    } catch (const ApiError& e) {
        EXPECT_EQ(e.status, 400);
        return e.param + ": " + e.what();
    }
    return "";
}

TEST(EmbeddingRequestParse, TakesTheFourInputShapes) {
    EmbeddingRequest r = parse(json::parse(R"({"input": "hello"})"));
    ASSERT_EQ(r.inputs.size(), 1u);
    EXPECT_EQ(r.inputs[0].text, "hello");
    EXPECT_FALSE(r.base64);
    EXPECT_EQ(r.embd_normalize, 2);

    r = parse(json::parse(R"({"input": ["a", "b", "c"], "encoding_format": "base64", "model": "any"})"));
    ASSERT_EQ(r.inputs.size(), 3u);
    EXPECT_EQ(r.inputs[2].text, "c");
    EXPECT_TRUE(r.base64);

    r = parse(json::parse(R"({"input": [1, 2, 99]})"));
    ASSERT_EQ(r.inputs.size(), 1u);
    EXPECT_FALSE(r.inputs[0].text);
    EXPECT_EQ(r.inputs[0].tokens, (std::vector<int32_t>{1, 2, 99}));

    r = parse(json::parse(R"({"input": [[1, 2], [3]], "encoding_format": "float", "dimensions": 8,
                                 "embd_normalize": -1})"));
    ASSERT_EQ(r.inputs.size(), 2u);
    EXPECT_EQ(r.inputs[1].tokens, (std::vector<int32_t>{3}));
    EXPECT_EQ(r.embd_normalize, -1);
}

TEST(EmbeddingRequestParse, BadInputsAre400sNamingTheField) {
    using tandem::testing::contains;
    const auto refused = [](const char* body) { return refusal(json::parse(body)); };
    EXPECT_TRUE(contains(refused("{}"), "input: 'input': expected a string"));
    EXPECT_TRUE(contains(refused(R"({"input": ""})"), "input: 'input': expected text, found an empty string"));
    EXPECT_TRUE(contains(refused(R"({"input": []})"), "found an empty array"));
    EXPECT_TRUE(contains(refused(R"({"input": ["a", ""]})"), "input[1]: "));
    EXPECT_TRUE(contains(refused(R"({"input": [[1], []]})"), "input[1]: 'input[1]': expected at least one token id"));
    EXPECT_TRUE(contains(refused(R"({"input": 5})"), "found an integer"));
    EXPECT_TRUE(contains(refused(R"({"input": ["a", 5]})"), "input[1]: 'input[1]': expected a string or an array"));
    EXPECT_TRUE(contains(refused(R"({"input": [1, 100]})"), "input[1]: 'input[1]': expected a token id in [0, 100), found 100"));
    EXPECT_TRUE(contains(refused(R"({"input": [1, -1]})"), "found -1"));
    EXPECT_TRUE(contains(refused(R"({"input": [1, 2.5]})"), "input[1]"));
    EXPECT_TRUE(contains(refused(R"({"input": [[1, "x"]]})"), "input[0][1]"));
    EXPECT_TRUE(contains(refused(R"({"input": "a", "encoding_format": "int8"})"),
                         "expected \"float\" or \"base64\", found \"int8\""));
    EXPECT_TRUE(contains(refused(R"({"input": "a", "dimensions": 4})"), "embeddings have 8, found 4"));
    EXPECT_TRUE(contains(refused(R"({"input": "a", "embd_normalize": "2"})"), "embd_normalize"));
    EXPECT_EQ(refused(R"({"input": "a", "dimensions": 8, "user": "u"})"), "");
    EXPECT_TRUE(contains(refusal({{"input", std::vector<std::string>(tandem::serve::kMaxEmbeddingInputs + 1, "a")}}),
                         "expected at most 2048 inputs"));
}

TEST(EmbeddingResponse, Base64IsLittleEndianFloat32) {
    // 1.0f is 00 00 80 3f, -2.0f is 00 00 00 c0.
    EXPECT_EQ(tandem::serve::base64_floats(std::vector<float>{1.0f}), "AACAPw==");
    EXPECT_EQ(tandem::serve::base64_floats(std::vector<float>{1.0f, -2.0f}), "AACAPwAAAMA=");
    EXPECT_EQ(tandem::serve::base64_floats(std::vector<float>{1.0f, -2.0f, 0.5f}), "AACAPwAAAMAAAAA/");
}

TEST(EmbeddingResponse, HasOpenAIsShape) {
    const json r = tandem::serve::embeddings_response("m.gguf", {{0.5f, 1.0f}, {1.0f}}, 7, false);
    EXPECT_EQ(r["object"], "list");
    EXPECT_EQ(r["model"], "m.gguf");
    EXPECT_EQ(r["usage"]["prompt_tokens"], 7);
    EXPECT_EQ(r["usage"]["total_tokens"], 7);
    ASSERT_EQ(r["data"].size(), 2u);
    EXPECT_EQ(r["data"][1]["object"], "embedding");
    EXPECT_EQ(r["data"][1]["index"], 1);
    EXPECT_EQ(r["data"][0]["embedding"], json({0.5, 1.0}));
    const json b = tandem::serve::embeddings_response("m", {{1.0f}}, 1, true);
    EXPECT_EQ(b["data"][0]["embedding"], "AACAPw==");
}

// ---- through the scheduler, against llama.cpp

// The pooled, normalized embedding of `tokens`, served by a scheduler
// evaluating prompts in chunks of `step` tokens.
std::vector<float> served_embedding(const ServeModel& m, const std::vector<int32_t>& tokens, Pooling p,
                                    int64_t step = 64) {
    auto s = m.session(2, 512);
    Scheduler sched(*s, m.tok, SchedulerOptions{2, 0, step});
    sched.start();
    GenerationRequest g;
    g.prompt = tokens;
    g.embed = p;
    const auto r = collect(sched.submit(std::move(g)));
    EXPECT_EQ(r.last.finish_reason, "stop") << r.last.error;
    EXPECT_EQ(r.last.usage.prompt_tokens, static_cast<int64_t>(tokens.size()));
    return normalize_embedding(r.last.embedding);
}

struct Reference {
    std::string text;
    std::vector<float> embedding;
};

// llama-embedding's vector for `model` (a file name) and `pooling`.
std::optional<Reference> reference(const std::string& model, const std::string& pooling) {
    std::ifstream in(tandem::testing::test_data("embeddings/llamacpp.json"));
    EXPECT_TRUE(in) << "tests/data/embeddings/llamacpp.json is missing";
    const json j = json::parse(in);
    for (const json& c : j["cases"]) {
        if (c["model"] == model && c["pooling"] == pooling) {
            return Reference{j["text"].get<std::string>(), c["embedding"].get<std::vector<float>>()};
        }
    }
    return std::nullopt;
}

// Tandem's vector for each pooling against llama.cpp's; each is also far
// from the other poolings' references, so a wrong pooling fails.
void check_against_llamacpp(const ServeModel& m, const std::string& model, float tolerance) {
    const std::vector<std::pair<Pooling, std::string>> poolings = {
        {Pooling::Mean, "mean"}, {Pooling::Cls, "cls"}, {Pooling::Last, "last"}};
    for (const auto& [p, name] : poolings) {
        const auto ref = reference(model, name);
        ASSERT_TRUE(ref) << model << " " << name;
        // As llama-embedding tokenizes: BOS, special tokens parsed.
        const std::vector<int32_t> tokens = m.tok.encode(ref->text, m.tok.add_bos_by_default(), true);
        ASSERT_GT(tokens.size(), 8u);  // so that chunks of 8 cut it
        for (const int64_t step : {int64_t{64}, int64_t{8}}) {
            const std::vector<float> ours = served_embedding(m, tokens, p, step);
            ASSERT_EQ(ours.size(), static_cast<size_t>(m.spec.hp.n_embd));
            const float d = max_abs_diff(ours, ref->embedding);
            EXPECT_LT(d, tolerance) << model << " pooling " << name << ", chunks of " << step;
            std::printf("[ embedding ] %s %s (chunks of %lld): max |tandem - llama.cpp| = %.3g\n", model.c_str(),
                        name.c_str(), static_cast<long long>(step), static_cast<double>(d));
            for (const auto& [q, other] : poolings) {
                if (q == p) continue;
                EXPECT_GT(max_abs_diff(ours, reference(model, other)->embedding), 10 * tolerance)
                    << name << " against " << other << "'s reference";
            }
        }
    }
}

// Q4_K_M: llama.cpp differs from itself by 2.8e-3 (its repacked Q4_K
// kernels against --no-repack, last pooling; Tandem: 2.4e-3 and 2.5e-3
// from each); twice that. Wrong poolings are 0.16 and more away.
TEST(EmbeddingsVsLlamaCpp, TinyLlamaQ4KM) {
    const ServeModel m;  // tests/data/tiny-llama-Q4_K_M.gguf
    check_against_llamacpp(m, "tiny-llama-Q4_K_M.gguf", 6e-3f);
}

TEST(EmbeddingsVsLlamaCpp, SynthLlamaQ8_0) {
    const auto path = tandem::testing::shared("models/synth-llama-Q8_0.gguf");
    if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is not here (../shared)";
    const ServeModel m(path);
    // The same bits as llama.cpp's AVX2 build here (1.5e-8 at most); room
    // for other SIMD levels' sums.
    check_against_llamacpp(m, "synth-llama-Q8_0.gguf", 1e-3f);
}

// ---- the engine

// The hidden rows where the output norm runs on an accelerator (here a
// stand-in CPU device, -ngl past the layers): the host's bits, read back.
TEST(EmbeddingsEngine, HiddenRowsComeBackFromTheDeviceOfTheOutputNorm) {
    const ServeModel m;
    const std::vector<int32_t> ids = m.tok.encode("Pooling reads the rows after the output norm", true);
    std::vector<tandem::BatchToken> batch;
    for (size_t i = 0; i < ids.size(); ++i) {
        batch.push_back({ids[i], static_cast<int32_t>(i), 0, i % 3 == 0 || i + 1 == ids.size()});
    }
    const auto rows_on = [&](const std::string& device, uint64_t* moved) {
        tandem::SessionOptions o;
        o.n_ctx = 256;
        o.n_ubatch = 64;
        o.device = device;
        o.n_gpu_layers = device.empty() ? 0 : 99;
        tandem::Session s(m.file, m.spec, o);
        std::vector<float> hidden;
        s.eval_batch_hidden(batch, hidden);
        *moved = s.activation_bytes_moved();
        EXPECT_TRUE(device.empty() || s.output_on_device());
        return hidden;
    };
    uint64_t host_moved = 0, device_moved = 0;
    const std::vector<float> host = rows_on("", &host_moved);
    const std::vector<float> device = rows_on("cpu2", &device_moved);
    const auto wanted = static_cast<size_t>(std::count_if(batch.begin(), batch.end(), [](const auto& b) { return b.logits; }));
    ASSERT_EQ(host.size(), wanted * static_cast<size_t>(m.spec.hp.n_embd));
    EXPECT_EQ(device, host);
    EXPECT_EQ(host_moved, 0u);
    EXPECT_GE(device_moved, host.size() * sizeof(float));  // the rows came back
    // Not the logits: the head's input, of the model's width.
    std::vector<float> logits;
    tandem::SessionOptions o;
    o.n_ctx = 256;
    tandem::Session s(m.file, m.spec, o);
    s.eval_batch(batch, logits);
    EXPECT_EQ(logits.size(), wanted * static_cast<size_t>(s.n_vocab()));
    EXPECT_EQ(s.n_embd(), m.spec.hp.n_embd);
}

// ---- the scheduler's handling

TEST(EmbeddingsServed, ChatDecodesBesideALongEmbeddingPrompt) {
    const ServeModel m;
    const auto chat_prompt = m.tok.encode("Once upon a time", true);
    const std::string alone = tandem::testing::plain_greedy(m, chat_prompt, 16);
    std::string text;
    for (int i = 0; i < 40; ++i) text += "word ";
    const auto long_prompt = m.tok.encode(text, true);
    auto s = m.session(2, 1024);
    Scheduler sched(*s, m.tok, SchedulerOptions{2, 0, 8});  // the embedding takes many steps
    sched.start();
    auto chat = sched.submit(tandem::testing::greedy_request(chat_prompt, 16));
    GenerationRequest g;
    g.prompt = long_prompt;
    g.embed = Pooling::Mean;
    auto embed = sched.submit(std::move(g));
    const auto e = collect(embed);
    const auto c = collect(chat);
    EXPECT_EQ(c.text, alone);
    EXPECT_EQ(e.last.finish_reason, "stop");
    EXPECT_TRUE(e.last.text.empty());
    EXPECT_TRUE(c.last.embedding.empty());
    // The same vector as alone in one chunk, up to the kernels' order.
    EXPECT_LT(max_abs_diff(normalize_embedding(e.last.embedding), served_embedding(m, long_prompt, Pooling::Mean)),
              1e-4f);
}

TEST(EmbeddingsServed, APromptMayFillTheSlotButNotMore) {
    const ServeModel m;
    auto s = m.session(2, 64);  // 32 positions a slot
    Scheduler sched(*s, m.tok, SchedulerOptions{2, 0, 64});
    sched.start();
    GenerationRequest g;
    g.prompt.assign(32, 100);
    g.embed = Pooling::Last;
    auto full = collect(sched.submit(g));
    EXPECT_EQ(full.last.finish_reason, "stop") << full.last.error;
    EXPECT_EQ(full.last.embedding.size(), static_cast<size_t>(m.spec.hp.n_embd));
    g.prompt.push_back(100);
    auto over = collect(sched.submit(g));
    EXPECT_EQ(over.last.finish_reason, "error");
    EXPECT_TRUE(tandem::testing::contains(over.last.error, "33 tokens but a slot's context holds 32"));
    g.embed = Pooling::None;
    g.prompt.resize(4);
    EXPECT_EQ(collect(sched.submit(g)).last.finish_reason, "error");
}

}  // namespace
