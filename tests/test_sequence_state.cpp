// One sequence's KV cache state saved and restored (Session::save_sequence,
// restore_sequence; runtime/engine/sequence_state.h): a restored sequence
// continues bit for bit as the uninterrupted one, in another sequence and
// in a fresh session, with F16 and Q8_0 caches and with sliding-window
// rings; malformed, truncated and foreign blobs are errors that leave the
// sequence as it was; `tandem run --prompt-cache` reuses the cached prefix
// and prints what it prints without the cache.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include "kernels_cuda/cuda_api.h"
#include "runtime/common/error.h"
#include "runtime/engine/sequence_state.h"
#include "runtime/engine/session.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/gguf/gguf_writer.h"
#include "runtime/model/model_spec.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tests/run_command.h"
#include "tests/test_cuda_inputs.h"
#include "tests/test_paths.h"

namespace {

namespace fs = std::filesystem;
using tandem::BatchToken;
using tandem::Session;
using tandem::SessionOptions;
using tandem::testing::contains;
using tandem::testing::error_of;

struct Model {
    tandem::gguf::File file;
    tandem::model::ModelSpec spec;
    tandem::Tokenizer tok;
    explicit Model(const fs::path& p)
        : file(tandem::gguf::File::open(p)), spec(tandem::model::load_model_spec(file)), tok(tandem::Tokenizer::from_gguf(file)) {}
};

fs::path tiny() { return tandem::testing::test_data("tiny-llama-Q4_K_M.gguf"); }

SessionOptions opts(tandem::model::CacheType type, int64_t n_ctx = 256, int64_t n_ubatch = 64, int64_t n_seq = 4) {
    SessionOptions o;
    o.cache_type = type;
    o.n_ctx = n_ctx;
    o.n_ubatch = n_ubatch;
    o.n_seq_max = n_seq;
    return o;
}

size_t argmax(const float* x, size_t n) { return static_cast<size_t>(std::max_element(x, x + n) - x); }

// Sequence seq at positions pos0...: `first` then `steps` greedy tokens,
// one token per call as generation does; the logits of every call.
std::vector<std::vector<float>> continue_greedy(Session& s, int32_t seq, int32_t pos0, int32_t first, int steps,
                                                std::vector<int32_t>* chosen = nullptr) {
    std::vector<std::vector<float>> out;
    int32_t tok = first;
    for (int i = 0; i <= steps; ++i) {
        const BatchToken b{tok, pos0 + i, seq, true};
        std::vector<float> logits;
        s.eval_batch(std::span(&b, 1), logits);
        tok = static_cast<int32_t>(argmax(logits.data(), logits.size()));
        if (chosen) chosen->push_back(tok);
        out.push_back(std::move(logits));
    }
    return out;
}

// Sequence seq fed `ids` from position 0 as one batch.
void prefill(Session& s, int32_t seq, std::span<const int32_t> ids) {
    std::vector<BatchToken> batch;
    for (size_t i = 0; i < ids.size(); ++i) batch.push_back({ids[i], static_cast<int32_t>(i), seq, false});
    std::vector<float> logits;
    s.eval_batch(batch, logits);
}

void expect_bitwise(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b,
                    const std::string& what) {
    ASSERT_EQ(a.size(), b.size()) << what;
    for (size_t i = 0; i < a.size(); ++i) {
        ASSERT_EQ(a[i].size(), b[i].size()) << what;
        EXPECT_EQ(std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)), 0)
            << what << ": step " << i << " differs (first token " << argmax(a[i].data(), a[i].size()) << " vs "
            << argmax(b[i].data(), b[i].size()) << ")";
    }
}

// The prompt but its last token evaluated and saved from sequence 0; the
// rest (the last prompt token, then greedy steps) run uninterrupted in the
// same session, after a restore into sequence 2 of that session, and after
// a restore into sequences 0 and 3 of a fresh one: every logit the same bits.
void check_round_trip(const Model& m, const std::vector<int32_t>& prompt, const SessionOptions& o, int steps) {
    const std::span<const int32_t> head(prompt.data(), prompt.size() - 1);
    const auto n = static_cast<int32_t>(head.size());
    Session ref(m.file, m.spec, o);
    prefill(ref, 0, head);
    const std::vector<uint8_t> blob = ref.save_sequence(0, head);
    const auto expected = continue_greedy(ref, 0, n, prompt.back(), steps);

    Session same(m.file, m.spec, o);
    prefill(same, 0, head);
    EXPECT_EQ(same.restore_sequence(2, blob), std::vector<int32_t>(head.begin(), head.end()));
    EXPECT_EQ(same.seq_pos_max(2), n - 1);
    expect_bitwise(expected, continue_greedy(same, 2, n, prompt.back(), steps), "restored beside the original");

    for (const int32_t seq : {0, 3}) {
        Session fresh(m.file, m.spec, o);
        EXPECT_EQ(fresh.restore_sequence(seq, blob), std::vector<int32_t>(head.begin(), head.end()));
        expect_bitwise(expected, continue_greedy(fresh, seq, n, prompt.back(), steps),
                       "restored into a fresh session, sequence " + std::to_string(seq));
    }
    // Saving the restored sequence gives the same blob (same rows, same cells).
    Session again(m.file, m.spec, o);
    again.restore_sequence(0, blob);
    EXPECT_EQ(again.save_sequence(0, head), blob);
}

}  // namespace

