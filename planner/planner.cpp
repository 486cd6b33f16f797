#include "planner/planner.h"

#include <algorithm>
#include <limits>
#include <cmath>

#include <fmt/format.h>

#include "planner/device_split.h"
#include "planner/layout.h"
#include "runtime/common/error.h"
#include "runtime/common/memory_ledger.h"

namespace tandem::planner {
namespace {

using detail::Footprint;
using detail::Layout;
using detail::Mode;
using detail::Tables;
using model::LayerTensor;

// The two modes of (a), whole layers: what layers below ngl do and what
// the others do, and where the output norm and head go past n_layer and
// before. Without rules: everything on the accelerator, everything on the
// host; with the user's rules, place_tensors at -ngl n_layer + 1 and 0.
struct LayerModes {
    Mode full, none;
    int norm_full = kAccelDevice, head_full = kAccelDevice;
    int norm_none = kHostDevice, head_none = kHostDevice;

    Layout at(const Tables& t, int64_t ngl) const {
        const int64_t g = std::clamp<int64_t>(ngl, 0, t.n_layer + 1);
        const bool out = g > t.n_layer;
        return {&full, &none, std::min(g, t.n_layer), out ? norm_full : norm_none, out ? head_full : head_none};
    }
};

Mode uniform_mode(const model::ModelSpec& spec, const Tables& t, int device) {
    return detail::make_mode(spec, t, [device](int64_t, LayerTensor) { return device; });
}

LayerModes plain_layer_modes(const model::ModelSpec& spec, const Tables& t) {
    return {uniform_mode(spec, t, kAccelDevice), uniform_mode(spec, t, kHostDevice)};
}

LayerModes rule_layer_modes(const model::ModelSpec& spec, const Tables& t, const PlanInputs& in) {
    PlacementRequest req;
    req.devices = detail::device_names(in.device_name);
    req.overrides = in.rules.overrides;
    req.cpu_moe = in.rules.cpu_moe;
    req.n_cpu_moe = in.rules.n_cpu_moe;
    req.kv_offload = in.rules.kv_offload;
    req.spec_first_layer = in.first_layer;
    req.n_gpu_layers = t.n_layer + 1;
    const Placement full = place_tensors(spec, req);
    req.n_gpu_layers = 0;
    const Placement none = place_tensors(spec, req);
    const gguf::TensorInfo* norm = spec.get(model::GlobalTensor::OutputNorm);
    const auto one = [](int d) { return std::min(d, kAccelDevice); };  // several accelerators count as one
    return {detail::mode_of(spec, t, full), detail::mode_of(spec, t, none), one(full.of(norm)), one(full.head),
            one(none.of(norm)),             one(none.head)};
}

// (b) and (c): the class on the host in layers [0, k), everything on the
// accelerator above.
struct SplitModes {
    Candidate candidate;
    Mode lo, hi;
};

// (b) moves what its -ot rule (ffn_override) matches: the FFN roles stored
// under their own names (not glm4moe's pre-FFN norm, post_attention_norm).
SplitModes split_modes(const model::ModelSpec& spec, const Tables& t, Candidate c) {
    const model::ArchSpec& arch = *spec.arch;
    const auto moved = [c, &arch](LayerTensor r) {
        if (c == Candidate::Experts) return detail::is_expert_role(r);
        return detail::is_ffn_role(r) && model::stored_as(r, arch) == r;
    };
    return {c,
            detail::make_mode(spec, t,
                              [moved](int64_t, LayerTensor r) { return moved(r) ? kHostDevice : kAccelDevice; }),
            uniform_mode(spec, t, kAccelDevice)};
}

double value_or_default(const std::optional<double>& v, double fallback, const char* name,
                        std::vector<Assumption>& out) {
    if (v && !(*v > 0.0)) throw Error(fmt::format("{}: expected a positive number, found {}", name, *v));
    out.push_back({name, v ? *v : fallback, !v});
    return v ? *v : fallback;
}

void check_costs(const KernelCosts& k, const char* device) {
    const auto positive = [&](const std::optional<double>& x, const char* name) {
        if (x && !(*x >= 0.0)) throw Error(fmt::format("{} {}: expected a number >= 0, found {}", device, name, *x));
    };
    positive(k.matmul_call_s, "matmul_call_s");
    positive(k.batch_call_s, "batch_call_s");
    positive(k.pool_op_s, "pool_op_s");
    positive(k.inline_op_s, "inline_op_s");
    positive(k.batch_s, "batch_s");
    positive(k.crossing_s, "crossing_s");
    positive(k.inline_op_elem_s, "inline_op_elem_s");
    positive(k.pool_op_elem_s, "pool_op_elem_s");
    for (const auto& [hd, sec] : k.attn_pos_s) {
        if (hd <= 0 || !(sec >= 0.0)) {
            throw Error(fmt::format("{} attn_pos_s: expected a head dimension > 0 and seconds >= 0, found {}: {}",
                                    device, hd, sec));
        }
    }
    if (k.copy_gbps && !(*k.copy_gbps > 0.0)) {
        throw Error(fmt::format("{} copy_gbps: expected a positive number, found {}", device, *k.copy_gbps));
    }
    for (const auto& [type, by] : k.gemm_small_by_cols) {
        for (const auto& [cols, rate] : by) {
            if (cols <= 0 || !(rate > 0.0)) {
                throw Error(fmt::format("{} rate of {} at {} columns: expected columns > 0 and a positive number, found {}",
                                        device, quant::traits(type).name, cols, rate));
            }
        }
    }
    for (const auto* m : {&k.matvec_gbps, &k.matvec_cached_gbps, &k.gemm_small_gflops, &k.gemm_large_gflops,
                          &k.matvec_narrow_gbps, &k.gemm_small_narrow_gflops, &k.gemm_few_gflops}) {
        for (const auto& [type, rate] : *m) {
            if (!(rate > 0.0)) {
                throw Error(fmt::format("{} rate of {}: expected a positive number, found {}", device,
                                        quant::traits(type).name, rate));
            }
        }
    }
}

// The kernel rates and fixed costs; the fixed costs join the assumptions
// (default or not), in seconds.
void fill_costs(const PlanInputs& in, detail::Speeds& v, std::vector<Assumption>* out) {
    check_costs(in.host_costs, "host");
    check_costs(in.device_costs, "device");
    v.host = in.host_costs;
    v.dev = in.device_costs;
    v.stream_min_batch = in.stream_min_batch;
    if (!out) return;
    const auto note = [&](const std::optional<double>& x, double fallback, const char* name) {
        out->push_back({name, x.value_or(fallback), !x});
    };
    note(v.host.matmul_call_s, kDefaultMatmulCallS, "cpu_matmul_call_s");
    note(v.host.pool_op_s, kDefaultPoolOpS, "cpu_pool_op_s");
    note(v.host.batch_s, kDefaultBatchS, "batch_s");
    note(v.dev.crossing_s, kHandOverLatencyS, "crossing_s");
}

// Everything one plan's search needs.
struct Context {
    const model::ModelSpec& spec;
    const Tables& t;
    detail::Speeds speeds{};
    uint64_t cap = 0;
    uint64_t margin = 0;
    std::optional<uint64_t> host_ram;

