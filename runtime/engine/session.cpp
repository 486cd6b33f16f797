#include "runtime/engine/session.h"

#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <utility>

#include <fmt/format.h>

#include "kernels_cpu/thread_pool.h"
#include "runtime/engine/host_weight_arena.h"
#include "runtime/engine/cpu_device.h"
#include "runtime/engine/device_registry.h"
#include "runtime/engine/executor.h"
#include "runtime/engine/sequence_fit.h"
#include "runtime/engine/sequence_state.h"
#include "runtime/engine/session_plan.h"
#include "runtime/common/error.h"

namespace tandem {

namespace {

// A backend's per-tensor byte reports turned into (done, total) for a
// progress callback.
std::function<void(uint64_t)> cumulative(std::function<void(uint64_t, uint64_t)> report, uint64_t total) {
    return [report = std::move(report), total, done = uint64_t{0}](uint64_t bytes) mutable {
        done += bytes;
        report(std::min(done, total), total);
    };
}

}  // namespace

struct Session::Impl {
    const gguf::File& file;
    const model::ModelSpec& spec;
    const model::HParams& hp;
    SessionPlan plan;  // placement, memory and streaming, decided before anything loads
    SessionOptions& opt = plan.opt;
    Placement& placement = plan.placement;
    cpu::SimdLevel level;
    cpu::ThreadPool pool;
    // Each layer's KV cells: which position and sequences each cell holds.
    // The session owns them (the devices hold the rows and read these), so
    // forgetting, sharing and clearing positions happen here once. Before
    // the devices: they are destroyed after them.
    std::vector<std::unique_ptr<KvCells>> cells;
    std::vector<std::vector<int32_t>> token_cells;  // [il][t]: the micro-batch's cells
    std::unique_ptr<CpuDevice> host;
    // The accelerators, [d - 1] for device d; each present only when it
    // holds something (or, the first, streams).
    std::vector<std::unique_ptr<Device>> accels;
    std::unique_ptr<LayerExecutor> recipe;
    WeightStream* stream = nullptr;  // owned by the first accelerator
    std::string stream_note;
    int64_t streamed_batches = 0;
    ActivationObserver* observer = nullptr;  // set_activation_observer
    std::vector<int32_t> tokens, pos, seq;  // one micro-batch
    // A pipeline stage's layers [first, end); the first stage embeds, the
    // last runs the head; `next` reaches the later stages (the first's).
    int64_t first = 0, end = 0;
    std::shared_ptr<StageLink> next;
    // Batches submitted and not collected, oldest first: each one's rows,
    // and the spans of them the later stages still owe (in send order).
    struct Flight {
        std::vector<float> rows;
        std::vector<std::span<float>> owed;
    };
    std::deque<Flight> flights;
    std::vector<float> spare_rows;  // a collected caller's old buffer, for the next submit
    bool embeds() const { return first == 0; }
    bool outputs() const { return end == hp.n_layer && !next; }
    bool owns(int64_t il) const { return il >= first && il < end; }
    bool pipelined() const { return next || first != 0 || end != hp.n_layer; }
    // Device d holds a tensor or cache of this stage's layers, or its head.
    bool uses_here(int d) const {
        if (outputs() && (placement.head == d || placement.of(spec.get(model::GlobalTensor::OutputNorm)) == d)) return true;
        for (int64_t il = first; il < end; ++il) {
            if (placement.kv[static_cast<size_t>(il)] == d) return true;
            for (const gguf::TensorInfo* t : spec.layers[static_cast<size_t>(il)].tensors) {
                if (t && placement.of(t) == d) return true;
            }
        }
        return false;
    }

    static SessionPlan plan_for(const gguf::File& f, const model::ModelSpec& s, const SessionOptions& o) {
        if (f.header_only()) {
            throw Error(fmt::format("{}: this file was written by `tandem synth --header-only` and holds no weights; "
                                    "it can be planned but not run",
                                    f.name()));
        }
        const bool mapped = f.mapped() && !f.locked();
        return plan_session(s, o, mapped, mapped && o.copy_host_weights ? available_ram() : std::nullopt);
    }