TEST(SequenceState, RestoredSequenceContinuesBitForBitF16) {
    const Model m(tiny());
    const auto prompt = m.tok.encode("Once upon a time, there was a little robot who wanted to learn.", true);
    check_round_trip(m, prompt, opts(tandem::model::kCacheF16), 12);
}

TEST(SequenceState, RestoredSequenceContinuesBitForBitQ8_0) {
    const Model m(tiny());
    const auto prompt = m.tok.encode("The capital of France is Paris, and the capital of Italy is", true);
    check_round_trip(m, prompt, opts(tandem::model::kCacheQ8_0), 12);
}

// K and V of different types, quantized ones rotated (tiny-llama's heads of
// 32 are not rotated: synth-llama's of 64 are).
TEST(SequenceState, RestoredSequenceContinuesBitForBitMixedTypes) {
    const Model m(tiny());
    const auto prompt = m.tok.encode("The capital of France is Paris, and the capital of Italy is", true);
    check_round_trip(m, prompt, opts({tandem::quant::Type::Q4_1, tandem::quant::Type::F16}), 12);
    const fs::path synth = tandem::testing::shared("models/synth-llama-Q8_0.gguf");
    TANDEM_REQUIRE_SHARED(synth);
    const Model s(synth);
    const auto ids = s.tok.encode("Once upon a time, there was a little robot who wanted to learn.", true);
    check_round_trip(s, ids, opts({tandem::quant::Type::Q8_0, tandem::quant::Type::IQ4_NL}), 12);
}

// The state is worth restoring only if it is the cache: a blob whose rows
// are those of another prompt gives other logits (the check above is not
// passing on an empty or ignored restore).
TEST(SequenceState, ARestoreOfAnotherPromptChangesTheLogits) {
    const Model m(tiny());
    const auto a = m.tok.encode("Once upon a time, there was a little robot", true);
    auto b = a;
    b[3] = (b[3] + 7) % static_cast<int32_t>(m.spec.hp.n_vocab);
    const SessionOptions o = opts(tandem::model::kCacheF16);
    Session s(m.file, m.spec, o);
    prefill(s, 0, a);
    prefill(s, 1, b);
    const auto blob_b = s.save_sequence(1, b);
    const auto expected = continue_greedy(s, 0, static_cast<int32_t>(a.size()), 42, 0);
    Session t(m.file, m.spec, o);
    t.restore_sequence(0, blob_b);
    const auto got = continue_greedy(t, 0, static_cast<int32_t>(a.size()), 42, 0);
    EXPECT_NE(std::memcmp(expected[0].data(), got[0].data(), got[0].size() * sizeof(float)), 0);
}

TEST(SequenceState, RestoreReplacesTheSequenceAndKeepsOthers) {
    const Model m(tiny());
    const auto a = m.tok.encode("Once upon a time, there was a little robot who wanted to learn.", true);
    const auto b = m.tok.encode("The capital of France is", true);
    Session s(m.file, m.spec, opts(tandem::model::kCacheF16));
    prefill(s, 0, b);
    const auto blob_b = s.save_sequence(0, b);
    s.reset();
    prefill(s, 0, a);
    prefill(s, 1, a);
    // Sequence 0 held a's longer prompt: after the restore it holds b's only.
    EXPECT_EQ(s.restore_sequence(0, blob_b), b);
    EXPECT_EQ(s.seq_pos_max(0), static_cast<int32_t>(b.size()) - 1);
    EXPECT_EQ(s.seq_pos_max(1), static_cast<int32_t>(a.size()) - 1);
    // An empty sequence saves and restores as empty.
    const auto empty = s.save_sequence(5, {});
    EXPECT_TRUE(s.restore_sequence(1, empty).empty());
    EXPECT_EQ(s.seq_pos_max(1), -1);
    // Bad arguments.
    EXPECT_TRUE(contains(error_of([&] { (void)s.save_sequence(64, b); }), "sequence id 64"));
    const std::vector<int32_t> bad{1, -3};
    EXPECT_TRUE(contains(error_of([&] { (void)s.save_sequence(0, bad); }), "token id -3"));
    EXPECT_TRUE(contains(error_of([&] { (void)s.restore_sequence(-1, blob_b); }), "sequence id -1"));
}

