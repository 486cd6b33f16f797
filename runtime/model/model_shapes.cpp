#include "runtime/model/model_shapes.h"

#include <algorithm>
#include <array>
#include <charconv>

#include <fmt/format.h>

#include "runtime/common/error.h"
#include "runtime/model/arch.h"
#include "runtime/model/hparams.h"

namespace tandem::model {
namespace {

// Sizes from each model's Hugging Face config.json (hidden_size,
// intermediate_size, num_hidden_layers, num_attention_heads,
// num_key_value_heads, vocab_size, max_position_embeddings, rope_theta,
// rms_norm_eps, tie_word_embeddings, head_dim, num_local_experts /
// num_experts, num_experts_per_tok, moe_intermediate_size, sliding_window).
// llama-1b is TinyLlama 1.1B, phi3-mini Phi-3-mini-4k-instruct, qwen2.5-72b
// Qwen2.5-72B-Instruct (whose base model lists 131072 positions).
// `tiny` is the model in ../shared; `moe-small` is made up: a Qwen3-MoE
// small enough to write with data on a laptop (~1.6 GB at Q4_K_M) and to
// benchmark expert placement on one; `gpt-oss-small` the same for gpt-oss
// (2.7B parameters).
// zai-org/GLM-4.5-Air config.json: 46 layers (the NextN block left out),
// the first dense (intermediate_size 10944), then 128 routed experts of
// 1408 (8 used) and one shared, sigmoid router, partial_rotary_factor 0.5
// of head_dim 128, attention biases (no Q/K norms on Air).
ModelShape glm_4_5_air() {
    ModelShape s{"glm-4.5-air", "glm4moe", 4096, 10944, 46, 96, 8, 151552, 131072, 1000000.0, 1e-5, false, 128, 128,
                 8, 1408};
    s.n_expert_shared = 1;
    s.n_dense_lead = 1;
    s.sigmoid_router = true;
    s.n_rot = 64;
    return s;
}

// deepseek-ai/DeepSeek-V3 config.json: 61 layers, the first 3 dense
// (first_k_dense_replace; intermediate_size 18432), then 256 routed
// experts of 2048 (moe_intermediate_size; 8 used, chosen within the 4 best
// of 8 groups) and one shared; sigmoid scoring with its correction bias,
// norm_topk_prob, routed_scaling_factor 2.5; 128 heads of multi-head
// latent attention (q_lora_rank 1536, kv_lora_rank 512, qk_nope_head_dim
// 128, qk_rope_head_dim 64, v_head_dim 128: the file's one KV head is the
// cached latent); YaRN 40 from 4096 with mscale_all_dim 1.0. 671.0B
// parameters, the published 671B: the MTP (NextN) block, 14B more, is left
// out.
ModelShape deepseek_v3() {
    ModelShape s{"deepseek-v3", "deepseek2", 7168, 18432, 61, 128, 1, 129280, 163840, 10000.0, 1e-6, false, 0, 256,
                 8, 2048, 0, 40.0, 4096};
    s.n_expert_shared = 1;
    s.n_dense_lead = 3;
    s.sigmoid_router = true;
    s.n_rot = 64;
    s.n_expert_groups = 8;
    s.n_expert_groups_used = 4;
    s.expert_weights_scale = 2.5;
    s.q_lora_rank = 1536;
    s.kv_lora_rank = 512;
    s.qk_nope_head_dim = 128;
    s.v_head_dim = 128;
    s.yarn_mscale_all_dim = 1.0;
    return s;
}

// Made up: DeepSeek-V3's design small enough to write with data and
// benchmark on a laptop, 2.77B parameters: 10 layers of n_embd 2048, the
// first 2 dense (n_ff 5632), then 64 routed experts of 768 (6 used, groups
// as V3's) and one shared; 16 heads, q_lora_rank 768, V3's kv_lora_rank,
// head sizes, router and YaRN; a 32000-token vocabulary.
ModelShape deepseek2_small() {
    ModelShape s = deepseek_v3();
    s.name = "deepseek2-small";
    s.n_embd = 2048;
    s.n_ff = 5632;
    s.n_layer = 10;
    s.n_head = 16;
    s.n_vocab = 32000;
    s.n_dense_lead = 2;
    s.n_expert = 64;
    s.n_expert_used = 6;
    s.n_ff_exp = 768;
    s.q_lora_rank = 768;
    return s;
}

const std::vector<ModelShape>& preset_table() {
    static const std::vector<ModelShape> presets = {
        // name             arch        embd  ff     layer head kv  vocab   ctx    rope       eps   tied  hdim exp used ffexp swa
        {"tiny",            "llama",    256,  768,   4,    8,   4,  32000,  2048,  10000.0,   1e-5, true},
        {"llama-1b",        "llama",    2048, 5632,  22,   32,  4,  32000,  2048,  10000.0,   1e-5, false},
        {"moe-small",       "qwen3moe", 2048, 6144,  16,   16,  4,  32000,  40960, 1000000.0, 1e-6, false, 128, 32, 4, 768},
        {"gpt-oss-small",   "gpt-oss",  2048, 2048,  16,   32,  8,  32000,  131072, 150000.0, 1e-5, false, 64,  32, 4, 768,  128, 32.0, 4096},
        deepseek2_small(),
        {"phi3-mini",       "phi3",     3072, 8192,  32,   32,  32, 32064,  4096,  10000.0,   1e-5, false, 0,   0,  0, 0,   2047},
        {"llama2-7b",       "llama",    4096, 11008, 32,   32,  32, 32000,  4096,  10000.0,   1e-5, false},
        {"llama3-8b",       "llama",    4096, 14336, 32,   32,  8,  128256, 8192,  500000.0,  1e-5, false},
        {"llama2-13b",      "llama",    5120, 13824, 40,   40,  40, 32000,  4096,  10000.0,   1e-5, false},
        // openai/gpt-oss-20b and -120b config.json (hidden_size 2880,
        // num_local_experts 32 / 128, experts_per_token 4, sliding_window
        // 128, rope_scaling yarn 32 from 4096).
        {"gpt-oss-20b",     "gpt-oss",  2880, 2880,  24,   64,  8,  201088, 131072, 150000.0, 1e-5, false, 64,  32, 4, 2880, 128, 32.0, 4096},
        {"qwen3-30b-a3b",   "qwen3moe", 2048, 6144,  48,   32,  4,  151936, 40960, 1000000.0, 1e-6, false, 128, 128, 8, 768},
        {"mixtral-8x7b",    "llama",    4096, 14336, 32,   32,  8,  32000,  32768, 1000000.0, 1e-5, false, 0,   8,  2},
        {"llama3-70b",      "llama",    8192, 28672, 80,   64,  8,  128256, 8192,  500000.0,  1e-5, false},
        // meta-llama/Llama-3.1-405B config.json (hidden 16384, intermediate 53248, 126 layers, 128 heads, 8 KV).
        {"llama3-405b",     "llama",    16384, 53248, 126, 128, 8,  128256, 131072, 500000.0, 1e-5, false},
        {"qwen2.5-72b",     "qwen2",    8192, 29568, 80,   64,  8,  152064, 32768, 1000000.0, 1e-6, false},
        {"gpt-oss-120b",    "gpt-oss",  2880, 2880,  36,   64,  8,  201088, 131072, 150000.0, 1e-5, false, 64,  128, 4, 2880, 128, 32.0, 4096},
        glm_4_5_air(),
        {"qwen3-235b-a22b", "qwen3moe", 4096, 12288, 94,   64,  4,  151936, 40960, 1000000.0, 1e-6, false, 128, 128, 8, 1536},
        deepseek_v3(),
    };
    return presets;
}

// Keys llama.cpp's converter writes for some architectures only: LlamaModel
// and DeepseekV2Model add vocab_size and rope.dimension_count,
// Phi3MiniModel the latter; the Qwen and Gemma converters write neither
// (the loader derives both).
struct KeyStyle {
    std::string_view arch;
    bool vocab_size;
    bool rope_dimension_count;
};
constexpr std::array kKeyStyles = {
    KeyStyle{"llama", true, true},
    KeyStyle{"phi3", false, true},
    KeyStyle{"deepseek2", true, true},
};

KeyStyle key_style(std::string_view arch) {
    for (const auto& k : kKeyStyles) {
        if (k.arch == arch) return k;
    }
    return {arch, false, false};
}

gguf::KeyValue kv(std::string key, gguf::Value value) {
    gguf::KeyValue out;
    out.key = std::move(key);
    out.value = std::move(value);
    return out;
}

uint32_t as_u32(int64_t v, std::string_view what) {
    if (v < 0 || v > static_cast<int64_t>(UINT32_MAX)) {
        throw Error(fmt::format("{} = {} does not fit a GGUF u32", what, v));
    }
    return static_cast<uint32_t>(v);
}

// "{arch}.*" keys in the value types llama.cpp's converter writes them.
struct ArchKeys {
    explicit ArchKeys(const std::string& arch) : prefix(arch + ".") {}
    void u32(std::string_view key, int64_t v) { add(key, gguf::Value::u32(as_u32(v, key))); }
    void f32(std::string_view key, double v) { add(key, gguf::Value::f32(static_cast<float>(v))); }
    void boolean(std::string_view key, bool v) { add(key, gguf::Value::boolean(v)); }
    void str(std::string_view key, std::string v) { add(key, gguf::Value::str(std::move(v))); }
    void add(std::string_view key, gguf::Value v) { out.push_back(kv(prefix + std::string(key), std::move(v))); }

