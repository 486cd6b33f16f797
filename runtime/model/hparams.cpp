#include "runtime/model/hparams.h"

#include <array>
#include <cmath>
#include <utility>

#include <fmt/format.h>

#include "runtime/common/error.h"
#include "runtime/gguf/gguf_file.h"

namespace tandem::model {
namespace {

struct IntKey {
    std::string_view suffix;  // after "{arch}."
    int64_t HParams::*field;
    bool required;
};

struct FloatKey {
    std::string_view suffix;
    double HParams::*field;
    bool required;
};

constexpr std::array kIntKeys = {
    IntKey{"context_length", &HParams::n_ctx_train, true},
    IntKey{"embedding_length", &HParams::n_embd, true},
    IntKey{"block_count", &HParams::n_layer, true},
    IntKey{"feed_forward_length", &HParams::n_ff, true},
    IntKey{"attention.head_count", &HParams::n_head, true},
    IntKey{"attention.head_count_kv", &HParams::n_head_kv, false},
    IntKey{"attention.key_length", &HParams::head_dim_k, false},
    IntKey{"attention.value_length", &HParams::head_dim_v, false},
    IntKey{"rope.dimension_count", &HParams::n_rot, false},
    IntKey{"attention.sliding_window", &HParams::sliding_window, false},
    IntKey{"vocab_size", &HParams::n_vocab, false},
    IntKey{"expert_count", &HParams::n_expert, false},
    IntKey{"expert_used_count", &HParams::n_expert_used, false},
    IntKey{"expert_feed_forward_length", &HParams::n_ff_exp, false},
    IntKey{"expert_shared_count", &HParams::n_expert_shared, false},
    IntKey{"leading_dense_block_count", &HParams::n_layer_dense_lead, false},
    IntKey{"nextn_predict_layers", &HParams::n_nextn, false},
    IntKey{"expert_gating_func", &HParams::expert_gating, false},
    IntKey{"rope.scaling.original_context_length", &HParams::rope_n_ctx_orig, false},
    IntKey{"expert_group_count", &HParams::n_expert_groups, false},
    IntKey{"expert_group_used_count", &HParams::n_expert_groups_used, false},
    IntKey{"attention.q_lora_rank", &HParams::n_lora_q, false},
    IntKey{"attention.kv_lora_rank", &HParams::n_lora_kv, false},
    IntKey{"attention.key_length_mla", &HParams::head_dim_k_mla, false},
    IntKey{"attention.value_length_mla", &HParams::head_dim_v_mla, false},
};

constexpr std::array kFloatKeys = {
    FloatKey{"rope.freq_base", &HParams::rope_base, false},
    FloatKey{"rope.freq_base_swa", &HParams::rope_base_swa, false},
    FloatKey{"attention.layer_norm_rms_epsilon", &HParams::rms_eps, false},
    FloatKey{"final_logit_softcapping", &HParams::final_logit_softcap, false},
    FloatKey{"attn_logit_softcapping", &HParams::attn_logit_softcap, false},
    FloatKey{"expert_weights_scale", &HParams::expert_weights_scale, false},
    FloatKey{"rope.scaling.yarn_beta_fast", &HParams::rope_beta_fast, false},
    FloatKey{"rope.scaling.yarn_beta_slow", &HParams::rope_beta_slow, false},
};


void require_range(const std::string& key, int64_t v, int64_t lo, int64_t hi) {
    if (v < lo || v > hi) {
        throw Error(fmt::format("model hyperparameter {}: expected a value in [{}, {}], found {}", key, lo, hi, v));
    }
}

// llama.cpp's context for YaRN: ext_factor 1 unless the file says, and an
// attention factor that cancels the 1 + 0.1 ln(factor) the kernels apply
// (llama.cpp PR 17945), times the file's rope.scaling.attn_factor. With a
// yarn_log_multiplier m, the factor is mscale(1) / mscale(m) before that
// cancelling. All in float, as llama.cpp computes it.
//
// DeepSeek (ArchSpec::mla): the file's multiplier is a tenth of the
// config's mscale_all_dim, which llama.cpp restores, and a multiplier other
// than 1 is also the config's mscale (DeepSeek-V2).
void read_yarn(const gguf::File& file, const std::string& prefix, const ArchSpec& arch, HParams& hp) {
    const auto f = [&](const char* key, double fallback) {
        return static_cast<float>(file.find_float(prefix + key).value_or(fallback));
    };
    const float ext = f("rope.scaling.yarn_ext_factor", 1.0);
    float log_mul = f("rope.scaling.yarn_log_multiplier", 0.0);
    if (arch.mla) log_mul /= 0.1f;
    const float file_attn = f("rope.scaling.attn_factor", 1.0);
    if (!(ext >= 0.0f && ext <= 1.0f) || !(log_mul >= 0.0f && log_mul < 100.0f) ||
        !(file_attn > 0.0f && file_attn < 100.0f)) {
        throw Error(fmt::format("model: {}rope.scaling: expected yarn_ext_factor in [0, 1], yarn_log_multiplier in "
                                "[0, 100) and attn_factor in (0, 100), found {}, {} and {}",
                                prefix, ext, log_mul, file_attn));
    }
    const float factor = 1.0f / static_cast<float>(hp.rope_freq_scale);
    const auto mscale = [&](float m) { return factor <= 1.0f ? 1.0f : 0.1f * m * std::log(factor) + 1.0f; };
    float attn = 1.0f;
    if (ext != 0.0f) {
        const float m = arch.mla && log_mul != 1.0f ? log_mul : 1.0f;
        attn = log_mul != 0.0f ? mscale(m) / mscale(log_mul) : mscale(1.0f);
        attn *= 1.0f / (1.0f + 0.1f * std::log(factor));
    }
    hp.rope_ext_factor = ext;
    hp.rope_attn_factor = attn * file_attn;
    hp.rope_yarn_log_mul = log_mul;
}

// MLA's hyperparameters: the latent-only cache's K and V sizes (one KV
// head), checked against the per-head sizes, and DeepSeek's Q.K scale
// (llama.cpp's deepseek2 graph: the attention factor with YaRN's own
// adjustment put back, times 1 + 0.1 m ln(factor), squared).
void read_mla(const std::string& prefix, HParams& hp) {
    if (hp.head_dim_k_mla == 0 || hp.n_lora_kv == 0) {
        throw Error(fmt::format("model: {}attention.key_length_mla and kv_lora_rank are missing: a deepseek2 file "
                                "converted before llama.cpp split attn_kv_b into attn_k_b and attn_v_b (not "
                                "supported; convert it again with a current llama.cpp)",
                                prefix));
    }
    require_range(prefix + "attention.kv_lora_rank", hp.n_lora_kv, 1, kMaxHeadDim);
    require_range(prefix + "attention.q_lora_rank", hp.n_lora_q, 1, kMaxDim);
    require_range(prefix + "rope.dimension_count", hp.n_rot, 2, kMaxHeadDim);
    require_range(prefix + "attention.key_length_mla", hp.head_dim_k_mla, hp.n_rot + 1, kMaxHeadDim);
    if (hp.head_dim_v_mla == 0) hp.head_dim_v_mla = hp.head_dim_k_mla;
    require_range(prefix + "attention.value_length_mla", hp.head_dim_v_mla, 1, kMaxHeadDim);
    require_range(prefix + "attention.head_count_kv", hp.n_head_kv, 1, 1);
    require_range(prefix + "attention.key_length", hp.head_dim_k, hp.n_lora_kv + hp.n_rot, hp.n_lora_kv + hp.n_rot);
    require_range(prefix + "attention.value_length", hp.head_dim_v, hp.n_lora_kv, hp.n_lora_kv);
    const float factor = 1.0f / static_cast<float>(hp.rope_freq_scale);
    const float attn_org = static_cast<float>(hp.rope_attn_factor) * (1.0f + 0.1f * std::log(factor));
    const float mscale =
        attn_org * (1.0f + 0.1f * static_cast<float>(hp.rope_yarn_log_mul) * std::log(factor));
    hp.attn_scale = mscale * mscale / std::sqrt(static_cast<float>(hp.head_dim_k_mla));
}

}  // namespace

int64_t dim_value(const HParams& hp, Dim d) {
    switch (d) {  // a mapping of enum to fields, not behaviour
        case Dim::One: return 1;
        case Dim::Embd: return hp.n_embd;
        case Dim::QDim: return hp.q_dim();
        case Dim::KDim: return hp.k_dim();
        case Dim::VDim: return hp.v_dim();
        case Dim::OutDim: return hp.o_dim();
        case Dim::NHead: return hp.n_head;
        case Dim::HeadDimK: return hp.head_dim_k;
        case Dim::FF: return hp.n_ff;
        case Dim::FF2: return 2 * hp.n_ff;
        case Dim::QkvDim: return hp.qkv_dim();
        case Dim::FFExp: return hp.n_ff_exp;
        case Dim::NExpert: return hp.n_expert;
        case Dim::FFShexp: return hp.n_ff_shexp();
        case Dim::Vocab: return hp.n_vocab;
        case Dim::RopeHalf: return hp.n_rot / 2;
        case Dim::QLora: return hp.n_lora_q;
        case Dim::KvLora: return hp.n_lora_kv;
        case Dim::QMla: return hp.q_mla_dim();
        case Dim::KNope: return hp.head_dim_k_mla - hp.n_rot;
        case Dim::VMla: return hp.head_dim_v_mla;
    }
    return 0;
}

HParams read_hparams(const gguf::File& file, const ArchSpec& arch) {
    HParams hp;
    hp.arch = std::string(arch.name);
    const std::string prefix = std::string(arch.name) + ".";
    for (const auto& k : kIntKeys) {
        const std::string key = prefix + std::string(k.suffix);
        const auto v = file.find_uint(key);
        if (!v) {
            if (k.required) throw Error(fmt::format("model: required key {} is missing", key));
            continue;
        }
        if (*v > static_cast<uint64_t>(kMaxDim)) {
            throw Error(fmt::format("model hyperparameter {}: expected at most {}, found {}", key, kMaxDim, *v));
        }
        hp.*(k.field) = static_cast<int64_t>(*v);
    }
    for (const auto& k : kFloatKeys) {
        const std::string key = prefix + std::string(k.suffix);
        const auto v = file.find_float(key);
        if (!v) {
            if (k.required) throw Error(fmt::format("model: required key {} is missing", key));
            continue;
        }
        hp.*(k.field) = *v;
    }
    if (const auto type = file.find_string(prefix + "rope.scaling.type")) {
        if (*type == "linear" || *type == "yarn") {
            const auto factor = file.find_float(prefix + "rope.scaling.factor");
            if (!factor || !(*factor > 0.0 && *factor < 1e6)) {
                throw Error(fmt::format("model: {}rope.scaling.type is {} but {}rope.scaling.factor is missing or "
                                        "not in (0, 1e6)",
                                        prefix, *type, prefix));
            }
            hp.rope_freq_scale = 1.0 / *factor;
            if (*type == "yarn") read_yarn(file, prefix, arch, hp);
        } else if (*type != "none") {
            throw Error(fmt::format("model: {}rope.scaling.type: expected none, linear or yarn, found {} (not "
                                    "supported)",
                                    prefix, *type));
        }
    }
    if (hp.rope_n_ctx_orig == 0) hp.rope_n_ctx_orig = hp.n_ctx_train;

    // Without its key, the sliding layers' RoPE base is the architecture's
    // default, or when it has none the global base.
    if (!file.find_float(prefix + "rope.freq_base_swa")) {
        hp.rope_base_swa = arch.default_rope_base_swa > 0.0 ? arch.default_rope_base_swa : hp.rope_base;
    }
    require_range(prefix + "block_count", hp.n_layer, 1, kMaxLayers);
    // NextN blocks come after the layers the forward pass runs.
    require_range(prefix + "nextn_predict_layers", hp.n_nextn, 0, hp.n_layer - 1);
    hp.n_layer -= hp.n_nextn;
    hp.expert_weights_norm = file.find_bool(prefix + "expert_weights_norm").value_or(arch.moe_normalize_weights);
    if (hp.n_expert > 0) {
        require_range(prefix + "expert_count", hp.n_expert, 1, 4096);
        require_range(prefix + "expert_used_count", hp.n_expert_used, 1, hp.n_expert);
        if (hp.n_ff_exp == 0) hp.n_ff_exp = hp.n_ff;
        require_range(prefix + "expert_feed_forward_length", hp.n_ff_exp, 1, kMaxDim);
        require_range(prefix + "expert_shared_count", hp.n_expert_shared, 0, 64);
        require_range(prefix + "leading_dense_block_count", hp.n_layer_dense_lead, 0, hp.n_layer);
        if (!file.find_uint(prefix + "expert_gating_func")) hp.expert_gating = arch.default_expert_gating;
        require_range(prefix + "expert_gating_func", hp.expert_gating, 0, 3);
        if (hp.n_expert_groups > 1) {
            // As llama.cpp's loader asserts, refused here in words.
            require_range(prefix + "expert_group_count", hp.n_expert_groups, 2, hp.n_expert / 2);
            if (hp.n_expert % hp.n_expert_groups != 0) {
                throw Error(fmt::format("model: {}expert_group_count ({}) must divide expert_count ({})", prefix,
                                        hp.n_expert_groups, hp.n_expert));
            }
            require_range(prefix + "expert_group_used_count", hp.n_expert_groups_used, 1, hp.n_expert_groups - 1);
            require_range(prefix + "expert_used_count", hp.n_expert_used, 1,
                          hp.n_expert_groups_used * (hp.n_expert / hp.n_expert_groups));
        }
        if (!(hp.expert_weights_scale > 0.0 && hp.expert_weights_scale < 1e6)) {
            throw Error(fmt::format("model: {}expert_weights_scale: expected a positive value, found {}", prefix,
                                    hp.expert_weights_scale));
        }
    }
    for (const auto& [key, cap] : {std::pair{"final_logit_softcapping", hp.final_logit_softcap},
                                   std::pair{"attn_logit_softcapping", hp.attn_logit_softcap}}) {
        if (!(cap >= 0.0 && cap < 1e30)) {
            throw Error(fmt::format("model: {}{}: expected a non-negative value, found {}", prefix, key, cap));
        }
    }
    require_range(prefix + "embedding_length", hp.n_embd, 1, kMaxDim);
    require_range(prefix + "feed_forward_length", hp.n_ff, 1, kMaxDim);
    require_range(prefix + "attention.head_count", hp.n_head, 1, hp.n_embd);
    if (hp.n_head_kv == 0) hp.n_head_kv = hp.n_head;
    require_range(prefix + "attention.head_count_kv", hp.n_head_kv, 1, hp.n_head);
    if (hp.n_head % hp.n_head_kv != 0) {
        throw Error(fmt::format("model: {}attention.head_count ({}) must be a multiple of head_count_kv ({})", prefix,
                                hp.n_head, hp.n_head_kv));
    }
    if (hp.head_dim_k == 0) {
        if (hp.n_embd % hp.n_head != 0) {
            throw Error(fmt::format("model: {}embedding_length ({}) is not a multiple of the head count ({}) and no "
                                    "{}attention.key_length is given",
                                    prefix, hp.n_embd, hp.n_head, prefix));
        }
        hp.head_dim_k = hp.n_embd / hp.n_head;
    }
    if (hp.head_dim_v == 0) hp.head_dim_v = hp.head_dim_k;
    if (hp.n_rot == 0) hp.n_rot = hp.head_dim_k;
    require_range(prefix + "attention.key_length", hp.head_dim_k, 2, kMaxHeadDim);
    require_range(prefix + "attention.value_length", hp.head_dim_v, 1, kMaxHeadDim);
    require_range(prefix + "rope.dimension_count", hp.n_rot, 2, hp.head_dim_k);
    if (hp.n_rot % 2 != 0) {
        throw Error(fmt::format("model: {}rope.dimension_count must be even (RoPE rotates pairs), found {}", prefix,
                                hp.n_rot));
    }
    if (arch.mla) {
        read_mla(prefix, hp);
    } else {
        hp.n_lora_q = hp.n_lora_kv = hp.head_dim_k_mla = hp.head_dim_v_mla = 0;
    }
    require_range(prefix + "context_length", hp.n_ctx_train, 1, kMaxDim);
    require_range(prefix + "rope.scaling.original_context_length", hp.rope_n_ctx_orig, 1, kMaxDim);
    if (!(hp.rope_beta_fast > 0.0 && hp.rope_beta_fast < 1e6 && hp.rope_beta_slow > 0.0 && hp.rope_beta_slow < 1e6)) {
        throw Error(fmt::format("model: {}rope.scaling.yarn_beta_fast and yarn_beta_slow: expected values in (0, 1e6), "
                                "found {} and {}",
                                prefix, hp.rope_beta_fast, hp.rope_beta_slow));
    }
    if (!(hp.rms_eps > 0.0 && hp.rms_eps < 1.0)) {
        throw Error(fmt::format("model: {}attention.layer_norm_rms_epsilon: expected a value in (0, 1), found {}",
                                prefix, hp.rms_eps));
    }
    if (!(hp.rope_base > 0.0 && hp.rope_base < 1e30)) {
        throw Error(fmt::format("model: {}rope.freq_base: expected a positive value, found {}", prefix, hp.rope_base));
    }
    if (arch.swa_period > 0 && !(hp.rope_base_swa > 0.0 && hp.rope_base_swa < 1e30)) {
        throw Error(fmt::format("model: {}rope.freq_base_swa: expected a positive value, found {}", prefix,
                                hp.rope_base_swa));
    }
    if (arch.swa_period > 0 && hp.sliding_window <= 0) {
        throw Error(file.find_uint(prefix + "attention.sliding_window")
                        ? fmt::format("model: {}attention.sliding_window: expected a positive window, found 0", prefix)
                        : fmt::format("model: {} uses sliding-window attention but {}attention.sliding_window is "
                                      "missing",
                                      arch.name, prefix));
    }

    // The embedding matrix is the authority on the vocabulary size.
    if (const auto* embd = file.find_tensor("token_embd.weight"); embd && embd->shape.size() >= 2) {
        hp.n_vocab = embd->shape[1];
    } else if (hp.n_vocab == 0) {
        if (const auto* tokens = file.find("tokenizer.ggml.tokens"); tokens && tokens->as_array()) {
            hp.n_vocab = static_cast<int64_t>(tokens->as_array()->items.size());
        }
    }
    require_range("n_vocab", hp.n_vocab, 1, kMaxDim);
    return hp;
}

}  // namespace tandem::model