// Every header byte flipped is refused: by the checksum as it is, and by
// the field's own check once the checksum is made right again; the
// sequence restored into keeps what it held.
TEST(SequenceState, CorruptedBlobsAreErrorsAndLeaveTheSequenceUnchanged) {
    const Model m(tiny());
    const auto a = m.tok.encode("Once upon a time, there was a little robot", true);
    Session s(m.file, m.spec, opts(tandem::model::kCacheQ8_0));
    prefill(s, 0, a);
    const std::vector<uint8_t> blob = s.save_sequence(0, a);
    prefill(s, 1, std::span(a.data(), 5));
    const auto restore_fails = [&](const std::vector<uint8_t>& b, const std::string& what) {
        const std::string e = error_of([&] { (void)s.restore_sequence(1, b); });
        EXPECT_NE(e, "<no error>") << what;
        EXPECT_EQ(s.seq_pos_max(1), 4) << what << ": " << e;
        return e;
    };
    for (size_t i = 0; i < tandem::kSequenceStateHeaderBytes; ++i) {
        auto b = blob;
        b[i] ^= 0xFF;
        restore_fails(b, "header byte " + std::to_string(i));
        tandem::reseal_sequence_state(b);
        restore_fails(b, "header byte " + std::to_string(i) + ", resealed");
    }
    // The checksum names itself; a flipped row byte is caught by it.
    {
        auto b = blob;
        b[b.size() / 2] ^= 0x01;
        EXPECT_TRUE(contains(restore_fails(b, "a row byte"), "checksum"));
    }
    // Flipped and resealed: each token id's sign byte (an id outside the
    // vocabulary; other bits may give another valid id, which is data),
    // and every byte of the first layer's header (a layer out of order, a
    // length that does not add up).
    const size_t body = tandem::kSequenceStateHeaderBytes;
    const size_t layer0 = body + 4 * a.size();
    for (size_t i = body + 3; i < layer0; i += 4) {
        auto b = blob;
        b[i] ^= 0x80;
        tandem::reseal_sequence_state(b);
        EXPECT_TRUE(contains(restore_fails(b, "token byte " + std::to_string(i)), "outside the vocabulary"));
    }
    for (size_t i = layer0; i < layer0 + 16; ++i) {
        for (const uint8_t bit : {uint8_t{0x01}, uint8_t{0x80}}) {
            auto b = blob;
            b[i] ^= bit;
            tandem::reseal_sequence_state(b);
            restore_fails(b, "layer 0 header byte " + std::to_string(i));
        }
    }
    // Truncated anywhere: as it is, and with its size field and checksum
    // made to match (so the reader's own length checks answer).
    for (size_t len = 0; len < blob.size(); len += (len < 300 ? 1 : 997)) {
        std::vector<uint8_t> b(blob.begin(), blob.begin() + static_cast<std::ptrdiff_t>(len));
        restore_fails(b, "truncated to " + std::to_string(len));
        if (len >= tandem::kSequenceStateHeaderBytes + 8) {
            for (int k = 0; k < 8; ++k) b[16 + static_cast<size_t>(k)] = static_cast<uint8_t>(static_cast<uint64_t>(len) >> (8 * k));
            tandem::reseal_sequence_state(b);
            restore_fails(b, "truncated to " + std::to_string(len) + ", size and checksum fixed");
        }
    }
    // Absurd counts with everything else consistent: an error, not an allocation.
    for (const size_t field : {size_t{88}, size_t{96}, layer0 + 4}) {
        auto b = blob;
        for (int k = 0; k < 4; ++k) b[field + static_cast<size_t>(k)] = 0xFF;
        b[field + 3] = 0x7F;
        tandem::reseal_sequence_state(b);
        EXPECT_TRUE(contains(restore_fails(b, "field at " + std::to_string(field)), "sequence state"));
    }
    // Not a state at all.
    const std::vector<uint8_t> junk(500, 0x41);
    EXPECT_TRUE(contains(restore_fails(junk, "junk"), "not a Tandem sequence state"));
    // The intact blob still restores.
    EXPECT_EQ(s.restore_sequence(1, blob), a);
}