    Impl(const gguf::File& f, const model::ModelSpec& s, const SessionOptions& o)
        : file(f),
          spec(s),
          hp(s.hp),
          plan(plan_for(f, s, o)),
          level(o.simd_level ? *o.simd_level : o.simd_from_env ? cpu::simd_level_from_env() : cpu::best_simd_level()),
          pool(o.n_threads) {
        end = hp.n_layer;
        if (opt.next_stages) {
            next = opt.next_stages;
            end = next->open(file, hp.n_layer, opt);
        } else if (opt.stage_end >= 0) {
            if (opt.stage_first < 0 || opt.stage_first >= opt.stage_end || opt.stage_end > hp.n_layer) {
                throw Error(fmt::format("pipeline stage: layers [{}, {}) are not a range of the model's {}",
                                        opt.stage_first, opt.stage_end, hp.n_layer));
            }
            first = opt.stage_first;
            end = opt.stage_end;
        }
        DeviceConfig config;
        config.n_ctx = opt.n_ctx;
        config.n_ubatch = opt.n_ubatch;
        config.cache_type = opt.cache_type;
        config.copy_host_weights = plan.copy_host_weights;
        config.cpu_blas = opt.cpu_blas;
        DeviceConfig host_config = config;
        if (plan.copy_host_weights && opt.host_copy_progress) {
            host_config.on_upload = cumulative(opt.host_copy_progress, plan.host_matrix_bytes);
        }
        host = std::make_unique<CpuDevice>("cpu", std::nullopt, file, spec, host_config, pool, level);
        const std::vector<std::string> names = parse_accelerators(opt.device);
        accels.resize(names.size());
        for (size_t i = 0; i < names.size(); ++i) {
            const int d = static_cast<int>(i) + 1;
            const bool holds = uses_here(d);
            // Weight streaming goes through the first accelerator.
            const bool streams = d == kAccelDevice && plan.wants_stream;
            if (!holds && !streams) continue;
            DeviceConfig accel_config = config;
            accel_config.copy_host_weights = false;
            accel_config.host_ledger = &host->mutable_ledger();
            if (opt.upload_progress) {
                accel_config.on_upload = cumulative(opt.upload_progress, placement.weight_bytes(d));
            }
            try {
                accels[i] = open_accelerator(names[i], capacity(i), file, spec, accel_config, pool, level);
            } catch (const Error& e) {
                if (holds) throw;
                // Only streaming wanted the device: without it the CPU runs all.
                stream_note = fmt::format("weight streaming off: {}", e.what());
            }
        }
        load();
        // Last, so that a device too small for the slots still holds every
        // tensor it can and only loses the streaming.
        if (!accels.empty() && accels[0] && plan.wants_stream) {
            Device& first = *accels[0];
            try {
                stream = first.enable_weight_stream(plan.stream_first);
                if (!stream) stream_note = fmt::format("weight streaming off: {} cannot stream", first.name());
            } catch (const Error& e) {
                // Too little memory for the slots, or a library the stream
                // needs (cuBLAS) failing to start: the CPU runs those layers.
                stream_note = fmt::format("weight streaming off: {}", e.what());
            }
            if (!stream && !uses_here(kAccelDevice)) accels[0].reset();  // nothing to do costs nothing
        }
        // An accelerator that holds nothing runs nothing: its index maps to the host.
        std::vector<DeviceOps*> devices{host.get()};
        for (const auto& a : accels) devices.push_back(a ? static_cast<DeviceOps*>(a.get()) : host.get());
        recipe = std::make_unique<LayerExecutor>(spec, placement, std::move(devices),
                                                 model::kv_rotation(hp, opt.cache_type));
        for (auto* v : {&tokens, &pos, &seq}) v->resize(static_cast<size_t>(opt.n_ubatch));
    }

    Device& device(int d) {
        return d == kHostDevice ? static_cast<Device&>(*host) : *accels.at(static_cast<size_t>(d - 1));
    }
    const Device& device(int d) const { return const_cast<Impl*>(this)->device(d); }

