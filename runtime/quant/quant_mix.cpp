// Per-tensor type choice for the quantization mixes, following
// llama_tensor_get_type in llama.cpp's src/llama-quant.cpp. The rules are
// data: a table of (tensor role, mixes, condition, type) rows that is read
// top to bottom, the first match winning, exactly as llama.cpp's else-if
// chain for each tensor category does. The few adjustments that apply on
// top of a rule's result (70B and 8-expert attn_v) and the fallback for
// rows that do not fit a type's block are kept as separate small steps.
//
// Mixtures of experts follow the same rows: the 3-D expert tensors
// (ffn_{gate,up,down}_exps) fall in the ffn_gate/ffn_up/ffn_down roles, so
// Q4_K_M gives ffn_down_exps Q6_K in the use_more_bits layers, counted per
// layer over block_count as llama.cpp does for n_expert > 1 (it reads the
// layer from the name there and refuses a name without one); the router
// (ffn_gate_inp) is never quantized; models with exactly 8 experts
// (Mixtral) get Q8_0 attn_v and attn_k and Q5_K attn_output.
//
// The six lowest i-quant mixes (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S,
// IQ2_M: kVeryLowBit) have a branch of their own in llama.cpp: their
// attn_v gets Q4_K with GQA >= 4 or 4+ experts, else Q2_K (IQ3_S for IQ2_S
// and IQ2_M), the first eighth of ffn_down the same low type, 8-expert
// attn_k Q4_K rather than Q8_0, and neither the 70B nor the 8-expert attn_v
// adjustment. Their head and the IQ3_XXS head get Q5_K instead of Q6_K.
//
// Differences from llama.cpp, on purpose:
//  - The layer index comes from the "blk.N." name instead of llama.cpp's
//    running counters for dense models; for a model whose every layer has
//    attention and an FFN (all the models Tandem runs) the two are the
//    same, because llama.cpp visits tensors sorted by layer. (kVeryLowBit's
//    ffn_down counter also runs per tensor on MoE models, twice a layer
//    where a shared expert sits beside the routed ones; here it is the layer.)
//  - Falcon-specific branches are left out (Tandem runs Llama-family
//    models), and so are the mixes Tandem does not read (Q2_K_S, TQ1_0,
//    TQ2_0).
//  - Tensors that are never quantized come back as F32 (the header's
//    contract) where llama.cpp keeps their stored type; both are lossless.
//  - A row too short for even the fallback's block gets F16, where
//    llama.cpp either does the same or gives up.
#include "runtime/quant/quant_mix.h"

#include <fmt/format.h>

#include "runtime/common/ascii.h"
#include "runtime/common/error.h"
#include "runtime/model/model_shapes.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <initializer_list>
#include <iterator>
#include <string_view>