TEST(SequenceState, ABlobOfAnotherModelOrCacheIsRefused) {
    const Model m(tiny());
    const auto a = m.tok.encode("Once upon a time", true);
    Session s(m.file, m.spec, opts(tandem::model::kCacheF16));
    prefill(s, 0, a);
    const auto blob = s.save_sequence(0, a);
    // Same model, other cache type.
    Session q8(m.file, m.spec, opts(tandem::model::kCacheQ8_0));
    const std::string e = error_of([&] { (void)q8.restore_sequence(0, blob); });
    EXPECT_TRUE(contains(e, "cache type: expected q8_0 (this session's), found f16")) << e;
    // K and V apart: the pair is named.
    Session mixed(m.file, m.spec, opts({tandem::quant::Type::Q5_0, tandem::quant::Type::F16}));
    const std::string em = error_of([&] { (void)mixed.restore_sequence(0, blob); });
    EXPECT_TRUE(contains(em, "cache type: expected q5_0/f16 (this session's), found f16")) << em;
    // A context too small for the positions.
    Session small(m.file, m.spec, opts(tandem::model::kCacheF16, 4, 4));
    EXPECT_TRUE(contains(error_of([&] { (void)small.restore_sequence(0, blob); }), "past this context")) ;
    // Other models: same architecture and shapes, other types (Q8_0); more
    // layers (tiny-llama-b); another architecture (gemma2).
    const std::vector<std::pair<std::string, std::string>> others = {
        {"models/tiny-llama-Q8_0.gguf", "another model"},
        {"models/tiny-llama-b-Q4_K_M.gguf", "another model"},
        {"models/synth-gemma2-Q8_0.gguf", "architecture 'llama', this model is 'gemma2'"},
    };
    for (const auto& [rel, needle] : others) {
        const fs::path p = tandem::testing::shared(rel);
        TANDEM_REQUIRE_SHARED(p);
        const Model other(p);
        Session o(other.file, other.spec, opts(tandem::model::kCacheF16));
        const std::string err = error_of([&] { (void)o.restore_sequence(0, blob); });
        EXPECT_TRUE(contains(err, needle)) << rel << ": " << err;
        EXPECT_EQ(o.seq_pos_max(0), -1) << rel;
    }
}