    // The capacity accelerator i (0-based) may use: SessionOptions::device_capacity.
    std::optional<uint64_t> capacity(size_t i) const {
        const auto& c = opt.device_capacity;
        if (c.empty()) return std::nullopt;
        return c.size() == 1 ? c[0] : c.at(i);
    }

    // Every tensor and cache onto its device, in layer order.
    void load() {
        // The embedding lookup stays on the host, as in llama.cpp.
        if (embeds()) host->account_token_embd();
        for (int64_t il = 0; il < hp.n_layer; ++il) {
            const auto& ls = spec.layers[static_cast<size_t>(il)];
            // Every stage keeps every layer's cells (positions only, cheap),
            // and the weights and cache rows of its own layers.
            for (size_t r = 0; r < ls.tensors.size() && owns(il); ++r) {
                const gguf::TensorInfo* t = ls.tensors[r];
                if (!t) continue;
                DeviceStorage& d = device(placement.of(t));
                // Biases stay floats, an expert's row of them included.
                if (t->n_rows() > 1 && !model::layer_tensor_rule(static_cast<model::LayerTensor>(r)).bias) {
                    d.load_matrix(*t);
                } else {
                    d.load_vector(*t);
                }
            }
            cells.push_back(std::make_unique<KvCells>(
                model::kv_cells_for_layer(spec, il, opt.n_ctx, opt.n_ubatch, opt.n_seq_max),
                model::kv_ring_span(spec, il, opt.n_ctx, opt.n_ubatch), opt.kv_per_sequence ? opt.n_seq_max : 1));
            if (owns(il)) device(placement.kv[static_cast<size_t>(il)]).load_kv(il, *cells.back());
        }
        if (outputs()) {
            const gguf::TensorInfo* norm = spec.get(model::GlobalTensor::OutputNorm);
            device(placement.of(norm)).load_vector(*norm);
            device(placement.head).load_matrix(spec.output_head());
        }
        host->allocate_workspace(outputs() && placement.head == kHostDevice);
        for (size_t i = 0; i < accels.size(); ++i) {
            const int d = static_cast<int>(i) + 1;
            if (!accels[i] || !uses_here(d)) continue;
            accels[i]->allocate_workspace(outputs() && placement.head == d);
            accels[i]->finish_loading();
        }
        // The host multiplies its own copies of its matrices: their pages of
        // the mapping leave this process's memory, else each is resident
        // twice (read again, they come back from the file).
        if (plan.copy_host_weights) {
            for (const auto& [t, d] : placement.tensor) {
                if (d == kHostDevice && t->n_rows() > 1) file.drop_resident(*t);
            }
            if (outputs() && placement.head == kHostDevice) file.drop_resident(spec.output_head());
        }
    }

    // The rows a batch asks for; throws for a token the model cannot take.
    size_t checked_outputs(std::span<const BatchToken> batch) const {
        if (batch.empty()) throw Error("eval: no tokens to evaluate");
        size_t n_out = 0;
        for (const BatchToken& b : batch) {
            if (b.id < 0 || b.id >= hp.n_vocab) {
                throw Error(fmt::format("token id {} is outside the vocabulary [0, {})", b.id, hp.n_vocab));
            }
            check_seq_id(b.seq);
            if (b.pos < 0 || b.pos >= opt.n_ctx) {
                throw Error(fmt::format("position {} is outside the context [0, {}); use a larger -c", b.pos, opt.n_ctx));
            }
            n_out += b.logits ? 1 : 0;
        }
        return n_out;
    }

    void set_order(bool single) {
        for_each_device([&](DeviceOps& d) { d.set_single_token_order(single); });
    }

    // A batch submitted and collected at once. hidden: each token that
    // asks gets its final hidden state (n_embd floats,
    // Session::eval_batch_hidden) instead of logits.
    void eval_now(std::span<const BatchToken> batch, bool single_order, std::vector<float>& out, bool hidden = false) {
        if (!flights.empty()) {
            throw Error(fmt::format("eval: {} batches were submitted and not collected", flights.size()));
        }
        submit(batch, single_order, hidden);
        collect(out);
    }

