#include "runtime/scheduler/session.h"

#include <algorithm>
#include <functional>

#include <fmt/format.h>

#include "kernels_cpu/thread_pool.h"
#include "kernels_cuda/cuda_backend.h"
#include "runtime/backend/cpu_backend.h"
#include "runtime/backend/host_weight_arena.h"
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
    SessionOptions opt;
    cpu::SimdLevel level;
    cpu::ThreadPool pool;
    std::unique_ptr<CpuBackend> host;
    std::unique_ptr<Backend> accel;  // present only when it holds something or streams
    WeightStream* stream = nullptr;  // owned by accel
    std::string stream_note;
    std::string host_copy_note;
    bool host_copied = false;
    int64_t streamed_batches = 0;
    int64_t n_device_layers = 0;
    bool output_on_device = false;
    std::vector<float> hidden;  // host copy of the hidden state at a hand-over
    std::vector<int32_t> pos;
    int64_t n_past = 0;
    int cuda_index = -1;  // the GPU of --device cuda/cudaN, -1 otherwise

    // "cuda" is GPU 0, "cudaN" GPU N; -1 for anything else.
    static int parse_cuda_device(const std::string& d) {
        if (d.rfind("cuda", 0) != 0) return -1;
        if (d.size() == 4) return 0;
        if (d.size() > 7 || !std::all_of(d.begin() + 4, d.end(), [](char c) { return c >= '0' && c <= '9'; })) {
            return -1;
        }
        return std::stoi(d.substr(4));
    }

    Impl(const gguf::File& f, const model::ModelSpec& s, const SessionOptions& o)
        : file(f),
          spec(s),
          hp(s.hp),
          opt(o),
          level(o.simd_level ? *o.simd_level : o.simd_from_env ? cpu::simd_level_from_env() : cpu::best_simd_level()),
          pool(o.n_threads) {
        if (file.header_only()) {
            throw Error(fmt::format("{}: this file was written by `tandem synth --header-only` and holds no weights; "
                                    "it can be planned but not run",
                                    file.name()));
        }
        if (opt.n_ctx <= 0) opt.n_ctx = std::min<int64_t>(hp.n_ctx_train, 4096);
        if (opt.n_ubatch <= 0) throw Error(fmt::format("micro-batch size must be positive, found {}", opt.n_ubatch));
        opt.n_ubatch = std::min(opt.n_ubatch, opt.n_ctx);
        const quant::Type cache_type = model::cache_quant_type(opt.cache_type);
        if (!quant::row_bytes(cache_type, hp.head_dim_k) || !quant::row_bytes(cache_type, hp.head_dim_v)) {
            throw Error(fmt::format("cache type {} needs head sizes that are multiples of {}, the model has {}",
                                    quant::traits(cache_type).name, quant::traits(cache_type).block_elems,
                                    hp.head_dim_k));
        }
        choose_split();
        BackendConfig config;
        config.n_ctx = opt.n_ctx;
        config.n_ubatch = opt.n_ubatch;
        config.cache_type = opt.cache_type;
        config.copy_host_weights = opt.copy_host_weights && file.mapped() && !file.locked();
        // What the host would copy: its layers' matrices and, unless the
        // device has it, the head (norms are float copies either way).
        uint64_t host_matrices = output_on_device ? 0 : spec.output_head().n_bytes;
        for (int64_t il = n_device_layers; il < hp.n_layer; ++il) {
            for (const gguf::TensorInfo* t : spec.layers.at(static_cast<size_t>(il)).tensors) {
                if (t && t->n_rows() > 1) host_matrices += t->n_bytes;
            }
        }
        if (config.copy_host_weights) {
            const std::optional<uint64_t> free_ram = available_ram();
            if (free_ram && static_cast<double>(host_matrices) > 0.9 * static_cast<double>(*free_ram)) {
                config.copy_host_weights = false;
                host_copy_note = fmt::format("CPU weights multiplied from the mapped file: a copy ({:.2f} GiB) would "
                                             "not fit in the free RAM ({:.2f} GiB)",
                                             static_cast<double>(host_matrices) / (1 << 30),
                                             static_cast<double>(*free_ram) / (1 << 30));
            }
        }
        host_copied = config.copy_host_weights;
        BackendConfig host_config = config;
        if (host_copied && opt.host_copy_progress) host_config.on_upload = cumulative(opt.host_copy_progress, host_matrices);
        host = std::make_unique<CpuBackend>("cpu", false, std::nullopt, file, spec, host_config, pool, level);
        const bool holds = n_device_layers > 0 || output_on_device;
        const bool wants_stream = !opt.device.empty() && opt.weight_stream && n_device_layers < hp.n_layer &&
                                  opt.n_ubatch >= opt.stream_min_batch;
        if (holds || wants_stream) {
            BackendConfig accel_config = config;
            accel_config.copy_host_weights = false;
            accel_config.host_ledger = &host->mutable_ledger();
            if (opt.upload_progress) {
                uint64_t total = output_on_device ? model::output_weight_bytes(spec) : 0;
                for (int64_t il = 0; il < n_device_layers; ++il) total += model::layer_weight_bytes(spec, il);
                accel_config.on_upload = cumulative(opt.upload_progress, total);
            }
            try {
                if (cuda_index >= 0) {
                    accel = cuda::make_cuda_backend(cuda_index, opt.device_capacity, file, spec, accel_config);
                } else {
                    accel = std::make_unique<CpuBackend>(opt.device, true, opt.device_capacity, file, spec,
                                                         accel_config, pool, level);
                }
            } catch (const Error& e) {
                if (holds) throw;
                // Only streaming wanted the device: without it the CPU runs all.
                stream_note = fmt::format("weight streaming off: {}", e.what());
            }
        }
        // The embedding lookup stays on the host, as in llama.cpp.
        host->account_token_embd();
        for (int64_t il = 0; il < hp.n_layer; ++il) layer_backend(il).load_layer(il);
        output_backend().load_output();
        host->allocate_workspace(!output_on_device);
        if (holds) accel->allocate_workspace(output_on_device);
        // Last, so that a device too small for the slots still holds every
        // layer it can and only loses the streaming.
        if (accel && wants_stream) {
            try {
                stream = accel->enable_weight_stream(n_device_layers);
                if (!stream) stream_note = fmt::format("weight streaming off: {} cannot stream", accel->name());
            } catch (const OutOfDeviceMemory& e) {
                stream_note = fmt::format("weight streaming off: {}", e.what());
            }
            if (!stream && !holds) accel.reset();  // a device with nothing to do costs nothing
        }
        hidden.resize(static_cast<size_t>(opt.n_ubatch * hp.n_embd));
        pos.resize(static_cast<size_t>(opt.n_ubatch));
    }

    void choose_split() {
        if (opt.device.empty()) {
            if (opt.n_gpu_layers > 0) {
                throw Error(fmt::format("-ngl {} asks for layers on an accelerator, but none is available",
                                        opt.n_gpu_layers));
            }
            return;
        }
        cuda_index = parse_cuda_device(opt.device);
        if (opt.device != "cpu2" && cuda_index < 0) {
            throw Error(fmt::format("--device: expected cuda, cudaN or cpu2 (the stand-in accelerator), found '{}'",
                                    opt.device));
        }
        if (opt.n_gpu_layers < 0) throw Error(fmt::format("-ngl: expected a value >= 0, found {}", opt.n_gpu_layers));
        n_device_layers = std::min(opt.n_gpu_layers, hp.n_layer);
        output_on_device = opt.n_gpu_layers > hp.n_layer;
    }

    Backend& layer_backend(int64_t il) { return il < n_device_layers ? *accel : *host; }
    Backend& output_backend() { return output_on_device ? *accel : *host; }

    // Moves the hidden state of n tokens from one backend to the other.
    void hand_over(Backend& from, Backend& to, int64_t n) {
        from.get_hidden(hidden.data(), n);
        to.set_hidden(hidden.data(), n);
    }

    void eval(std::span<const int32_t> tokens, bool all_logits, std::vector<float>& logits) {
        const int64_t n_tokens = static_cast<int64_t>(tokens.size());
        if (n_tokens == 0) throw Error("eval: no tokens to evaluate");
        if (n_past + n_tokens > opt.n_ctx) {
            throw Error(fmt::format("context full: {} tokens already in a context of {}, {} more do not fit; use a "
                                    "larger -c",
                                    n_past, opt.n_ctx, n_tokens));
        }
        for (int32_t id : tokens) {
            if (id < 0 || id >= hp.n_vocab) {
                throw Error(fmt::format("token id {} is outside the vocabulary [0, {})", id, hp.n_vocab));
            }
        }
        logits.resize(static_cast<size_t>((all_logits ? n_tokens : 1) * hp.n_vocab));
        for (int64_t start = 0; start < n_tokens; start += opt.n_ubatch) {
            const int64_t n = std::min(opt.n_ubatch, n_tokens - start);
            for (int64_t t = 0; t < n; ++t) pos[static_cast<size_t>(t)] = static_cast<int32_t>(n_past + t);
            const std::span<const int32_t> positions(pos.data(), static_cast<size_t>(n));
            // Embed on the host; layers [0, n_device_layers) on the device,
            // the rest on the host: the hidden state crosses once each way.
            host->embed(tokens.subspan(static_cast<size_t>(start), static_cast<size_t>(n)));
            // A long enough micro-batch multiplies the host layers' matrices
            // on the accelerator (the hidden state itself stays here).
            const bool streamed = stream != nullptr && n >= opt.stream_min_batch;
            streamed_batches += streamed ? 1 : 0;
            Backend* current = host.get();
            for (int64_t il = 0; il < hp.n_layer; ++il) {
                Backend& next = layer_backend(il);
                if (&next != current) {
                    hand_over(*current, next, n);
                    current = &next;
                }
                if (streamed && current == host.get()) {
                    host->run_layer_streamed(il, positions, *stream);
                } else {
                    current->run_layer(il, positions);
                }
            }
            Backend& out = output_backend();
            if (&out != current) hand_over(*current, out, n);
            if (all_logits) {
                out.run_output(0, n, logits.data() + start * hp.n_vocab);
            } else if (start + n == n_tokens) {
                out.run_output(n - 1, 1, logits.data());
            }
            n_past += n;
        }
    }
};