    Footprint footprint(const Layout& l, bool stream) const { return detail::footprint(spec, t, l, stream); }
    bool fits(const Layout& l, bool stream) const { return footprint(l, stream).vram.total() + margin <= cap; }

    // ngl: what the session is told for the layout (with the user's rules
    // the head's device alone does not say whether it exceeds n_layer).
    Option option(Candidate c, const Layout& l, int64_t ngl, bool stream) const {
        const Footprint f = footprint(l, stream);
        Option o;
        o.candidate = c;
        o.output_on_gpu = l.head == kAccelDevice;
        o.ngl = ngl;
        o.host_layers = c == Candidate::Layers ? 0 : l.k;
        o.vram_fits = f.vram.total() + margin <= cap;
        o.ram_fits = !host_ram || f.ram.total() <= *host_ram;
        o.weight_stream = f.streams;
        o.stream_bytes = f.stream_bytes;
        o.vram = f.vram;
        o.ram = f.ram;
        o.predicted = detail::predict(t, l, f, speeds);
        return o;
    }
};

double reference_seconds(const Prediction& p) {
    if (p.pp_tps <= 0.0 || p.tg_tps <= 0.0) return std::numeric_limits<double>::infinity();
    return kReferencePrompt / p.pp_tps + kReferenceGen / p.tg_tps;
}

// The faster decoder's reference request takes kPrefillLossLimit times as
// long: its prefill costs far more than its decode saves.
bool prefill_outweighs(const Option& fast, const Option& slow) {
    return reference_seconds(fast.predicted) > kPrefillLossLimit * reference_seconds(slow.predicted);
}

// Better to run: fits the device, then its host share fits the RAM, then
// decodes faster (beyond a tie) unless that costs a reference request more
// in prefill, then prefills faster (beyond a tie). Not better when tied, so
// the earlier candidate of kPreference keeps a tie.
bool better(const Option& a, const Option& b) {
    if (a.vram_fits != b.vram_fits) return a.vram_fits;
    if (a.ram_fits != b.ram_fits) return a.ram_fits;
    if (!rates_tie(a.predicted.tg_tps, b.predicted.tg_tps)) {
        const bool a_faster = a.predicted.tg_tps > b.predicted.tg_tps;
        return a_faster ? !prefill_outweighs(a, b) : prefill_outweighs(b, a);
    }
    if (!rates_tie(a.predicted.pp_tps, b.predicted.pp_tps)) return a.predicted.pp_tps > b.predicted.pp_tps;
    return false;
}

// The order candidates are weighed in, which decides a full tie: the
// fewest rules first ((a) none, (c) one --n-cpu-moe, (b) an -ot regex).
constexpr Candidate kPreference[] = {Candidate::Layers, Candidate::Experts, Candidate::Ffn};

// (a): the largest ngl that fits, from the top (with streaming the total
// need not grow with every layer); streaming is kept when some split
// leaves room for its slots, otherwise the layers get the room (the
// Session drops it the same way). Forced: that ngl, streaming if it fits.
struct LayersChoice {
    int64_t ngl = 0;
    bool stream = false;
};

LayersChoice choose_layers(const Context& c, const LayerModes& m, std::optional<int64_t> forced, bool wants_stream) {
    const auto largest = [&](bool stream) {
        int64_t ngl = c.t.n_layer + 1;
        while (ngl >= 0 && !c.fits(m.at(c.t, ngl), stream)) --ngl;
        return ngl;
    };
    LayersChoice r;
    r.stream = wants_stream;
    if (forced) {
        r.ngl = std::min(*forced, c.t.n_layer + 1);
        r.stream = r.stream && c.fits(m.at(c.t, r.ngl), true);
        return r;
    }
    r.ngl = r.stream ? largest(true) : -1;
    if (r.ngl < 0) {
        r.stream = false;
        r.ngl = std::max<int64_t>(largest(false), 0);
    }
    return r;
}

// (b), (c): for the head on the accelerator and on the host, the fewest
// layers [0, k) whose class stays on the host (at least one) that fit; the
// better of the two, if any fits.
std::optional<std::pair<Option, Layout>> choose_split(const Context& c, const SplitModes& m) {
    std::optional<std::pair<Option, Layout>> best;
    for (const int out : {kAccelDevice, kHostDevice}) {
        for (int64_t k = 1; k <= c.t.n_layer; ++k) {
            const Layout l{&m.lo, &m.hi, k, out, out};
            if (!c.fits(l, false)) continue;
            const Option o = c.option(m.candidate, l, c.t.n_layer + (out == kAccelDevice ? 1 : 0), false);
            if (!best || better(o, best->first)) best = std::make_pair(o, l);
            break;
        }
    }
    return best;
}

std::string layers_text(int64_t d, int64_t n) {
    if (d == 0) return "no layer";
    if (d == n) return fmt::format("all {} layers", n);
    return fmt::format("layers [0, {})", d);
}

std::string used_text(const Option& o, uint64_t margin, uint64_t cap) {
    return fmt::format("{} + margin {} of {}", format_bytes(o.vram.total()), format_bytes(margin), format_bytes(cap));
}

// Why this ngl and not one more: names what the next step would add and
// by how much it would overflow.
std::string explain_layers(const Context& c, const LayerModes& m, const Option& o, bool forced, bool stream) {
    const Tables& t = c.t;
    const uint64_t cap = c.cap;
    const uint64_t used = o.vram.total() + c.margin;
    if (forced) {
        return o.vram_fits ? fmt::format("--ngl {} was given: it fits, {}", o.ngl, used_text(o, c.margin, cap))
                           : fmt::format("--ngl {} was given: it does not fit, {} + margin {} exceeds {} by {}", o.ngl,
                                         format_bytes(o.vram.total()), format_bytes(c.margin), format_bytes(cap),
                                         format_bytes(used - cap));
    }
    if (o.ngl == t.n_layer + 1) {
        // A pipeline stage before the last has no head (planner/hosts.h).
        return fmt::format("all {} layers{} fit on the accelerator: {}", t.n_layer,
                           t.output_bytes() > 0 ? " and the output head" : "", used_text(o, c.margin, cap));
    }
    const uint64_t over = c.footprint(m.at(t, o.ngl + 1), stream).vram.total() + c.margin - cap;
    const int64_t il = std::min(o.ngl, t.n_layer);
    if (il == t.n_layer) {
        return fmt::format("all {} layers fit ({}); the output head ({}) would overflow by {}, so it runs on the CPU",
                           t.n_layer, used_text(o, c.margin, cap), format_bytes(t.output_bytes()), format_bytes(over));
    }
    if (il == 0) {
        return fmt::format("not even layer 0 fits: with its KV cache and the device's scratch it needs {} + margin {} "
                           "of {}, over by {}; every layer runs on the CPU",
                           format_bytes(over + cap - c.margin), format_bytes(c.margin), format_bytes(cap),
                           format_bytes(over));
    }
    return fmt::format("{} fit on the accelerator ({}); layer {} ({} weights + {} KV) would overflow by {}",
                       layers_text(il, t.n_layer), used_text(o, c.margin, cap), il,
                       format_bytes(t.weights[static_cast<size_t>(il) + 1] - t.weights[static_cast<size_t>(il)]),
                       format_bytes(t.kv[static_cast<size_t>(il)]), format_bytes(over));
}

const char* class_text(Candidate cand) { return cand == Candidate::Experts ? "experts" : "FFN"; }

// Why these layers' FFN (experts) and not one more layer's.
std::string explain_split(const Context& c, const SplitModes& m, const Option& o, const Layout& l) {
    const Tables& t = c.t;
    const std::string placed = fmt::format("{}: {}", option_text(o, t.n_layer), used_text(o, c.margin, c.cap));
    const int64_t k = l.k;
    const uint64_t moved = m.lo.sum(kHostDevice, k - 1, k).weights;
    Layout more = l;
    more.k = k - 1;
    const uint64_t over = c.footprint(more, false).vram.total() + c.margin - c.cap;
    return fmt::format("{}; the {} of layer {} ({}) would overflow by {}", placed, class_text(m.candidate), k - 1,
                       format_bytes(moved), format_bytes(over));
}

// Why a candidate was left out: even with every layer's class on the host,
// the rest does not fit.
std::string explain_missing(const Context& c, const SplitModes& m) {
    const Layout l{&m.lo, &m.hi, c.t.n_layer, kHostDevice, kHostDevice};
    const uint64_t need = c.footprint(l, false).vram.total();
    return fmt::format("{} does not fit: {} on the accelerator alone need {} + margin {} of {}",
                       candidate_letter(m.candidate),
                       m.candidate == Candidate::Experts ? "everything but the experts" : "the attention and KV caches",
                       format_bytes(need), format_bytes(c.margin), format_bytes(c.cap));
}

// The first line: which candidate won, over which runner-up, by how much.
std::string explain_winner(const Option& w, const Option& r, int64_t n_layer) {
    const std::string win = option_label(w, n_layer), run = option_label(r, n_layer);
    if (w.ram_fits && !r.ram_fits) {
        return fmt::format("{} chosen: its host share fits the RAM; the runner-up {} ({:.1f} tok/s predicted) does not",
                           win, run, r.predicted.tg_tps);
    }
    const double tg = w.predicted.tg_tps, rtg = r.predicted.tg_tps;
    if (!rates_tie(tg, rtg) && rtg > tg) {
        return fmt::format("{} chosen: the runner-up {} decodes faster ({:.1f} vs {:.1f} tok/s) but prefills at {:.1f} "
                           "against {:.1f} tok/s, so a {:g}-token prompt and {:g} tokens take {:.0f} s there against "
                           "{:.0f} s (over {:g}x)",
                           win, run, rtg, tg, r.predicted.pp_tps, w.predicted.pp_tps, kReferencePrompt,
                           kReferenceGen, reference_seconds(r.predicted), reference_seconds(w.predicted),
                           kPrefillLossLimit);
    }
    if (!rates_tie(tg, rtg)) {
        return fmt::format("{} chosen: {:.1f} tok/s decode predicted, {:.1f}% faster than the runner-up {} ({:.1f} "
                           "tok/s)",
                           win, tg, 100.0 * (tg / rtg - 1.0), run, rtg);
    }
    if (rates_tie(w.predicted.pp_tps, r.predicted.pp_tps)) {
        return fmt::format("{} chosen: it ties the runner-up {} on decode ({:.1f} vs {:.1f} tok/s) and prefill ({:.1f} "
                           "vs {:.1f} tok/s), within {:g}%; of tied candidates the one with the fewest rules is taken "
                           "((a) none, (c) one --n-cpu-moe, (b) an -ot regex)",
                           win, run, tg, rtg, w.predicted.pp_tps, r.predicted.pp_tps, 100.0 * kDecodeTieFraction);
    }
    return fmt::format("{} chosen: decode ties with the runner-up {} ({:.1f} vs {:.1f} tok/s, within {:g}%); prefill "
                       "decides, {:.1f} vs {:.1f} tok/s ({:+.1f}%)",
                       win, run, tg, rtg, 100.0 * kDecodeTieFraction, w.predicted.pp_tps, r.predicted.pp_tps,
                       100.0 * (w.predicted.pp_tps / r.predicted.pp_tps - 1.0));
}

void adopt(Plan& p, const Option& o) {
    p.candidate = o.candidate;
    p.ngl = o.ngl;
    p.host_layers = o.host_layers;
    p.output_on_gpu = o.output_on_gpu;
    p.vram_fits = o.vram_fits;
    p.ram_fits = o.ram_fits;
    p.fits = o.vram_fits && o.ram_fits;
    p.weight_stream = o.weight_stream;
    p.stream_bytes = o.stream_bytes;
    p.vram = o.vram;
    p.ram = o.ram;
    p.predicted = o.predicted;
}

// Weighs the candidates on an accelerator; fills the plan's choice and its
// first reasons. Returns the layout chosen.
Layout place_on_device(const model::ModelSpec& spec, const Tables& t, const PlanInputs& in, Context& c, Plan& p,
                       LayerModes& layer_modes, std::vector<SplitModes>& split) {
    if (in.stream_min_batch <= 0) {
        throw Error(fmt::format("--stream-min-batch: expected a positive value, found {}", in.stream_min_batch));
    }
    const bool wants_stream = in.weight_stream && t.n_ubatch >= in.stream_min_batch;
    p.user_rules = in.rules.any();
    layer_modes = p.user_rules ? rule_layer_modes(spec, t, in) : plain_layer_modes(spec, t);
    p.forced = in.ngl.has_value();
    const LayersChoice lc = choose_layers(c, layer_modes, in.ngl, wants_stream);
    const Layout la = layer_modes.at(t, lc.ngl);
    const Option a = c.option(Candidate::Layers, la, lc.ngl, lc.stream);
    p.weighed.push_back(a);
    std::vector<Layout> layouts{la};
    std::vector<std::string> missing;
    // Everything on the device is every candidate's best; given rules or
    // ngl leave nothing to weigh.
    const bool weigh = !p.forced && !p.user_rules && a.ngl <= t.n_layer;
    split.reserve(in.candidates.size());  // layouts point into it
    for (const Candidate cand : kPreference) {
        if (!weigh || cand == Candidate::Layers) continue;
        if (std::find(in.candidates.begin(), in.candidates.end(), cand) == in.candidates.end()) continue;
        if (cand == Candidate::Experts && spec.hp.n_expert == 0) continue;
        split.push_back(split_modes(spec, t, cand));
        if (const auto s = choose_split(c, split.back())) {
            p.weighed.push_back(s->first);
            layouts.push_back(s->second);
        } else {
            missing.push_back(explain_missing(c, split.back()));
        }
    }
    size_t win = 0;
    for (size_t i = 1; i < p.weighed.size(); ++i) {
        if (better(p.weighed[i], p.weighed[win])) win = i;
    }
    std::optional<size_t> runner;
    for (size_t i = 0; i < p.weighed.size(); ++i) {
        if (i != win && (!runner || better(p.weighed[i], p.weighed[*runner]))) runner = i;
    }
    const Option chosen = p.weighed[win];
    if (runner) p.runner_up = p.weighed[*runner];
    p.weighed.erase(p.weighed.begin() + static_cast<std::ptrdiff_t>(win));
    p.weighed.insert(p.weighed.begin(), chosen);
    adopt(p, chosen);
    p.rules = p.user_rules ? in.rules : option_rules(chosen, in.first_layer);
    if (p.runner_up) p.reasons.push_back(explain_winner(chosen, *p.runner_up, t.n_layer));
    if (chosen.candidate == Candidate::Layers) {
        std::string why = explain_layers(c, layer_modes, chosen, p.forced, lc.stream);
        if (p.user_rules) why += fmt::format(" (with the given placement rules: {})", placement_flags(p));
        p.reasons.push_back(why);
    } else {
        const auto it = std::find_if(split.begin(), split.end(),
                                     [&](const SplitModes& m) { return m.candidate == chosen.candidate; });
        p.reasons.push_back(explain_split(c, *it, chosen, layouts[win]));
    }
    for (std::string& m : missing) p.reasons.push_back(std::move(m));
    if (p.weight_stream) {
        p.reasons.push_back(fmt::format("weight streaming: prompts of {}+ tokens multiply the CPU layers' matrices on "
                                        "the accelerator, which reserves {} for it (--no-stream gives that room to "
                                        "layers)",
                                        in.stream_min_batch, format_bytes(p.stream_bytes)));
    } else if (wants_stream && chosen.candidate == Candidate::Layers && std::min(p.ngl, t.n_layer) < t.n_layer) {
        p.reasons.push_back("weight streaming off: its slots do not fit beside the layers");
    } else if (wants_stream && chosen.candidate != Candidate::Layers) {
        p.reasons.push_back("weight streaming off: it streams only whole layers left on the CPU, and this placement "
                            "keeps every layer's attention on the accelerator");
    }
    return layouts[win];
}

// ", rotated (K by H_128, V by H_64)": what a quantized cache stores turned
// (model::KvRotation), as llama.cpp does; "" when nothing is.
std::string rotation_note(model::KvRotation r) {
    if (r.k == 0 && r.v == 0) return "";
    std::string parts;
    if (r.k > 0) parts = fmt::format("K by H_{}", r.k);
    if (r.v > 0) parts += fmt::format("{}V by H_{}", parts.empty() ? "" : ", ", r.v);
    return fmt::format(", stored rotated ({}, Walsh-Hadamard, as llama.cpp)", parts);
}

}  // namespace

uint64_t default_margin(uint64_t capacity) {
    const auto pct = static_cast<uint64_t>(static_cast<double>(capacity) * kDefaultMarginFraction);
    return std::min(std::max(pct, kDefaultMarginFloor), capacity / 8);
}

DeviceBytes device_bytes(const model::ModelSpec& spec, int64_t ngl, int64_t n_ctx, int64_t n_ubatch,
                         model::CacheType cache_type, bool weight_stream, int64_t n_seq) {
    const Tables t = detail::make_tables(spec, n_ctx, n_ubatch, cache_type, n_seq);
    const LayerModes m = plain_layer_modes(spec, t);
    return detail::footprint(spec, t, m.at(t, ngl), weight_stream).vram;
}

DeviceBytes host_bytes(const model::ModelSpec& spec, int64_t ngl, bool has_device, int64_t n_ctx, int64_t n_ubatch,
                       model::CacheType cache_type, int64_t n_seq) {
    const Tables t = detail::make_tables(spec, n_ctx, n_ubatch, cache_type, n_seq);
    const LayerModes m = plain_layer_modes(spec, t);
    return detail::footprint(spec, t, m.at(t, has_device ? ngl : 0), false).ram;
}

Plan plan(const model::ModelSpec& spec, const PlanInputs& in) {
    if (in.device_capacities.size() > 1) return detail::plan_devices(spec, in);
    if (in.device_capacities.size() == 1) {
        PlanInputs one = in;
        one.device_capacity = in.device_capacities[0];
        one.device_capacities.clear();
        return plan(spec, one);
    }
    Tables t = detail::make_tables(spec, in.n_ctx, in.n_ubatch, in.cache_type, in.n_seq);
    detail::trim_for_stage(t, spec, in.stage_embeds, in.stage_outputs);
    Plan p;
    p.n_layer = t.n_layer;
    p.n_ctx = t.n_ctx;
    p.n_ubatch = t.n_ubatch;
    p.cache_type = in.cache_type;
    p.kv_rotation = model::kv_rotation(spec.hp, in.cache_type);
    p.has_device = in.device_capacity.has_value();
    p.capacity = in.device_capacity;
    p.host_ram = in.host_ram;
    p.stream_min_batch = in.stream_min_batch;
    Context c{spec, t, {}, 0, 0, in.host_ram};
    detail::Speeds& v = c.speeds;
    v.cpu_gbps = value_or_default(in.cpu_gbps, kDefaultCpuGBps, "cpu_gbps", p.assumptions);
    v.gpu_gbps = value_or_default(in.gpu_gbps, kDefaultGpuGBps, "gpu_gbps", p.assumptions);
    v.pcie_gbps = value_or_default(in.pcie_gbps, kDefaultPcieGBps, "pcie_gbps", p.assumptions);
    v.cpu_gflops = value_or_default(in.cpu_gflops, kDefaultCpuGflops, "cpu_gflops", p.assumptions);
    v.gpu_gflops = value_or_default(in.gpu_gflops, kDefaultGpuGflops, "gpu_gflops", p.assumptions);
    fill_costs(in, v, &p.assumptions);
    if (in.ngl && *in.ngl < 0) throw Error(fmt::format("--ngl: expected a value >= 0, found {}", *in.ngl));
    if (in.rules.n_cpu_moe < 0) {
        throw Error(fmt::format("--n-cpu-moe: expected a value >= 0, found {}", in.rules.n_cpu_moe));
    }

    LayerModes layer_modes;
    std::vector<SplitModes> split;
    Layout chosen;
    if (!p.has_device) {
        if (in.ngl && *in.ngl > 0) {
            throw Error(fmt::format("--ngl {} asks for layers on an accelerator, but there is none; give --vram SIZE "
                                    "to plan for one",
                                    *in.ngl));
        }
        p.forced = in.ngl.has_value();
        layer_modes = plain_layer_modes(spec, t);
        chosen = layer_modes.at(t, 0);
        const Option o = c.option(Candidate::Layers, chosen, 0, false);
        p.weighed.push_back(o);
        adopt(p, o);
        p.vram = {};
        p.vram_fits = true;
        p.fits = p.ram_fits;
        p.reasons.push_back(fmt::format("no accelerator: all {} layers and the output head run on the CPU", t.n_layer));
    } else {
        c.cap = *in.device_capacity;
        c.margin = p.margin = in.margin ? *in.margin : default_margin(c.cap);
        chosen = place_on_device(spec, t, in, c, p, layer_modes, split);
        if (!in.stage_outputs) {
            // A stage without the head: the unit past its last layer is
            // empty. Counted, it would take the next stage's first layer
            // into this one's -ngl (one device) or a device's share of the
            // split (several).
            const auto cap_ngl = [&](Option& o) { o.ngl = std::min(o.ngl, t.n_layer); };
            for (Option& o : p.weighed) cap_ngl(o);
            if (p.runner_up) cap_ngl(*p.runner_up);
            p.ngl = std::min(p.ngl, t.n_layer);
        }
    }
    if (in.host_ram) {
        p.reasons.push_back(p.ram_fits ? fmt::format("host RAM: {} of {}", format_bytes(p.ram.total()),
                                                     format_bytes(*in.host_ram))
                                       : fmt::format("host RAM short, so this does not fit: {} needed but {} given; "
                                                     "the weights are mapped, so they page from disk and decoding "
                                                     "runs far below the prediction",
                                                     format_bytes(p.ram.total()), format_bytes(*in.host_ram)));
    }
    p.reasons.push_back(fmt::format("KV cache: context {}, {}{}, {} in all ({} on the accelerator, {} on the CPU)",
                                    t.n_ctx, cache_type_name(in.cache_type), rotation_note(p.kv_rotation),
                                    format_bytes(p.vram.kv + p.ram.kv), format_bytes(p.vram.kv),
                                    format_bytes(p.ram.kv)));
    const auto reads = detail::decode_reads(t, chosen);
    p.reasons.push_back(fmt::format("decode reads {} per token on the CPU ({:.2f} ms at {:g} GB/s) and {} on the "
                                    "accelerator ({:.2f} ms at {:g} GB/s), weights and KV cache",
                                    format_bytes(reads[kHostDevice]),
                                    static_cast<double>(reads[kHostDevice]) / (v.cpu_gbps * 1e6), v.cpu_gbps,
                                    format_bytes(reads[kAccelDevice]),
                                    static_cast<double>(reads[kAccelDevice]) / (v.gpu_gbps * 1e6), v.gpu_gbps));
    return p;
}

bool KernelCosts::empty() const {
    return matvec_gbps.empty() && matvec_cached_gbps.empty() && gemm_small_gflops.empty() &&
           matvec_narrow_gbps.empty() && gemm_small_narrow_gflops.empty() && gemm_few_gflops.empty() &&
           gemm_small_by_cols.empty() &&
           gemm_large_gflops.empty() && !cache_bytes && !matmul_call_s && !batch_call_s && !pool_op_s &&
           !inline_op_s && !batch_s && !inline_op_elem_s && !pool_op_elem_s && attn_pos_s.empty() && !crossing_s && !copy_gbps;
}

double predict_seconds(const model::ModelSpec& spec, const PlanInputs& in, const Plan& p, const Workload& w) {
    if (w.n_prompt < 0 || w.n_gen < 0 || w.n_depth < 0) {
        throw Error(fmt::format("predict: expected token counts >= 0, found prompt {}, generated {}, depth {}",
                                w.n_prompt, w.n_gen, w.n_depth));
    }
    const Tables t = detail::make_tables(spec, in.n_ctx, in.n_ubatch, in.cache_type, in.n_seq);
    if (w.n_depth + w.n_prompt + w.n_gen > t.n_ctx) {
        throw Error(fmt::format("predict: {} tokens do not fit the context of {}", w.n_depth + w.n_prompt + w.n_gen,
                                t.n_ctx));
    }
    detail::Speeds v{};
    std::vector<Assumption> ignored;
    v.cpu_gbps = value_or_default(in.cpu_gbps, kDefaultCpuGBps, "cpu_gbps", ignored);
    v.gpu_gbps = value_or_default(in.gpu_gbps, kDefaultGpuGBps, "gpu_gbps", ignored);
    v.pcie_gbps = value_or_default(in.pcie_gbps, kDefaultPcieGBps, "pcie_gbps", ignored);
    v.cpu_gflops = value_or_default(in.cpu_gflops, kDefaultCpuGflops, "cpu_gflops", ignored);
    v.gpu_gflops = value_or_default(in.gpu_gflops, kDefaultGpuGflops, "gpu_gflops", ignored);
    fill_costs(in, v, nullptr);
    // The plan's placement, rebuilt as plan() laid it out.
    LayerModes layer_modes;
    std::optional<SplitModes> split;
    Layout l;
    if (!p.has_device || p.candidate == Candidate::Layers) {
        layer_modes = p.has_device && p.user_rules ? rule_layer_modes(spec, t, in) : plain_layer_modes(spec, t);
        l = layer_modes.at(t, p.has_device ? p.ngl : 0);
    } else {
        split = split_modes(spec, t, p.candidate);
        const int out = p.output_on_gpu ? kAccelDevice : kHostDevice;
        l = Layout{&split->lo, &split->hi, p.host_layers, out, out};
    }
    const detail::Footprint f = detail::footprint(spec, t, l, p.weight_stream);
    double sec = 0.0;
    for (int64_t pos = w.n_depth, left = w.n_prompt; left > 0;) {
        const int64_t n = std::min(left, t.n_ubatch);
        left -= n;
        sec += detail::batch_seconds(t, l, f, v, n, pos, left == 0);
        pos += n;
    }
    // A step's attention grows linearly with its position: the steps at
    // their mean position cost what they cost one by one.
    if (w.n_gen > 0) {
        sec += static_cast<double>(w.n_gen) *
               detail::batch_seconds(t, l, f, v, 1, w.n_depth + w.n_prompt + (w.n_gen - 1) / 2);
    }
    return sec;
}

}  // namespace tandem::planner