    // The batch in its micro-batches. A pipeline's first stage sends each
    // on, the later stages working on it while this one evaluates the
    // next, and collect() takes the logits back in order.
    void submit(std::span<const BatchToken> batch, bool single_order, bool hidden) {
        if (!embeds()) throw Error("eval: a later pipeline stage evaluates what the first sends (eval_stage)");
        // The last stage sends logits back, never the hidden state.
        if (hidden && next) throw Error("embeddings: not supported with --pipeline");
        const size_t n_out = checked_outputs(batch);
        Flight& f = flights.emplace_back();
        // Every device back to its fastest order whatever happens; should
        // the batch throw, every logits message sent for it (and for the
        // batches before it) is taken, so the link stays in step, and
        // nothing of it stays in flight.
        struct Restore {
            Impl& m;
            ~Restore() {
                m.set_order(false);
                if (std::uncaught_exceptions() == 0) return;
                try {
                    for (Flight& g : m.flights) {
                        for (std::span<float> rows : std::exchange(g.owed, {})) m.next->receive_logits(rows);
                    }
                } catch (...) {  // the link itself failed: its own error is the one to report
                }
                m.flights.pop_back();
            }
        } restore{*this};
        f.rows = std::move(spare_rows);  // a step's rows, reused rather than allocated and zeroed anew
        f.rows.resize(n_out * static_cast<size_t>(hidden ? hp.n_embd : hp.n_vocab));
        set_order(single_order);
        float* out = f.rows.data();
        const auto n_tokens = static_cast<int64_t>(batch.size());
        for (int64_t start = 0; start < n_tokens; start += opt.n_ubatch) {
            const int64_t n = std::min(opt.n_ubatch, n_tokens - start);
            const auto micro = batch.subspan(static_cast<size_t>(start), static_cast<size_t>(n));
            host->embed(std::span<const int32_t>(tokens.data(), static_cast<size_t>(take(micro))));
            recipe->x_written_on(kHostDevice);
            run_layers(n);
            if (next) {
                const float* x = recipe->x_on_host(n);
                next->send_batch(micro, single_order, std::span(x, static_cast<size_t>(n * hp.n_embd)));
                const auto rows = std::count_if(micro.begin(), micro.end(), [](const BatchToken& b) { return b.logits; });
                if (rows > 0) f.owed.emplace_back(out, static_cast<size_t>(rows * hp.n_vocab));
                out += rows * hp.n_vocab;
                continue;
            }
            out = head(micro, out, hidden);
        }
    }

    void collect(std::vector<float>& rows) {
        if (flights.empty()) throw Error("collect: no batch was submitted");
        // Taken off first: should the link fail, its rows are gone anyway.
        Flight f = std::move(flights.front());
        flights.pop_front();
        for (std::span<float> r : f.owed) next->receive_logits(r);
        rows.swap(f.rows);
        spare_rows = std::move(f.rows);
    }

    // The micro-batch's ids, positions and sequences into the step's
    // buffers; returns its size.
    int64_t take(std::span<const BatchToken> micro) {
        for (size_t t = 0; t < micro.size(); ++t) {
            tokens[t] = micro[t].id;
            pos[t] = micro[t].pos;
            seq[t] = micro[t].seq;
        }
        return static_cast<int64_t>(micro.size());
    }

    // This stage's layers over the micro-batch in the step's buffers, X
    // written: cells placed (taken back if a layer throws).
    void run_layers(int64_t n) {
        RecipeBatch rb;
        rb.n = n;
        rb.pos = std::span<const int32_t>(pos.data(), static_cast<size_t>(n));
        rb.seq = std::span<const int32_t>(seq.data(), static_cast<size_t>(n));
        rb.observer = observer;
        rb.first_layer = first;
        rb.end_layer = end;
        // A long enough micro-batch multiplies the host layers' matrices
        // on the accelerator (the hidden state itself stays here).
        if (stream != nullptr && n >= opt.stream_min_batch) {
            rb.stream = stream;
            rb.stream_first = plan.stream_first;
            ++streamed_batches;
        }
        place_cells(n);
        rb.cells = token_cells;
        try {
            recipe->layers(rb);
        } catch (...) {
            forget_cells(n);
            throw;
        }
    }