Session::Session(const gguf::File& file, const model::ModelSpec& spec, const SessionOptions& options)
    : impl_(std::make_unique<Impl>(file, spec, options)) {}

Session::~Session() = default;

void Session::eval(std::span<const int32_t> tokens, bool all_logits, std::vector<float>& logits) {
    impl_->eval(tokens, all_logits, logits);
}

void Session::reset() {
    impl_->n_past = 0;
    impl_->host->clear_kv();
    if (impl_->accel) impl_->accel->clear_kv();
}

int64_t Session::n_past() const { return impl_->n_past; }
int64_t Session::n_ctx() const { return impl_->opt.n_ctx; }
int64_t Session::n_vocab() const { return impl_->hp.n_vocab; }
int Session::n_threads() const { return impl_->pool.size(); }
cpu::SimdLevel Session::simd_level() const { return impl_->level; }
int64_t Session::n_device_layers() const { return impl_->n_device_layers; }
bool Session::output_on_device() const { return impl_->output_on_device; }

const std::string& Session::layer_device(int64_t il) const {
    TANDEM_CHECK(il >= 0 && il < impl_->hp.n_layer, "layer index out of range");
    return impl_->layer_backend(il).name();
}

bool Session::weight_stream_active() const { return impl_->stream != nullptr; }
const std::string& Session::weight_stream_note() const { return impl_->stream_note; }
bool Session::host_weights_copied() const { return impl_->host_copied; }
const std::string& Session::host_copy_note() const { return impl_->host_copy_note; }
int64_t Session::streamed_batches() const { return impl_->streamed_batches; }

std::vector<const MemoryLedger*> Session::ledgers() const {
    std::vector<const MemoryLedger*> out{&impl_->host->ledger()};
    if (impl_->accel) out.push_back(&impl_->accel->ledger());
    return out;
}

uint64_t Session::weight_bytes_per_token() const {
    const auto& spec = impl_->spec;
    uint64_t total = model::output_weight_bytes(spec);
    for (int64_t il = 0; il < spec.hp.n_layer; ++il) total += model::layer_weight_bytes(spec, il);
    const gguf::TensorInfo* embd = spec.get(model::GlobalTensor::TokenEmbd);
    total += *quant::row_bytes(embd->type, spec.hp.n_embd);
    return total;
}

uint64_t Session::kv_cache_bytes() const {
    return impl_->host->kv_bytes() + (impl_->accel ? impl_->accel->kv_bytes() : 0);
}

}  // namespace tandem