// The same tensors, types and shapes with other weights: the weights'
// sample tells them apart (tiny-llama-Q4_K_M in tests/data and ../shared
// are one file: equal fingerprints there are expected).
TEST(SequenceState, FingerprintCoversWeights) {
    const Model m(tiny());
    const auto fp = tandem::model_fingerprint(m.file, 32000);
    // A copy of the file with one byte of the first tensor's data changed.
    const fs::path dir = tandem::testing::scratch_dir();
    std::string bytes = tandem::testing::slurp(tiny());
    const auto& t0 = m.file.tensors().front();
    bytes[m.file.data_offset() + t0.offset + 20] ^= 0x01;
    const fs::path copy = dir / "changed.gguf";
    std::ofstream(copy, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    const tandem::gguf::File changed = tandem::gguf::File::open(copy);
    const auto fp2 = tandem::model_fingerprint(changed, 32000);
    EXPECT_EQ(fp.layout_hash, fp2.layout_hash);
    EXPECT_NE(fp.weights_hash, fp2.weights_hash);
    const tandem::model::ModelSpec spec2 = tandem::model::load_model_spec(changed);
    Session s(m.file, m.spec, opts(tandem::model::kCacheF16));
    const auto a = m.tok.encode("Once upon a time", true);
    prefill(s, 0, a);
    const auto blob = s.save_sequence(0, a);
    Session t(changed, spec2, opts(tandem::model::kCacheF16));
    EXPECT_TRUE(contains(error_of([&] { (void)t.restore_sequence(0, blob); }), "different weights"));
    fs::remove_all(dir);
}

TEST(SequenceState, ABlobThatDoesNotFitTheFreeCellsIsRefused) {
    const Model m(tiny());
    std::vector<int32_t> ids;
    for (int i = 0; i < 40; ++i) ids.push_back(100 + i);
    Session s(m.file, m.spec, opts(tandem::model::kCacheF16, 64, 64));
    prefill(s, 0, ids);
    const auto blob = s.save_sequence(0, ids);
    const std::string e = error_of([&] { (void)s.restore_sequence(1, blob); });
    EXPECT_TRUE(contains(e, "does not fit: layer 0 needs 40 cells for sequence 1, 24 are free")) << e;
    EXPECT_EQ(s.seq_pos_max(1), -1);
    EXPECT_EQ(s.seq_pos_max(0), 39);
    // Into the sequence that holds the cells: its own are free to it.
    EXPECT_EQ(s.restore_sequence(0, blob), ids);
    EXPECT_EQ(s.seq_pos_max(0), 39);
}

// gemma2's sliding-window layers keep a ring: a prompt longer than the
// ring wraps it, and the restored ring continues as the original.
TEST(SequenceState, SlidingWindowRingsRestoreBitForBit) {
    const fs::path p = tandem::testing::shared("models/synth-gemma2-Q8_0.gguf");
    TANDEM_REQUIRE_SHARED(p);
    const Model m(p);
    const int64_t window = m.spec.hp.sliding_window;
    ASSERT_GT(window, 0);
    bool has_ring = false;
    for (const auto& l : m.spec.layers) has_ring = has_ring || l.sliding_window;
    ASSERT_TRUE(has_ring);
    const int64_t ub = 8;
    std::vector<int32_t> prompt;
    for (int64_t i = 0; i < window + 3 * ub + 5; ++i) prompt.push_back(static_cast<int32_t>((37 * i + 11) % m.spec.hp.n_vocab));
    for (const auto type : {tandem::model::kCacheF16, tandem::model::kCacheQ8_0}) {
        SCOPED_TRACE(type == tandem::model::kCacheF16 ? "f16" : "q8_0");
        check_round_trip(m, prompt, opts(type, 512, ub, 2), 2 * static_cast<int>(ub));
    }
}

// held_prefix reads the rings: after a long prompt a ring no longer holds
// the window before an early cut, and continuing from there as if it did
// gives other logits; from the prefix held_prefix gives, the logits are
// those of evaluating the whole prompt.
TEST(SequenceState, HeldPrefixIsWhereARingCanContinue) {
    const fs::path p = tandem::testing::shared("models/synth-gemma2-Q8_0.gguf");
    TANDEM_REQUIRE_SHARED(p);
    const Model m(p);
    const int64_t window = m.spec.hp.sliding_window;
    const int64_t ub = 8;
    std::vector<int32_t> prompt;
    for (int64_t i = 0; i < window + 4 * ub; ++i) prompt.push_back(static_cast<int32_t>((53 * i + 5) % m.spec.hp.n_vocab));
    const auto n = static_cast<int32_t>(prompt.size());
    // Q8_0: batch shapes move logits by ~1e-5, a wrong window by O(1).
    const SessionOptions o = opts(tandem::model::kCacheQ8_0, 512, ub, 1);
    Session full(m.file, m.spec, o);
    std::vector<float> want;
    full.eval(prompt, false, want);
    EXPECT_EQ(full.held_prefix(0, n), n);
    const auto blob = full.save_sequence(0, prompt);
    const auto max_diff = [](const std::vector<float>& x, const std::vector<float>& y) {
        float d = 0;
        for (size_t i = 0; i < x.size(); ++i) d = std::max(d, std::fabs(x[i] - y[i]));
        return d;
    };
    const auto from = [&](int32_t keep) {
        Session s(m.file, m.spec, o);
        s.restore_sequence(0, blob);
        s.remove_positions(0, keep, -1);
        std::vector<float> got;
        s.eval(std::span(prompt.data() + keep, prompt.size() - static_cast<size_t>(keep)), false, got);
        return max_diff(want, got);
    };
    const int32_t cut = 4;  // the ring dropped positions [0, n - window - ub) and more
    Session probe(m.file, m.spec, o);
    probe.restore_sequence(0, blob);
    const int32_t held = probe.held_prefix(0, cut);
    EXPECT_EQ(held, 0);
    EXPECT_LE(from(held), 1e-3f);
    EXPECT_GT(from(cut), 1e-2f) << "continuing without the window must show";
    // Near the end the window is still there.
    const int32_t late = n - 2;
    EXPECT_EQ(probe.held_prefix(0, late), late);
    EXPECT_LE(from(late), 1e-3f);
}

// ---- tandem run --prompt-cache, --parse-special, the end-of-generation line

namespace {

using tandem::testing::run_tandem;
using tandem::testing::shell_quote;

std::string q(const fs::path& p) { return shell_quote(p.string()); }

std::string run_args(const fs::path& model, const std::string& prompt, const std::string& extra) {
    return "run -m " + q(model) + " -p " + shell_quote(prompt) + " -n 12 --temp 0 -c 256 " + extra;
}

}  // namespace

TEST(PromptCache, SecondRunReusesThePromptAndPrintsTheSameText) {
    const fs::path dir = tandem::testing::scratch_dir();
    const fs::path model = tiny();
    const fs::path cache = dir / "prompt.bin";
    const std::string prompt = "Once upon a time, there was a little robot who wanted to learn";
    const auto plain = run_tandem(run_args(model, prompt, ""), dir);
    ASSERT_EQ(plain.exit_code, 0) << plain.err;

    const auto first = run_tandem(run_args(model, prompt, "--prompt-cache " + q(cache)), dir);
    ASSERT_EQ(first.exit_code, 0) << first.err;
    EXPECT_TRUE(contains(first.err, "does not exist; it will be created")) << first.err;
    EXPECT_EQ(first.out, plain.out);
    ASSERT_TRUE(fs::exists(cache));
    EXPECT_TRUE(tandem::testing::temp_files_of(cache).empty());

    const Model m(model);
    const size_t n = m.tok.encode(prompt, true).size();
    const auto second = run_tandem(run_args(model, prompt, "--prompt-cache " + q(cache)), dir);
    ASSERT_EQ(second.exit_code, 0) << second.err;
    EXPECT_TRUE(contains(second.err, "prompt cache: reused " + std::to_string(n - 1) + " of the prompt's " +
                                         std::to_string(n) + " tokens"))
        << second.err;
    EXPECT_TRUE(contains(second.err, "prompt: 1 tokens")) << second.err;
    EXPECT_EQ(second.out, plain.out);

    // A longer prompt: its common prefix with the cached one is reused.
    const std::string longer = prompt + " how to paint the sky.";
    const auto plain_longer = run_tandem(run_args(model, longer, ""), dir);
    const auto third = run_tandem(run_args(model, longer, "--prompt-cache " + q(cache)), dir);
    ASSERT_EQ(third.exit_code, 0) << third.err;
    EXPECT_TRUE(contains(third.err, "prompt cache: reused ")) << third.err;
    EXPECT_FALSE(contains(third.err, "reused 0 ")) << third.err;
    EXPECT_EQ(third.out, plain_longer.out);

    // --prompt-cache-ro: used, not updated.
    const std::string saved = tandem::testing::slurp(cache);
    const auto ro = run_tandem(run_args(model, "Something else entirely", "--prompt-cache " + q(cache) + " --prompt-cache-ro"), dir);
    ASSERT_EQ(ro.exit_code, 0) << ro.err;
    EXPECT_TRUE(contains(ro.err, "prompt cache: reused 1 ")) << ro.err;  // BOS only
    EXPECT_EQ(tandem::testing::slurp(cache), saved);
    fs::remove_all(dir);
}

TEST(PromptCache, AFileOfAnotherModelIsOneLineAndExit1) {
    const fs::path other = tandem::testing::shared("models/tiny-llama-Q8_0.gguf");
    TANDEM_REQUIRE_SHARED(other);
    const fs::path dir = tandem::testing::scratch_dir();
    const fs::path cache = dir / "prompt.bin";
    ASSERT_EQ(run_tandem(run_args(tiny(), "Hello there", "--prompt-cache " + q(cache)), dir).exit_code, 0);
    const std::string saved = tandem::testing::slurp(cache);
    const auto r = run_tandem(run_args(other, "Hello there", "--prompt-cache " + q(cache)), dir);
    tandem::testing::expect_one_line_error(r, "sequence state for another model");
    EXPECT_TRUE(contains(r.err, cache.string())) << r.err;
    EXPECT_TRUE(contains(r.err, "delete the file")) << r.err;
    EXPECT_EQ(tandem::testing::slurp(cache), saved);
    // Junk, and the model itself given as the cache (never overwritten).
    std::ofstream(dir / "junk.bin") << "not a cache at all";
    tandem::testing::expect_one_line_error(
        run_tandem(run_args(tiny(), "Hello", "--prompt-cache " + q(dir / "junk.bin")), dir), "not a Tandem sequence state");
    const fs::path model_copy = dir / "m.gguf";
    fs::copy_file(tiny(), model_copy);
    const std::string model_bytes = tandem::testing::slurp(model_copy);
    const auto self = run_tandem(run_args(model_copy, "Hello", "--prompt-cache " + q(model_copy)), dir);
    EXPECT_EQ(self.exit_code, 1) << self.err;
    EXPECT_EQ(tandem::testing::slurp(model_copy), model_bytes);
    fs::remove_all(dir);
}

// A write that fails (the file size limit, RLIMIT_FSIZE, under the new
// state's size) leaves the old cache whole and no temp file.
TEST(PromptCache, AFailedWriteLeavesTheOldFile) {
    const fs::path dir = tandem::testing::scratch_dir();
    const fs::path cache = dir / "prompt.bin";
    ASSERT_EQ(run_tandem(run_args(tiny(), "Hi", "--prompt-cache " + q(cache)), dir).exit_code, 0);
    const std::string saved = tandem::testing::slurp(cache);
    const std::string longer(600, 'a');
    const std::string cmd = "trap '' XFSZ; ulimit -f " + std::to_string(saved.size() / 1024 + 2) + "; " +
                            shell_quote(tandem::testing::tandem_binary().string()) + " " +
                            run_args(tiny(), "Hi " + longer, "--prompt-cache " + q(cache)) + " >/dev/null 2>" +
                            q(dir / "err.txt");
    const int status = std::system(("bash -c " + shell_quote(cmd)).c_str());
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 1) << tandem::testing::slurp(dir / "err.txt");
    EXPECT_TRUE(contains(tandem::testing::slurp(dir / "err.txt"), cache.string()));
    EXPECT_EQ(tandem::testing::slurp(cache), saved);
    EXPECT_TRUE(tandem::testing::temp_files_of(cache).empty());
    fs::remove_all(dir);
}