    // The head over each run of consecutive tokens that want logits, into
    // out (hidden: the output norm only, the head's input); returns the end
    // of what was written.
    float* head(std::span<const BatchToken> micro, float* out, bool hidden = false) {
        const auto n = static_cast<int64_t>(micro.size());
        for (int64_t t = 0; t < n;) {
            if (!micro[static_cast<size_t>(t)].logits) {
                ++t;
                continue;
            }
            int64_t e = t + 1;
            while (e < n && micro[static_cast<size_t>(e)].logits) ++e;
            if (hidden) {
                recipe->hidden(t, e - t, out);
                out += (e - t) * hp.n_embd;
            } else {
                recipe->output(t, e - t, out, observer);
                out += (e - t) * hp.n_vocab;
            }
            t = e;
        }
        return out;
    }

    void eval_stage(std::span<const BatchToken> micro, std::span<const float> x, std::vector<float>& out) {
        const auto n = static_cast<int64_t>(micro.size());
        if (n == 0 || n > opt.n_ubatch || x.size() != static_cast<size_t>(n * hp.n_embd)) {
            throw Error(fmt::format("pipeline stage: a micro-batch of {} tokens with {} floats, expected 1 to {} "
                                    "tokens of {} floats each",
                                    n, x.size(), opt.n_ubatch, hp.n_embd));
        }
        for (const BatchToken& b : micro) {
            if (b.seq < 0 || b.seq >= kMaxSequences || b.pos < 0 || b.pos >= opt.n_ctx) {
                throw Error(fmt::format("pipeline stage: sequence {} position {} is outside the cache", b.seq, b.pos));
            }
        }
        take(micro);
        host->write_act(Act::X, x.data(), n * hp.n_embd);
        recipe->x_written_on(kHostDevice);
        run_layers(n);
        if (outputs()) {
            const auto rows = std::count_if(micro.begin(), micro.end(), [](const BatchToken& b) { return b.logits; });
            out.resize(static_cast<size_t>(rows * hp.n_vocab));
            head(micro, out.data());
            return;
        }
        const float* h = recipe->x_on_host(n);
        out.assign(h, h + n * hp.n_embd);
    }

    void eval(std::span<const int32_t> ids, bool all_logits, std::vector<float>& logits) {
        const auto n_tokens = static_cast<int64_t>(ids.size());
        if (n_tokens == 0) throw Error("eval: no tokens to evaluate");
        const int64_t past = n_past();
        if (past + n_tokens > opt.n_ctx) {
            throw Error(fmt::format("context full: {} tokens already in a context of {}, {} more do not fit; use a "
                                    "larger -c",
                                    past, opt.n_ctx, n_tokens));
        }
        std::vector<BatchToken> batch(static_cast<size_t>(n_tokens));
        for (int64_t t = 0; t < n_tokens; ++t) {
            batch[static_cast<size_t>(t)] = {ids[static_cast<size_t>(t)], static_cast<int32_t>(past + t), 0,
                                             all_logits || t == n_tokens - 1};
        }
        eval_now(batch, false, logits);
    }

    // Each layer's cell for each token of the micro-batch (KvCells::place:
    // throws when a layer has none free; then nothing stays placed).
    void place_cells(int64_t n) {
        token_cells.resize(cells.size());
        for (size_t il = 0; il < cells.size(); ++il) {
            token_cells[il].resize(static_cast<size_t>(n));
            for (int64_t t = 0; t < n; ++t) {
                try {
                    token_cells[il][static_cast<size_t>(t)] =
                        static_cast<int32_t>(cells[il]->place(seq[static_cast<size_t>(t)], pos[static_cast<size_t>(t)]));
                } catch (...) {
                    forget_cells(n, il, t);
                    throw;
                }
            }
        }
    }
    // Takes the micro-batch's positions off the cells placed so far: every
    // layer before `il`, and the first `t` tokens of il.
    void forget_cells(int64_t n, size_t il = SIZE_MAX, int64_t t = 0) {
        for (size_t l = 0; l < cells.size() && l <= il; ++l) {
            const int64_t placed = l < il ? n : t;
            for (int64_t i = 0; i < placed; ++i) {
                const int32_t p = pos[static_cast<size_t>(i)];
                cells[l]->remove(seq[static_cast<size_t>(i)], p, p + 1);
            }
        }
    }