    std::string prefix;
    std::vector<gguf::KeyValue> out;
};

// The heads; key_length and value_length where config.json gives head_dim
// and with MLA, whose converter writes the cache's sizes there and the
// heads' before absorption as key_length_mla and value_length_mla.
void add_attention_keys(const ModelShape& s, ArchKeys& k) {
    k.u32("attention.head_count", s.n_head);
    k.u32("attention.head_count_kv", s.n_head_kv);
    if (s.head_dim > 0 || s.mla()) {
        k.u32("attention.key_length", s.head_dim_k());
        k.u32("attention.value_length", s.head_dim_v());
    }
    if (s.mla()) {
        k.u32("attention.key_length_mla", s.key_length_mla());
        k.u32("attention.value_length_mla", s.v_head_dim);
        k.u32("attention.q_lora_rank", s.q_lora_rank);
        k.u32("attention.kv_lora_rank", s.kv_lora_rank);
    }
    k.f32("attention.layer_norm_rms_epsilon", s.rms_eps);
}

void add_expert_keys(const ModelShape& s, ArchKeys& k) {
    k.u32("expert_count", s.n_expert);
    k.u32("expert_used_count", s.n_expert_used);
    if (s.n_ff_exp > 0) k.u32("expert_feed_forward_length", s.n_ff_exp);
    if (s.n_expert_shared > 0) k.u32("expert_shared_count", s.n_expert_shared);
    if (s.n_dense_lead > 0) k.u32("leading_dense_block_count", s.n_dense_lead);
    if (s.n_expert_groups > 0) {
        k.u32("expert_group_count", s.n_expert_groups);
        k.u32("expert_group_used_count", s.n_expert_groups_used);
    }
    if (s.sigmoid_router || s.expert_weights_scale != 1.0) k.f32("expert_weights_scale", s.expert_weights_scale);
    if (s.sigmoid_router) {
        k.boolean("expert_weights_norm", true);
        k.u32("expert_gating_func", 2);
    }
}

void add_yarn_keys(const ModelShape& s, ArchKeys& k) {
    k.str("rope.scaling.type", "yarn");
    k.f32("rope.scaling.factor", s.yarn_factor);
    k.u32("rope.scaling.original_context_length", s.yarn_orig_ctx);
    if (s.yarn_mscale_all_dim > 0.0) k.f32("rope.scaling.yarn_log_multiplier", 0.1 * s.yarn_mscale_all_dim);
}

const ArchSpec& arch_of(const ModelShape& s) {
    const ArchSpec* arch = find_arch(s.arch);
    if (arch == nullptr) {
        throw Error(fmt::format("shape '{}': architecture '{}' is not supported (supported: {})", s.name, s.arch,
                                supported_arch_names()));
    }
    return *arch;
}

// The hyperparameters the loader would read back from this shape's keys:
// what the TensorRule dims are evaluated against.
HParams to_hparams(const ModelShape& s) {
    HParams hp;
    hp.arch = s.arch;
    hp.n_vocab = s.n_vocab;
    hp.n_ctx_train = s.n_ctx;
    hp.n_embd = s.n_embd;
    hp.n_layer = s.n_layer;
    hp.n_ff = s.n_ff;
    hp.n_head = s.n_head;
    hp.n_head_kv = s.n_head_kv;
    hp.head_dim_k = hp.n_rot = s.head_dim_k();
    hp.head_dim_v = s.head_dim_v();
    hp.n_expert = s.n_expert;
    hp.n_expert_used = s.n_expert_used;
    hp.n_ff_exp = s.n_expert > 0 ? s.expert_ff() : 0;
    hp.n_expert_shared = s.n_expert_shared;
    hp.n_layer_dense_lead = s.n_dense_lead;
    if (s.n_rot > 0) hp.n_rot = s.n_rot;
    hp.n_lora_q = s.q_lora_rank;
    hp.n_lora_kv = s.kv_lora_rank;
    if (s.mla()) {
        hp.head_dim_k_mla = s.key_length_mla();
        hp.head_dim_v_mla = s.v_head_dim;
    }
    return hp;
}

// The bounds below are what the loader accepts (hparams.h, read_hparams):
// synth writes no file tandem refuses.
void require_in(const ModelShape& s, std::string_view what, int64_t value, int64_t lo, int64_t hi) {
    if (value < lo || value > hi) {
        throw Error(fmt::format("shape '{}': {} must be in [{}, {}], found {}", s.name, what, lo, hi, value));
    }
}

void validate_sizes(const ModelShape& s) {
    const struct {
        std::string_view what;
        int64_t value;
    } sizes[] = {{"n_embd", s.n_embd},       {"n_ff", s.n_ff},       {"n_layer", s.n_layer}, {"n_head", s.n_head},
                 {"n_head_kv", s.n_head_kv}, {"n_vocab", s.n_vocab}, {"n_ctx", s.n_ctx}};
    for (const auto& sz : sizes) {
        if (sz.value <= 0) throw Error(fmt::format("shape '{}': {} must be positive, found {}", s.name, sz.what, sz.value));
        const int64_t most = sz.what == std::string_view("n_layer") ? kMaxLayers : kMaxDim;
        if (sz.value > most) {
            throw Error(fmt::format("shape '{}': {} must be at most {} (what tandem loads), found {}", s.name, sz.what,
                                    most, sz.value));
        }
        as_u32(sz.value, sz.what);
    }
    for (const auto& [what, value] :
         {std::pair{"head_dim", s.head_dim}, std::pair{"n_expert", s.n_expert},
          std::pair{"n_expert_used", s.n_expert_used}, std::pair{"n_ff_exp", s.n_ff_exp},
          std::pair{"sliding_window", s.sliding_window}, std::pair{"n_rot", s.n_rot},
          std::pair{"n_expert_shared", s.n_expert_shared}, std::pair{"n_dense_lead", s.n_dense_lead},
          std::pair{"n_expert_groups", s.n_expert_groups}, std::pair{"n_expert_groups_used", s.n_expert_groups_used},
          std::pair{"q_lora_rank", s.q_lora_rank}, std::pair{"kv_lora_rank", s.kv_lora_rank},
          std::pair{"qk_nope_head_dim", s.qk_nope_head_dim}, std::pair{"v_head_dim", s.v_head_dim}}) {
        if (value < 0) throw Error(fmt::format("shape '{}': {} must not be negative, found {}", s.name, what, value));
        as_u32(value, what);
    }
}

// Multi-head latent attention: on deepseek2 and only there, one KV head
// (the cached latent), the sizes in read_mla's bounds, the file's
// yarn_log_multiplier DeepSeek's.
void validate_mla(const ModelShape& s, const ArchSpec& arch) {
    if (arch.mla && !s.mla()) {
        throw Error(fmt::format("shape '{}': architecture {} is multi-head latent attention, kv_lora_rank must be "
                                "positive",
                                s.name, s.arch));
    }
    if (!arch.mla && (s.mla() || s.yarn_mscale_all_dim != 0.0)) {
        throw Error(fmt::format("shape '{}': architecture {} has no multi-head latent attention, kv_lora_rank and "
                                "yarn_mscale_all_dim must be 0, found {} and {}",
                                s.name, s.arch, s.kv_lora_rank, s.yarn_mscale_all_dim));
    }
    if (!s.mla()) return;
    if (s.head_dim != 0) {
        throw Error(fmt::format("shape '{}': head_dim must be 0 with multi-head latent attention (its heads are "
                                "qk_nope_head_dim, n_rot and v_head_dim), found {}",
                                s.name, s.head_dim));
    }
    require_in(s, "n_head_kv (one with multi-head latent attention)", s.n_head_kv, 1, 1);
    require_in(s, "n_rot (qk_rope_head_dim)", s.n_rot, 2, kMaxHeadDim - 1);
    // A positive qk_nope_head_dim is n_rot below key_length_mla; both it
    // and the cache row (kv_lora_rank + n_rot) are at most kMaxHeadDim.
    require_in(s, "qk_nope_head_dim", s.qk_nope_head_dim, 1, kMaxHeadDim - s.n_rot);
    require_in(s, "kv_lora_rank", s.kv_lora_rank, 1, kMaxHeadDim - s.n_rot);
    require_in(s, "q_lora_rank", s.q_lora_rank, 1, kMaxDim);
    require_in(s, "v_head_dim", s.v_head_dim, 1, kMaxHeadDim);
    if (!(s.yarn_mscale_all_dim >= 0.0)) {
        throw Error(fmt::format("shape '{}': yarn_mscale_all_dim must not be negative, found {}", s.name,
                                s.yarn_mscale_all_dim));
    }
}

void validate_heads(const ModelShape& s, const ArchSpec& arch) {
    validate_mla(s, arch);
    if (s.n_rot % 2 != 0) {
        throw Error(
            fmt::format("shape '{}': n_rot must be even for RoPE (it rotates pairs), found {}", s.name, s.n_rot));
    }
    if (s.mla()) return;
    if (s.head_dim == 0 && s.n_embd % s.n_head != 0) {
        throw Error(fmt::format("shape '{}': n_head {} does not divide n_embd {}", s.name, s.n_head, s.n_embd));
    }
    if (s.n_head % s.n_head_kv != 0) {
        throw Error(fmt::format("shape '{}': n_head_kv {} does not divide n_head {}", s.name, s.n_head_kv, s.n_head));
    }
    if (s.head_dim_k() % 2 != 0) {
        throw Error(fmt::format("shape '{}': head dimension {} must be even for RoPE", s.name, s.head_dim_k()));
    }
    require_in(s, "head dimension", s.head_dim_k(), 2, kMaxHeadDim);
    require_in(s, "n_rot", s.n_rot, 0, s.head_dim_k());
}

// Group-limited routing as llama.cpp's loader asserts it.
void validate_expert_groups(const ModelShape& s) {
    if (s.n_expert_groups <= 1) return;
    require_in(s, "n_expert_groups", s.n_expert_groups, 2, s.n_expert / 2);
    if (s.n_expert % s.n_expert_groups != 0) {
        throw Error(fmt::format("shape '{}': n_expert_groups {} does not divide n_expert {}", s.name,
                                s.n_expert_groups, s.n_expert));
    }
    require_in(s, "n_expert_groups_used", s.n_expert_groups_used, 1, s.n_expert_groups - 1);
    require_in(s, "n_expert_used (within the used groups)", s.n_expert_used, 1,
               s.n_expert_groups_used * (s.n_expert / s.n_expert_groups));
}

void validate_experts(const ModelShape& s, const ArchSpec& arch) {
    const Presence experts_row = arch.layer[static_cast<size_t>(LayerTensor::FfnGateExps)];
    if (s.n_expert == 0 && experts_row == Presence::Required) {
        throw Error(fmt::format("shape '{}': architecture {} is a mixture of experts, n_expert must be positive",
                                s.name, s.arch));
    }
    if (s.n_expert == 0) return;
    if (experts_row == Presence::Absent) {
        throw Error(fmt::format("shape '{}': architecture {} has no mixture-of-experts FFN, n_expert must be 0",
                                s.name, s.arch));
    }
    if (s.n_expert_used < 1 || s.n_expert_used > s.n_expert) {
        throw Error(fmt::format("shape '{}': n_expert_used must be in [1, {}], found {}", s.name, s.n_expert,
                                s.n_expert_used));
    }
    require_in(s, "n_dense_lead", s.n_dense_lead, 0, s.n_layer);
    validate_expert_groups(s);
    if (!(s.expert_weights_scale > 0.0 && s.expert_weights_scale < 1e6)) {
        throw Error(fmt::format("shape '{}': expert_weights_scale must be in (0, 1e6), found {}", s.name,
                                s.expert_weights_scale));
    }
}

// Whether a synthetic model has a role: required ones, and the dense or
// expert FFN by whether it has experts. Optional roles are left out.
bool has_role(Presence p, bool experts) { return resolve_presence(p, experts) == Presence::Required; }

// A layer's roles: has_role's, and of the optional ones the choice bias of
// a sigmoid router in the layers with experts (DeepSeek-V3's
// e_score_correction_bias; V2's softmax router has none).
bool has_layer_role(const ModelShape& s, LayerTensor role, Presence p, bool experts) {
    if (role == LayerTensor::FfnExpProbsB && p == Presence::Optional) return experts && s.sigmoid_router;
    return has_role(p, experts);
}

// A rule's shape: trailing Dim::One axes dropped (vectors are 1-D).
std::vector<int64_t> rule_shape(const TensorRule& rule, const HParams& hp) {
    std::vector<int64_t> out = {dim_value(hp, rule.ne0)};
    if (rule.ne1 != Dim::One || rule.ne2 != Dim::One) out.push_back(dim_value(hp, rule.ne1));
    if (rule.ne2 != Dim::One) out.push_back(dim_value(hp, rule.ne2));
    return out;
}

}  // namespace

std::span<const ModelShape> model_presets() { return preset_table(); }

const ModelShape* find_preset(std::string_view name) {
    for (const auto& p : preset_table()) {
        if (p.name == name) return &p;
    }
    return nullptr;
}

std::string preset_names() {
    std::string out;
    for (const auto& p : preset_table()) {
        if (!out.empty()) out += ", ";
        out += p.name;
    }
    return out;
}

void validate_shape(const ModelShape& s) {
    const ArchSpec& arch = arch_of(s);
    validate_sizes(s);
    validate_heads(s, arch);
    validate_experts(s, arch);
    if (arch.swa_period > 0 && s.sliding_window == 0) {
        throw Error(fmt::format("shape '{}': architecture {} needs a sliding window", s.name, s.arch));
    }
    if (!(s.rope_base > 0.0)) throw Error(fmt::format("shape '{}': rope base must be positive", s.name));
    if (!(s.rms_eps > 0.0 && s.rms_eps < 1.0)) {
        throw Error(fmt::format("shape '{}': rms epsilon must be in (0, 1)", s.name));
    }
}

std::vector<TensorShape> model_tensors(const ModelShape& s) {
    const ArchSpec& arch = arch_of(s);
    const HParams hp = to_hparams(s);
    const bool experts = s.n_expert > 0;
    const auto global = [&](GlobalTensor g) {
        return TensorShape{global_tensor_name(g), rule_shape(global_tensor_rule(g), hp)};
    };

    std::vector<TensorShape> out;
    out.push_back(global(GlobalTensor::TokenEmbd));
    for (int64_t il = 0; il < s.n_layer; ++il) {
        for (int r = 0; r < kLayerTensorCount; ++r) {
            const auto role = static_cast<LayerTensor>(r);
            if (!has_layer_role(s, role, arch.layer[static_cast<size_t>(r)], hp.layer_has_experts(il))) continue;
            out.push_back({layer_tensor_name(il, role, arch), rule_shape(layer_tensor_rule(role), hp)});
        }
    }
    for (int g = 0; g < kGlobalTensorCount; ++g) {
        const auto role = static_cast<GlobalTensor>(g);
        if (role == GlobalTensor::TokenEmbd) continue;
        const bool wanted = role == GlobalTensor::Output ? !s.tied_embeddings && arch.global[g] != Presence::Absent
                                                         : has_role(arch.global[g], experts);
        if (wanted) out.push_back(global(role));
    }
    return out;
}

uint64_t param_count(const ModelShape& shape) {
    uint64_t total = 0;
    for (const auto& t : model_tensors(shape)) {
        uint64_t n = 1;
        for (int64_t d : t.shape) n *= static_cast<uint64_t>(d);
        total += n;
    }
    return total;
}

std::vector<gguf::KeyValue> model_hparams(const ModelShape& s) {
    const KeyStyle style = key_style(arch_of(s).name);
    ArchKeys k(s.arch);
    k.out.push_back(kv("general.architecture", gguf::Value::str(s.arch)));
    k.u32("context_length", s.n_ctx);
    k.u32("embedding_length", s.n_embd);
    k.u32("block_count", s.n_layer);
    k.u32("feed_forward_length", s.n_ff);
    if (style.rope_dimension_count || s.n_rot > 0) {
        k.u32("rope.dimension_count", s.n_rot > 0 ? s.n_rot : s.head_dim_k());
    }
    add_attention_keys(s, k);
    k.f32("rope.freq_base", s.rope_base);
    if (s.n_expert > 0) add_expert_keys(s, k);
    if (s.sliding_window > 0) k.u32("attention.sliding_window", s.sliding_window);
    if (s.yarn_factor > 0.0) add_yarn_keys(s, k);
    if (style.vocab_size) k.u32("vocab_size", s.n_vocab);
    return std::move(k.out);
}

int64_t layer_of_tensor(std::string_view name) {
    constexpr std::string_view kPrefix = "blk.";
    if (name.substr(0, kPrefix.size()) != kPrefix) return -1;
    const char* first = name.data() + kPrefix.size();
    const char* last = name.data() + name.size();
    int64_t layer = -1;
    const auto [ptr, ec] = std::from_chars(first, last, layer);
    if (ec != std::errc() || ptr == first || ptr == last || *ptr != '.' || layer < 0) return -1;
    return layer;
}

}  // namespace tandem::model