TEST(RunFlags, ParseSpecialTokenizesControlTokens) {
    const fs::path dir = tandem::testing::scratch_dir();
    const Model m(tiny());
    const std::string prompt = "</s>hello";
    const size_t plain = m.tok.encode(prompt, true).size();
    const size_t special = m.tok.encode(prompt, true, true).size();
    ASSERT_LT(special, plain);
    const auto a = run_tandem("run -m " + q(tiny()) + " -p " + shell_quote(prompt) + " -n 0", dir);
    const auto b = run_tandem("run -m " + q(tiny()) + " -p " + shell_quote(prompt) + " -n 0 --parse-special", dir);
    ASSERT_EQ(a.exit_code, 0) << a.err;
    ASSERT_EQ(b.exit_code, 0) << b.err;
    EXPECT_TRUE(contains(a.err, "prompt: " + std::to_string(plain) + " tokens")) << a.err;
    EXPECT_TRUE(contains(b.err, "prompt: " + std::to_string(special) + " tokens")) << b.err;
    fs::remove_all(dir);
}

// A copy of the tiny model whose end-of-generation token is the one greedy
// decoding picks first: generation ends at once, and says so.
TEST(RunFlags, GenerationThatEndsAtOnceSaysWhy) {
    const fs::path dir = tandem::testing::scratch_dir();
    const Model m(tiny());
    const std::string prompt = "Once upon a time";
    int32_t first = 0;
    {
        Session s(m.file, m.spec, opts(tandem::model::kCacheF16));
        std::vector<float> logits;
        s.eval(m.tok.encode(prompt, true), false, logits);
        first = static_cast<int32_t>(argmax(logits.data(), logits.size()));
    }
    ASSERT_FALSE(m.tok.is_end_of_generation(first));
    const fs::path copy = dir / "eos.gguf";
    {
        tandem::gguf::Writer w(copy, m.file.alignment());
        for (const auto& kv : m.file.metadata()) {
            w.set(kv.key, kv.key == "tokenizer.ggml.eos_token_id" ? tandem::gguf::Value::u32(static_cast<uint32_t>(first))
                                                                 : kv.value);
        }
        w.set("tokenizer.ggml.eos_token_id", tandem::gguf::Value::u32(static_cast<uint32_t>(first)));
        for (const auto& t : m.file.tensors()) w.add_tensor({t.name, t.shape, t.type});
        w.write_header();
        for (const auto& t : m.file.tensors()) w.write_tensor_data(m.file.tensor_data(t));
        w.finish();
    }
    const std::string args = "run -m " + q(copy) + " -p " + shell_quote(prompt) + " -n 8 --temp 0";
    const auto r = run_tandem(args, dir);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(contains(r.err, "generation ended at once: the model's first token was end-of-generation (")) << r.err;
    EXPECT_TRUE(contains(r.err, ", id " + std::to_string(first) + "); --ignore-eos keeps going")) << r.err;
    EXPECT_TRUE(contains(r.err, "generation: 0 tokens")) << r.err;
    EXPECT_TRUE(contains(r.err, "stopped at end-of-generation token")) << r.err;
    const auto ignored = run_tandem(args + " --ignore-eos", dir);
    ASSERT_EQ(ignored.exit_code, 0) << ignored.err;
    EXPECT_FALSE(contains(ignored.err, "generation ended at once")) << ignored.err;
    EXPECT_FALSE(contains(ignored.err, "stopped at end-of-generation")) << ignored.err;
    EXPECT_TRUE(contains(ignored.err, "generation: 8 tokens")) << ignored.err;
    fs::remove_all(dir);
}