    // What the caches hold: the KV cells are the one record of positions.
    int32_t seq_pos_max(int32_t s) const {
        if (s < 0 || s >= kMaxSequences) return -1;
        // Every layer holds the same positions (a window's layer drops old
        // ones, never the newest).
        return cells.empty() ? -1 : cells.front()->seq_pos_max(s);
    }

    int64_t n_past() const { return seq_pos_max(0) + 1; }

    void remove_positions(int32_t s, int32_t p0, int32_t p1) {
        if (s >= kMaxSequences) throw Error(fmt::format("sequence id {} is outside [0, {})", s, kMaxSequences));
        for (auto& c : cells) c->remove(s, p0, p1);
        if (next) next->remove_positions(s, p0, p1);
    }

    void copy_sequence(int32_t src, int32_t dst, int32_t p0, int32_t p1) {
        check_seq_id(src);
        check_seq_id(dst);
        for (auto& c : cells) c->copy_seq(src, dst, p0, p1);
        if (next) next->copy_sequence(src, dst, p0, p1);
    }

    // ---- one sequence's state (save_sequence, restore_sequence, held_prefix)
    mutable std::optional<ModelFingerprint> fingerprint_;

    const ModelFingerprint& fingerprint() const {
        if (!fingerprint_) fingerprint_ = model_fingerprint(file, static_cast<uint64_t>(hp.n_vocab));
        return *fingerprint_;
    }

    const DeviceKv& kv_device(int64_t il) const {
        return device(placement.kv[static_cast<size_t>(il)]);
    }
    DeviceKv& kv_device(int64_t il) { return device(placement.kv[static_cast<size_t>(il)]); }

    int32_t held_prefix(int32_t s, int32_t n) const {
        return tandem::held_prefix(cells, hp.sliding_window, s, n);
    }

    // The rows of sequence s in layer il as stored, or none (with the row
    // sizes) for a layer another pipeline stage holds.
    KvSeqRows layer_rows(int64_t il, int32_t s) const {
        if (owns(il)) return kv_device(il).kv_read_rows(il, cells[static_cast<size_t>(il)]->cells_of(s));
        KvSeqRows none;
        none.k_row_bytes = static_cast<uint32_t>(*quant::row_bytes(opt.cache_type.k, hp.k_dim()));
        none.v_row_bytes = static_cast<uint32_t>(*quant::row_bytes(opt.cache_type.v, hp.kv_v_dim()));
        return none;
    }

    // Under a pipeline every stage saves its own layers' rows; the first
    // gathers the later stages' (StageLink::save_sequence), so the blob is
    // the one a single process writes.
    std::vector<uint8_t> save_sequence(int32_t s, std::span<const int32_t> ids) const {
        check_seq_id(s);
        SequenceState st;
        st.model = fingerprint();
        st.n_layer = static_cast<uint32_t>(hp.n_layer);
        st.cache_type = model::cache_type_code(opt.cache_type);
        for (const int32_t id : ids) {
            if (id < 0 || id >= hp.n_vocab) {
                throw Error(fmt::format("save_sequence: token id {} is outside the vocabulary [0, {})", id, hp.n_vocab));
            }
        }
        st.tokens.assign(ids.begin(), ids.end());
        st.layers.reserve(static_cast<size_t>(hp.n_layer));
        for (int64_t il = 0; il < hp.n_layer; ++il) st.layers.push_back(layer_rows(il, s));
        if (next) {
            // Each layer is one stage's: a later stage's blob holds rows only
            // in its own layers (where the sequence has any).
            for (const std::vector<uint8_t>& blob : next->save_sequence(s)) {
                SequenceState later = decode_sequence_state(blob);
                if (later.layers.size() != st.layers.size()) {
                    throw Error(fmt::format("--pipeline: a stage saved {} layers, expected {}", later.layers.size(),
                                            st.layers.size()));
                }
                for (int64_t il = end; il < hp.n_layer; ++il) {
                    KvSeqRows& l = later.layers[static_cast<size_t>(il)];
                    if (l.n_rows() > 0) st.layers[static_cast<size_t>(il)] = std::move(l);
                }
            }
        }
        return encode_sequence_state(st);
    }