namespace tandem::quant {
namespace {

constexpr std::array kMixes = {
    MixInfo{FileType::Q8_0, "Q8_0", Type::Q8_0, "8.50 bpw, nearly indistinguishable from F16"},
    MixInfo{FileType::Q6_K, "Q6_K", Type::Q6_K, "6.56 bpw, very low quality loss"},
    MixInfo{FileType::Q5_K_M, "Q5_K_M", Type::Q5_K, "~5.7 bpw, Q5_K with Q6_K on half of attn_v/ffn_down"},
    MixInfo{FileType::Q5_K_S, "Q5_K_S", Type::Q5_K, "~5.5 bpw, Q5_K throughout"},
    MixInfo{FileType::Q4_K_M, "Q4_K_M", Type::Q4_K, "~4.9 bpw, Q4_K with Q6_K on half of attn_v/ffn_down (recommended)"},
    MixInfo{FileType::Q4_K_S, "Q4_K_S", Type::Q4_K, "~4.6 bpw, Q4_K with Q5_K in the first layers"},
    MixInfo{FileType::Q3_K_L, "Q3_K_L", Type::Q3_K, "~4.3 bpw, Q3_K with Q5_K attn_v/attn_output/ffn_down"},
    MixInfo{FileType::Q3_K_M, "Q3_K_M", Type::Q3_K, "~3.9 bpw, Q3_K with Q4_K/Q5_K attn_v, attn_output, ffn_down"},
    MixInfo{FileType::Q3_K_S, "Q3_K_S", Type::Q3_K, "~3.5 bpw, Q3_K throughout, high quality loss"},
    MixInfo{FileType::Q2_K, "Q2_K", Type::Q2_K, "~3.0 bpw, Q2_K with Q3_K/Q4_K attn_v, attn_output, ffn_down"},
    // The i-quants: importance-weighted codebooks. bpw as llama-quantize
    // states them.
    MixInfo{FileType::IQ4_XS, "IQ4_XS", Type::IQ4_XS, "4.25 bpw non-linear, IQ4_XS throughout"},
    MixInfo{FileType::IQ4_NL, "IQ4_NL", Type::IQ4_NL, "4.50 bpw non-linear, IQ4_NL throughout (32-weight blocks)"},
    MixInfo{FileType::IQ3_M, "IQ3_M", Type::IQ3_S, "~3.66 bpw, IQ3_S with Q4_K attn_v, attn_output, first ffn_down"},
    MixInfo{FileType::IQ3_S, "IQ3_S", Type::IQ3_S, "~3.44 bpw, IQ3_S throughout"},
    MixInfo{FileType::IQ3_XS, "IQ3_XS", Type::IQ3_S, "~3.3 bpw, IQ3_S with IQ3_XXS attn_q/attn_k, middle ffn_gate/up"},
    MixInfo{FileType::IQ3_XXS, "IQ3_XXS", Type::IQ3_XXS, "~3.06 bpw, IQ3_XXS with IQ2_S attn_q/attn_k, IQ3_S attn_output"},
    MixInfo{FileType::IQ2_M, "IQ2_M", Type::IQ2_S, "~2.7 bpw, IQ2_S with IQ3_S attn_v, attn_output, first ffn_down"},
    MixInfo{FileType::IQ2_S, "IQ2_S", Type::IQ2_XS, "~2.5 bpw, IQ2_XS with IQ3_S attn_v, attn_output, first ffn_down"},
    MixInfo{FileType::IQ2_XS, "IQ2_XS", Type::IQ2_XS, "~2.31 bpw, IQ2_XS with Q2_K attn_v and first ffn_down"},
    MixInfo{FileType::IQ2_XXS, "IQ2_XXS", Type::IQ2_XXS, "~2.06 bpw, IQ2_XXS with Q2_K attn_v and first ffn_down"},
    MixInfo{FileType::IQ1_M, "IQ1_M", Type::IQ1_M, "~1.75 bpw, IQ1_M with IQ2_XXS attn_output, Q2_K attn_v"},
    MixInfo{FileType::IQ1_S, "IQ1_S", Type::IQ1_S, "~1.56 bpw, IQ1_S with IQ2_XXS attn_output, Q2_K attn_v"},
    MixInfo{FileType::MXFP4_MOE, "MXFP4_MOE", Type::MXFP4, "~4.25 bpw MXFP4 experts, Q8_0 for every other weight (gpt-oss)"},
    MixInfo{FileType::Q4_0, "Q4_0", Type::Q4_0, "4.50 bpw legacy format"},
    MixInfo{FileType::Q4_1, "Q4_1", Type::Q4_1, "5.00 bpw legacy format"},
    MixInfo{FileType::Q5_0, "Q5_0", Type::Q5_0, "5.50 bpw legacy format"},
    MixInfo{FileType::Q5_1, "Q5_1", Type::Q5_1, "6.00 bpw legacy format"},
    MixInfo{FileType::MOSTLY_F16, "F16", Type::F16, "16 bpw, no quantization"},
    MixInfo{FileType::MOSTLY_BF16, "BF16", Type::BF16, "16 bpw bfloat16, no quantization"},
    MixInfo{FileType::ALL_F32, "F32", Type::F32, "32 bpw, no quantization"},
};


bool contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

// ---- Which tensors are quantized at all ------------------------------------

// 2-D weights that still stay unquantized: small, or read in ways the
// quantized kernels do not serve (llama.cpp's tensor_allows_quantization).
constexpr std::string_view kNeverQuantized[] = {
    "_norm.weight",            // norms (some are stored 2-D)
    "ffn_gate_inp.weight",     // MoE router: tiny and precision-sensitive
    "ffn_gate_tid2eid.weight", // integer routing table
    "altup", "laurel", "per_layer_model_proj",  // Gemma-3n small projections
    "position_embd.weight", "token_types.weight",  // BERT-style embeddings
    "ssm_conv1d", "shortconv.conv.weight",        // small conv weights
    "indexer.k_proj.weight", "indexer.q_proj.weight",
    "time_mix_first.weight", "time_mix_w0.weight", "time_mix_w1.weight", "time_mix_w2.weight",
    "time_mix_v0.weight", "time_mix_v1.weight", "time_mix_v2.weight", "time_mix_a0.weight",
    "time_mix_a1.weight", "time_mix_a2.weight", "time_mix_g1.weight", "time_mix_g2.weight",
    "time_mix_decay_w", "time_mix_lerp_fused.weight",  // RWKV small 2-D weights
    "attn_rel_b.weight",                              // T5 relative position bias
    ".patch_embd", ".patch_merger", ".rel_pos",       // vision encoders
};

// ggml counts dimensions up to the last one larger than 1, so [n, 1] is 1-D.
int effective_dims(std::span<const int64_t> shape) {
    for (int i = static_cast<int>(shape.size()) - 1; i >= 1; --i) {
        if (shape[static_cast<size_t>(i)] > 1) return i + 1;
    }
    return 1;
}

bool allows_quantization(std::string_view name, std::span<const int64_t> shape) {
    if (effective_dims(shape) < 2) return false;
    if (!name.ends_with("weight")) return false;
    return std::none_of(std::begin(kNeverQuantized), std::end(kNeverQuantized),
                        [&](std::string_view part) { return contains(name, part); });
}

// ---- Tensor roles ------------------------------------------------------------

enum class Role { Output, TokenEmbd, AttnV, AttnK, AttnQ, AttnOutput, FfnUp, FfnGate, FfnDown, Other };

struct RolePattern {
    std::string_view part;
    bool exact;
    Role role;
};

// Checked in order: the fused and MLA value projections (attn_qkv,
// attn_kv_b) count as attn_v, as in current llama.cpp, because they carry
// the V weights that are most sensitive to quantization. "ffn_up" etc. also
// match the expert (_exps) and shared-expert (_shexp) variants.
constexpr std::array kRolePatterns = {
    RolePattern{"output.weight", true, Role::Output},
    RolePattern{"token_embd.weight", true, Role::TokenEmbd},
    RolePattern{"per_layer_token_embd.weight", true, Role::TokenEmbd},
    RolePattern{"attn_qkv.weight", false, Role::AttnV},
    RolePattern{"attn_kv_b.weight", false, Role::AttnV},
    RolePattern{"attn_v.weight", false, Role::AttnV},
    RolePattern{"attn_k.weight", false, Role::AttnK},
    RolePattern{"attn_q.weight", false, Role::AttnQ},
    RolePattern{"attn_output.weight", false, Role::AttnOutput},
    RolePattern{"ffn_up", false, Role::FfnUp},
    RolePattern{"ffn_gate", false, Role::FfnGate},
    RolePattern{"ffn_down", false, Role::FfnDown},
};

Role role_of(std::string_view name) {
    for (const auto& p : kRolePatterns) {
        if (p.exact ? name == p.part : contains(name, p.part)) return p.role;
    }
    return Role::Other;
}

// ---- The rule table ----------------------------------------------------------

// A set of mixes: llama.cpp's `ftype == A || ftype == B` as one value.
class MixSet {
public:
    constexpr MixSet(FileType ft) : bits_(bit(ft)) {}  // one mix is a set of one
    constexpr MixSet(std::initializer_list<FileType> fts) {
        for (FileType ft : fts) bits_ |= bit(ft);
    }
    static constexpr MixSet all() { return MixSet(~uint64_t{0}); }
    constexpr bool has(FileType ft) const { return (bits_ & bit(ft)) != 0; }
    constexpr MixSet operator|(MixSet o) const { return MixSet(bits_ | o.bits_); }

private:
    explicit constexpr MixSet(uint64_t bits) : bits_(bits) {}
    static constexpr uint64_t bit(FileType ft) { return uint64_t{1} << static_cast<uint32_t>(ft); }
    uint64_t bits_ = 0;
};
static_assert(static_cast<uint32_t>(FileType::MOSTLY_BF16) < 64, "MixSet holds file types below 64");

// llama.cpp's branch of its own for the lowest-bit i-quant mixes.
constexpr MixSet kVeryLowBit = {FileType::IQ2_XXS, FileType::IQ2_XS, FileType::IQ2_S,
                                FileType::IQ2_M,   FileType::IQ1_S,  FileType::IQ1_M};
// Mixes whose head gets Q5_K rather than Q6_K.
constexpr MixSet kQ5KHead = kVeryLowBit | FileType::IQ3_XXS;
// Mixes whose attn_output an 8-expert model raises to Q5_K.
constexpr MixSet kMoe8AttnOutputQ5K = kVeryLowBit | MixSet{FileType::Q2_K,   FileType::Q3_K_S, FileType::Q3_K_M,
                                                            FileType::Q4_K_S, FileType::Q4_K_M, FileType::IQ3_XXS,
                                                            FileType::IQ3_XS, FileType::IQ3_S,  FileType::IQ3_M,
                                                            FileType::IQ4_NL, FileType::IQ4_XS};

struct RuleContext {
    int64_t layer;    // -1: unknown, layer-dependent conditions are false
    int64_t n_layer;
    int64_t n_gqa;    // query heads per KV head
    int64_t n_expert;
    bool imatrix;
};

using Condition = bool (*)(const RuleContext&);

// llama.cpp's use_more_bits: the first and last eighth of the layers and
// every third layer in between. These layers' attn_v and ffn_down matter
// most to perplexity, so the _M mixes spend their extra bits there.
bool use_more_bits(const RuleContext& c) {
    if (c.layer < 0) return false;
    const int64_t i = c.layer, n = c.n_layer;
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}
bool always(const RuleContext&) { return true; }
bool gqa_at_least_4(const RuleContext& c) { return c.n_gqa >= 4; }
bool gqa_or_experts_at_least_4(const RuleContext& c) { return c.n_gqa >= 4 || c.n_expert >= 4; }
bool eight_experts(const RuleContext& c) { return c.n_expert == 8; }
bool not_eight_experts(const RuleContext& c) { return c.n_expert != 8; }
bool first_2_layers(const RuleContext& c) { return c.layer >= 0 && c.layer < 2; }
bool first_4_layers(const RuleContext& c) { return c.layer >= 0 && c.layer < 4; }
bool first_eighth(const RuleContext& c) { return c.layer >= 0 && c.layer < c.n_layer / 8; }
bool first_sixteenth(const RuleContext& c) { return c.layer >= 0 && c.layer < c.n_layer / 16; }
bool middle_layers(const RuleContext& c) { return c.layer >= c.n_layer / 8 && c.layer < 7 * c.n_layer / 8; }
bool first_eighth_or_moe8_more_bits(const RuleContext& c) {
    return first_eighth(c) || (eight_experts(c) && use_more_bits(c));
}
bool no_imatrix(const RuleContext& c) { return !c.imatrix; }
bool no_imatrix_first_eighth(const RuleContext& c) { return !c.imatrix && first_eighth(c); }
bool imatrix_first_eighth(const RuleContext& c) { return c.imatrix && first_eighth(c); }

struct Rule {
    Role role;
    MixSet mixes;
    Condition when;
    Type type;
};

// First match wins within a role. A mix with no matching row for a role
// keeps its base type. Rows come from llama_tensor_get_type_impl,
// non-Falcon branches; the order of rows for the same mix is llama.cpp's.
constexpr std::array kRules = {
    // Untied token_embd (a tied one is the head, below).
    Rule{Role::TokenEmbd, {FileType::IQ2_XXS, FileType::IQ2_XS, FileType::IQ1_S, FileType::IQ1_M}, always, Type::Q2_K},
    Rule{Role::TokenEmbd, {FileType::IQ2_S, FileType::IQ2_M, FileType::IQ3_XXS}, always, Type::IQ3_S},

    // attn_v (and attn_qkv / attn_kv_b).
    Rule{Role::AttnV, kVeryLowBit, gqa_or_experts_at_least_4, Type::Q4_K},
    Rule{Role::AttnV, {FileType::IQ2_S, FileType::IQ2_M}, always, Type::IQ3_S},
    Rule{Role::AttnV, kVeryLowBit, always, Type::Q2_K},
    // Q2_K: with GQA >= 4 attn_v is a quarter of attn_q or less, so Q4_K is cheap.
    Rule{Role::AttnV, FileType::Q2_K, gqa_at_least_4, Type::Q4_K},
    Rule{Role::AttnV, FileType::Q2_K, always, Type::Q3_K},
    Rule{Role::AttnV, FileType::IQ3_XXS, gqa_at_least_4, Type::Q4_K},
    Rule{Role::AttnV, FileType::IQ3_XXS, no_imatrix, Type::IQ3_S},
    Rule{Role::AttnV, {FileType::IQ3_XS, FileType::IQ3_S}, gqa_at_least_4, Type::Q4_K},
    Rule{Role::AttnV, FileType::IQ3_M, always, Type::Q4_K},
    Rule{Role::AttnV, FileType::Q3_K_M, first_2_layers, Type::Q5_K},
    Rule{Role::AttnV, FileType::Q3_K_M, always, Type::Q4_K},
    Rule{Role::AttnV, FileType::Q3_K_L, always, Type::Q5_K},
    Rule{Role::AttnV, {FileType::IQ4_NL, FileType::IQ4_XS}, gqa_at_least_4, Type::Q5_K},
    Rule{Role::AttnV, {FileType::Q4_K_M, FileType::Q5_K_M}, use_more_bits, Type::Q6_K},
    Rule{Role::AttnV, FileType::Q4_K_S, first_4_layers, Type::Q5_K},

    // attn_k: 8-expert models share K across the experts, so it is cheap to raise.
    Rule{Role::AttnK, kVeryLowBit, eight_experts, Type::Q4_K},
    Rule{Role::AttnK, MixSet::all(), eight_experts, Type::Q8_0},
    Rule{Role::AttnK, FileType::IQ3_XS, always, Type::IQ3_XXS},
    Rule{Role::AttnK, FileType::IQ3_XXS, always, Type::IQ2_S},

    // attn_q.
    Rule{Role::AttnQ, FileType::IQ3_XS, always, Type::IQ3_XXS},
    Rule{Role::AttnQ, FileType::IQ3_XXS, always, Type::IQ2_S},

    // ffn_down.
    Rule{Role::FfnDown, {FileType::IQ2_S, FileType::IQ2_M}, first_eighth, Type::IQ3_S},
    Rule{Role::FfnDown, kVeryLowBit, first_eighth, Type::Q2_K},
    Rule{Role::FfnDown, FileType::Q2_K, always, Type::Q3_K},
    Rule{Role::FfnDown, FileType::IQ3_XXS, no_imatrix_first_eighth, Type::Q4_K},
    Rule{Role::FfnDown, FileType::IQ3_XXS, no_imatrix, Type::Q3_K},
    Rule{Role::FfnDown, FileType::Q3_K_M, first_sixteenth, Type::Q5_K},
    Rule{Role::FfnDown, FileType::Q3_K_M, always, Type::Q4_K},
    Rule{Role::FfnDown, FileType::IQ3_M, first_eighth_or_moe8_more_bits, Type::Q4_K},
    Rule{Role::FfnDown, FileType::Q3_K_L, always, Type::Q5_K},
    Rule{Role::FfnDown, {FileType::Q4_K_M, FileType::Q5_K_M}, use_more_bits, Type::Q6_K},
    Rule{Role::FfnDown, {FileType::IQ4_NL, FileType::IQ4_XS}, no_imatrix_first_eighth, Type::Q5_K},
    Rule{Role::FfnDown, FileType::Q4_K_S, first_eighth, Type::Q5_K},
    // With an imatrix the first ffn_down layers of Q4_0/Q5_0 can still go
    // wrong; llama.cpp only guards them then, to keep the old files as they were.
    Rule{Role::FfnDown, FileType::Q4_0, imatrix_first_eighth, Type::Q4_1},
    Rule{Role::FfnDown, FileType::Q5_0, imatrix_first_eighth, Type::Q5_1},

    // attn_output. Mixtral-style 8-expert models: attention is a small
    // share of the weights, so the low-bit mixes raise it to Q5_K.
    Rule{Role::AttnOutput, kMoe8AttnOutputQ5K, eight_experts, Type::Q5_K},
    Rule{Role::AttnOutput, FileType::Q2_K, not_eight_experts, Type::Q3_K},
    Rule{Role::AttnOutput, FileType::IQ3_XXS, not_eight_experts, Type::IQ3_S},
    Rule{Role::AttnOutput, {FileType::Q3_K_M, FileType::IQ3_M}, not_eight_experts, Type::Q4_K},
    Rule{Role::AttnOutput, FileType::Q3_K_L, not_eight_experts, Type::Q5_K},
    Rule{Role::AttnOutput, {FileType::IQ1_S, FileType::IQ1_M}, not_eight_experts, Type::IQ2_XXS},
    Rule{Role::AttnOutput, {FileType::IQ2_S, FileType::IQ2_M}, not_eight_experts, Type::IQ3_S},

    // ffn_gate / ffn_up: IQ3_XS keeps IQ3_S at both ends of the stack only.
    Rule{Role::FfnGate, FileType::IQ3_XS, middle_layers, Type::IQ3_XXS},
    Rule{Role::FfnUp, FileType::IQ3_XS, middle_layers, Type::IQ3_XXS},
};

// A row that is not a multiple of a type's block gets the nearest type
// with smaller blocks (llama.cpp's tensor_type_fallback): the 256-weight
// i-quants IQ4_NL, the K-quants a legacy 32-block type (some llama.cpp
// versions gave Q2_K/Q3_K IQ4_NL; the current one gives Q4_0).
struct Fallback {
    Type from;
    Type to;
};
constexpr std::array kFallbacks = {
    Fallback{Type::IQ1_S, Type::IQ4_NL},   Fallback{Type::IQ1_M, Type::IQ4_NL}, Fallback{Type::IQ2_XXS, Type::IQ4_NL},
    Fallback{Type::IQ2_XS, Type::IQ4_NL},  Fallback{Type::IQ2_S, Type::IQ4_NL}, Fallback{Type::IQ3_XXS, Type::IQ4_NL},
    Fallback{Type::IQ3_S, Type::IQ4_NL},   Fallback{Type::IQ4_XS, Type::IQ4_NL},
    Fallback{Type::Q2_K, Type::Q4_0},      Fallback{Type::Q3_K, Type::Q4_0},    Fallback{Type::Q4_K, Type::Q5_0},
    Fallback{Type::Q5_K, Type::Q5_1},      Fallback{Type::Q6_K, Type::Q8_0},
};

bool fits(Type t, int64_t row) { return row % traits(t).block_elems == 0; }

Type fit_to_row(Type t, int64_t row) {
    if (fits(t, row)) return t;
    for (const auto& f : kFallbacks) {
        if (f.from == t && fits(f.to, row)) return f.to;
    }
    return Type::F16;  // row not even a multiple of 32
}

// The output head (or the token embedding that doubles as it): the tensor
// whose error reaches the logits directly, so it gets Q6_K (Q5_K for the
// lowest-bit mixes) unless the mix is already Q8_0.
Type output_head_type(FileType ft, Type base, int64_t row) {
    if (!fits(base, row)) return Type::Q8_0;
    if (kQ5KHead.has(ft)) return Type::Q5_K;
    return base == Type::Q8_0 ? Type::Q8_0 : Type::Q6_K;
}

Type rule_type(FileType ft, Role role, const RuleContext& ctx, Type base) {
    for (const auto& r : kRules) {
        if (r.role == role && r.mixes.has(ft) && r.when(ctx)) return r.type;
    }
    return base;
}

}  // namespace

std::span<const MixInfo> all_mixes() { return kMixes; }

std::optional<FileType> file_type_from_name(std::string_view name) {
    for (const auto& m : kMixes) {
        if (iequals_ascii(m.name, name)) return m.file_type;
    }
    return std::nullopt;
}

const MixInfo* find_mix(FileType ft) {
    for (const auto& m : kMixes) {
        if (m.file_type == ft) return &m;
    }
    return nullptr;
}

std::string file_type_name(uint64_t file_type) {
    const MixInfo* mix = file_type <= UINT32_MAX ? find_mix(static_cast<FileType>(file_type)) : nullptr;
    return mix ? std::string(mix->name) : "unknown (" + std::to_string(file_type) + ")";
}

Type choose_tensor_type(FileType ft, const MixModelInfo& model, std::string_view tensor_name,
                        std::span<const int64_t> shape) {
    const MixInfo* mix = find_mix(ft);
    if (mix == nullptr || !allows_quantization(tensor_name, shape)) return Type::F32;
    const Type base = mix->base_type;
    // F16/BF16/F32 mixes convert every quantizable weight and nothing else.
    if (!traits(base).is_quantized) return base;

    const int64_t row = shape.empty() ? 1 : shape[0];
    const Role role = role_of(tensor_name);
    const bool is_head = role == Role::Output || (role == Role::TokenEmbd && !model.has_output_tensor);

    const int64_t layer = tandem::model::layer_of_tensor(tensor_name);
    const bool ffn = role == Role::FfnUp || role == Role::FfnGate || role == Role::FfnDown;
    if (ffn && model.n_expert > 1 && (layer < 0 || layer >= model.n_layer)) {
        throw Error(fmt::format("tensor '{}': a mixture-of-experts FFN tensor must be named blk.N. with N in [0, {})",
                                tensor_name, model.n_layer));
    }

    // llama.cpp's MXFP4_MOE: the experts' 3-D tensors MXFP4, the rest Q8_0.
    if (ft == FileType::MXFP4_MOE) {
        const bool experts = !is_head && shape.size() > 2 && shape[2] > 1;
        return fit_to_row(experts ? Type::MXFP4 : Type::Q8_0, row);
    }
    Type t = base;
    if (is_head) {
        t = output_head_type(ft, base, row);
    } else {
        const RuleContext ctx{layer, model.n_layer, model.n_head_kv > 0 ? model.n_head / model.n_head_kv : 0,
                              model.n_expert, model.imatrix};
        t = rule_type(ft, role, ctx, base);
        if (role == Role::AttnV && !kVeryLowBit.has(ft)) {
            // Llama-2/3 70B: 8 query heads share each V head, so attn_v is
            // 1/8 the size of attn_q and extra bits are nearly free.
            const bool is_70b = model.n_layer == 80 && model.n_head_kv > 0 && model.n_head != model.n_head_kv;
            if (is_70b && (t == Type::Q3_K || t == Type::Q4_K)) t = Type::Q5_K;
            if (model.n_expert == 8) t = Type::Q8_0;
        }
    }
    return fit_to_row(t, row);
}

bool requires_imatrix(std::string_view tensor_name, Type t) {
    const Role role = role_of(tensor_name);
    if (role == Role::Output || role == Role::TokenEmbd) return false;
    constexpr Type kNeedWeights[] = {Type::IQ3_XXS, Type::IQ2_XXS, Type::IQ2_XS, Type::IQ2_S, Type::IQ1_S, Type::IQ1_M};
    return std::find(std::begin(kNeedWeights), std::end(kNeedWeights), t) != std::end(kNeedWeights);
}

}  // namespace tandem::quant