// Caches split between the host and the stand-in accelerator ("cpu2"):
// each layer's rows are read from and written to its own device.
TEST(SequenceState, RoundTripAcrossTheStandInSplit) {
    const Model m(tiny());
    const auto prompt = m.tok.encode("Once upon a time, there was a little robot who wanted to learn.", true);
    SessionOptions o = opts(tandem::model::kCacheF16);
    o.device = "cpu2";
    o.n_gpu_layers = 2;
    check_round_trip(m, prompt, o, 8);
    // A blob saved across the split restores into a CPU-only session.
    const std::span<const int32_t> head(prompt.data(), prompt.size() - 1);
    Session split(m.file, m.spec, o);
    prefill(split, 0, head);
    const auto blob = split.save_sequence(0, head);
    Session cpu(m.file, m.spec, opts(tandem::model::kCacheF16));
    prefill(cpu, 0, head);
    EXPECT_EQ(cpu.save_sequence(0, head), blob) << "the stand-in stores the host's rows, bit for bit";
}

// The CUDA device's rows copied to the host and back: a GPU session
// restored continues as the uninterrupted GPU session, and a state saved
// on the GPU restores into a CPU session; also with K and V of other
// types (rows of other sizes on the two sides). Skips without a GPU.
TEST(SequenceState, CudaRoundTrip) {
    std::string why;
    const auto devices = tandem::cuda::list_devices(&why);
    if (devices.empty()) TANDEM_CUDA_SKIP("no GPU: " << why);
    const Model m(tiny());
    const auto prompt = m.tok.encode("Once upon a time, there was a little robot who wanted to learn.", true);
    const tandem::model::CacheType mixed{tandem::quant::Type::Q4_1, tandem::quant::Type::F16};
    for (const auto type : {tandem::model::kCacheF16, tandem::model::kCacheQ8_0, mixed}) {
        SCOPED_TRACE(tandem::model::cache_type_name(type));
        SessionOptions o = opts(type);
        o.device = "cuda" + std::to_string(devices[0].index);
        // Every layer's cache on the device; the output head (32000 rows,
        // three quarters of an emulated step) stays on the CPU.
        o.n_gpu_layers = m.spec.hp.n_layer;
        check_round_trip(m, prompt, o, 8);
        const std::span<const int32_t> head(prompt.data(), prompt.size() - 1);
        Session gpu(m.file, m.spec, o);
        prefill(gpu, 0, head);
        const auto blob = gpu.save_sequence(0, head);
        Session cpu(m.file, m.spec, opts(type));
        EXPECT_EQ(cpu.restore_sequence(0, blob), std::vector<int32_t>(head.begin(), head.end()));
        Session cpu_ref(m.file, m.spec, opts(type));
        prefill(cpu_ref, 0, head);
        const auto want = continue_greedy(cpu_ref, 0, static_cast<int32_t>(head.size()), prompt.back(), 0);
        const auto got = continue_greedy(cpu, 0, static_cast<int32_t>(head.size()), prompt.back(), 0);
        float d = 0;
        for (size_t i = 0; i < want[0].size(); ++i) d = std::max(d, std::fabs(want[0][i] - got[0][i]));
        EXPECT_LE(d, 0.5f) << "GPU rows read as the CPU's (the types' rounding apart)";
    }
}

// deepseek2's cache rows are the latent and its rotated part, no V: the
// rows round-trip on the host, across the stand-in split, and on the CUDA
// device when there is one (where a restored sequence continues as the
// uninterrupted one).
TEST(SequenceState, LatentRowsRoundTrip) {
    const auto path = tandem::testing::shared("models/synth-deepseek2-Q8_0.gguf");
    TANDEM_REQUIRE_SHARED(path);
    const Model m(path);
    const auto prompt = m.tok.encode("Once upon a time, there was a little robot who wanted to learn.", true);
    for (const auto type : {tandem::model::kCacheF16, tandem::model::kCacheQ8_0}) {
        SessionOptions o = opts(type);
        check_round_trip(m, prompt, o, 6);
        o.device = "cpu2";
        o.n_gpu_layers = 2;
        check_round_trip(m, prompt, o, 6);
    }
    std::string why;
    const auto devices = tandem::cuda::list_devices(&why);
    if (devices.empty()) return;  // the CUDA half needs a device (the emulator has one)
    SessionOptions o = opts(tandem::model::kCacheF16);
    o.device = "cuda" + std::to_string(devices[0].index);
    o.n_gpu_layers = m.spec.hp.n_layer;
    check_round_trip(m, prompt, o, 6);
}