    std::vector<int32_t> restore_sequence(int32_t s, std::span<const uint8_t> blob) {
        check_seq_id(s);
        SequenceState st = decode_sequence_state(blob);
        check_state_fits(st, fingerprint(), hp, opt.cache_type);
        // Everything is checked before the first cell changes.
        for (int64_t il = 0; il < hp.n_layer; ++il) {
            KvSeqRows& l = st.layers[static_cast<size_t>(il)];
            const KvCells& cells = *this->cells[static_cast<size_t>(il)];
            for (const int32_t p : l.pos) {
                if (p >= opt.n_ctx) {
                    throw Error(fmt::format("sequence state holds position {}, past this context of {}; use a larger -c",
                                            p, opt.n_ctx));
                }
            }
            // A ring keeps the positions within its span of the newest.
            keep_ring_span(l, cells.ring_span());
            const int64_t free = cells.cells_available_to(s);
            if (static_cast<int64_t>(l.n_rows()) > free) {
                throw Error(fmt::format("sequence state does not fit: layer {} needs {} cells for sequence {}, {} are "
                                        "free (of {}); use a larger -c or free other sequences",
                                        il, l.n_rows(), s, free, cells.n_cells()));
            }
        }
        // Every stage places the cells of every layer (they stay the first
        // stage's) and writes the rows of its own; the first then sends the
        // state down the pipeline.
        try {
            for (int64_t il = 0; il < hp.n_layer; ++il) {
                const KvSeqRows& rows = st.layers[static_cast<size_t>(il)];
                const auto placed = cells[static_cast<size_t>(il)]->restore_seq(s, rows.pos, rows.cell);
                if (owns(il)) kv_device(il).kv_write_rows(il, placed, rows);
            }
            if (next) next->restore_sequence(s, blob);
        } catch (...) {
            remove_positions(s, 0, -1);
            throw;
        }
        return std::move(st.tokens);
    }

    template <class Fn>
    void for_each_device(Fn fn) {
        fn(*host);
        for (auto& a : accels) {
            if (a) fn(*a);
        }
    }

    void reset() {
        for (auto& c : cells) c->clear();
        if (next) next->reset();
    }
};

Session::Session(const gguf::File& file, const model::ModelSpec& spec, const SessionOptions& options)
    : impl_(std::make_unique<Impl>(file, spec, options)) {}

Session::~Session() = default;

void Session::set_activation_observer(ActivationObserver* observer) { impl_->observer = observer; }

void Session::eval(std::span<const int32_t> tokens, bool all_logits, std::vector<float>& logits) {
    impl_->eval(tokens, all_logits, logits);
}

void Session::eval_batch_single_order(std::span<const BatchToken> batch, std::vector<float>& logits) {
    impl_->eval_now(batch, true, logits);
}

void Session::eval_batch(std::span<const BatchToken> batch, std::vector<float>& logits) {
    impl_->eval_now(batch, false, logits);
}

void Session::submit(std::span<const BatchToken> batch, bool single_order, bool hidden) {
    impl_->submit(batch, single_order, hidden);
}
void Session::collect(std::vector<float>& rows) { impl_->collect(rows); }
size_t Session::in_flight() const { return impl_->flights.size(); }
int Session::pipeline_stages() const { return impl_->next ? impl_->next->n_stages() : 1; }

void Session::eval_batch_hidden(std::span<const BatchToken> batch, std::vector<float>& hidden) {
    impl_->eval_now(batch, false, hidden, true);
}

int64_t Session::n_embd() const { return impl_->hp.n_embd; }

void Session::eval_stage(std::span<const BatchToken> tokens, bool single_order, std::span<const float> x,
                         std::vector<float>& out) {
    impl_->set_order(single_order);
    impl_->eval_stage(tokens, x, out);
}

std::pair<int64_t, int64_t> Session::stage_layers() const { return {impl_->first, impl_->end}; }
bool Session::runs_head() const { return impl_->outputs(); }

void Session::remove_positions(int32_t seq, int32_t p0, int32_t p1) { impl_->remove_positions(seq, p0, p1); }
void Session::copy_sequence(int32_t src, int32_t dst, int32_t p0, int32_t p1) { impl_->copy_sequence(src, dst, p0, p1); }

int32_t Session::seq_pos_max(int32_t seq) const { return impl_->seq_pos_max(seq); }
int32_t Session::held_prefix(int32_t seq, int32_t n) const { return impl_->held_prefix(seq, n); }

std::vector<uint8_t> Session::save_sequence(int32_t seq, std::span<const int32_t> tokens) const {
    return impl_->save_sequence(seq, tokens);
}

std::vector<int32_t> Session::restore_sequence(int32_t seq, std::span<const uint8_t> blob) {
    return impl_->restore_sequence(seq, blob);
}

void Session::reset() { impl_->reset(); }

int64_t Session::n_past() const { return impl_->n_past(); }
int64_t Session::n_ctx() const { return impl_->opt.n_ctx; }
int64_t Session::n_ubatch() const { return impl_->opt.n_ubatch; }
int64_t Session::n_vocab() const { return impl_->hp.n_vocab; }
int Session::n_threads() const { return impl_->pool.size(); }
cpu::SimdLevel Session::simd_level() const { return impl_->level; }
int64_t Session::n_device_layers() const { return impl_->plan.n_device_layers; }
bool Session::output_on_device() const { return impl_->placement.head != kHostDevice; }
const std::string& Session::output_device() const {
    return impl_->placement.devices.at(static_cast<size_t>(impl_->placement.head));
}
const Placement& Session::placement() const { return impl_->placement; }
std::string Session::placement_summary() const { return describe_placement(impl_->spec, impl_->placement); }
uint64_t Session::activation_bytes_moved() const { return impl_->recipe->bytes_moved(); }
int64_t Session::activation_crossings() const { return impl_->recipe->crossings(); }

const std::string& Session::layer_device(int64_t il) const {
    TANDEM_CHECK(il >= 0 && il < impl_->hp.n_layer, "layer index out of range");
    return impl_->placement.devices.at(static_cast<size_t>(impl_->placement.layer[static_cast<size_t>(il)]));
}

bool Session::weight_stream_active() const { return impl_->stream != nullptr; }
const std::string& Session::weight_stream_note() const { return impl_->stream_note; }
bool Session::host_weights_copied() const { return impl_->plan.copy_host_weights; }
const std::string& Session::host_copy_note() const { return impl_->plan.host_copy_note; }
int64_t Session::streamed_batches() const { return impl_->streamed_batches; }

std::vector<const MemoryLedger*> Session::ledgers() const {
    std::vector<const MemoryLedger*> out{&impl_->host->ledger()};
    for (const auto& a : impl_->accels) {
        if (a) out.push_back(&a->ledger());
    }
    return out;
}

std::optional<uint64_t> Session::accelerator_host_waits(int d) const {
    const auto& a = impl_->accels;
    const auto i = static_cast<size_t>(d - 1);
    return d >= 1 && i < a.size() && a[i] ? a[i]->host_waits() : std::nullopt;
}

std::optional<uint64_t> Session::accelerator_peak_bytes(int d) const {
    const auto& a = impl_->accels;
    const auto i = static_cast<size_t>(d - 1);
    return d >= 1 && i < a.size() && a[i] ? a[i]->peak_bytes() : std::nullopt;
}

uint64_t Session::weight_bytes_per_token() const {
    const auto& spec = impl_->spec;
    uint64_t total = model::output_weight_bytes(spec);
    for (int64_t il = 0; il < spec.hp.n_layer; ++il) total += model::layer_decode_bytes(spec, il);
    const gguf::TensorInfo* embd = spec.get(model::GlobalTensor::TokenEmbd);
    total += *quant::row_bytes(embd->type, spec.hp.n_embd);
    return total;
}

uint64_t Session::kv_cache_bytes() const {
    uint64_t total = impl_->host->kv_bytes();
    for (const auto& a : impl_->accels) total += a ? a->kv_bytes() : 0;
    return total;
}

}  // namespace tandem
