#include "tools/pipeline.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <limits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/common/error.h"
#include "runtime/engine/device_registry.h"
#include "runtime/engine/session.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/model/model_spec.h"
#include "runtime/serving/split.h"
#include "tools/field_flags.h"
#include "tools/split.h"

#ifdef TANDEM_HAVE_MPI
#include <mpi.h>
#endif

namespace tandem::tools {

bool wants_pipeline(const std::vector<std::string>& args) {
    return std::find(args.begin(), args.end(), "--pipeline") != args.end();
}

std::string stage_holds(const Session& session, std::pair<int64_t, int64_t> layers, bool last) {
    std::string out;
    for (int64_t il = layers.first; il < layers.second; ++il) {
        out += fmt::format("{}blk {} {}", out.empty() ? "" : ", ", il, session.layer_device(il));
    }
    if (last) out += fmt::format(", head {}", session.output_device());
    return out;
}

#ifndef TANDEM_HAVE_MPI

PipelineWorld::PipelineWorld(int&, char**&) {
    throw Error("--pipeline: this build of Tandem has no MPI (install libopenmpi-dev and rebuild)");
}
PipelineWorld::~PipelineWorld() = default;
int PipelineWorld::serve_stage() { return 1; }
std::shared_ptr<StageLink> pipeline_link() { return nullptr; }

#else

namespace {

// Message tags.
enum Tag : int { kOpen = 1, kOpenReply, kCommand, kTokens, kHidden, kLogits, kStop, kState };
// Commands (the header's first number).
enum Command : int64_t { kEval = 1, kRemove, kCopy, kReset, kSave, kRestore };
constexpr int kHeader = 6;

std::weak_ptr<StageLink>& link_slot() {
    static std::weak_ptr<StageLink> slot;
    return slot;
}

// Bytes (a sequence state; the open request and its reply as text). MPI
// counts are ints: 2 GiB or more is refused rather than cut.
void send_bytes(std::span<const uint8_t> b, int to, int tag) {
    if (b.size() > static_cast<size_t>(std::numeric_limits<int>::max())) {
        throw Error(fmt::format("--pipeline: a message of {} bytes is too large to send (at most 2 GiB)", b.size()));
    }
    MPI_Send(b.data(), static_cast<int>(b.size()), MPI_BYTE, to, tag, MPI_COMM_WORLD);
}

std::vector<uint8_t> recv_bytes(int from, int tag) {
    MPI_Status st;
    MPI_Probe(from, tag, MPI_COMM_WORLD, &st);
    int n = 0;
    MPI_Get_count(&st, MPI_BYTE, &n);
    std::vector<uint8_t> b(static_cast<size_t>(n));
    MPI_Recv(b.data(), n, MPI_BYTE, from, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    return b;
}

void send_text(const std::string& s, int to, int tag) {
    send_bytes(std::span(reinterpret_cast<const uint8_t*>(s.data()), s.size()), to, tag);
}

std::string recv_text(int from, int tag) {
    const std::vector<uint8_t> b = recv_bytes(from, tag);
    return std::string(b.begin(), b.end());
}

// A micro-batch's tokens as four ints each (id, pos, seq, logits).
std::vector<int32_t> pack(std::span<const BatchToken> tokens) {
    std::vector<int32_t> out;
    out.reserve(tokens.size() * 4);
    for (const BatchToken& b : tokens) out.insert(out.end(), {b.id, b.pos, b.seq, b.logits ? 1 : 0});
    return out;
}

std::vector<BatchToken> unpack(const std::vector<int32_t>& v) {
    std::vector<BatchToken> out(v.size() / 4);
    for (size_t i = 0; i < out.size(); ++i) out[i] = {v[4 * i], v[4 * i + 1], v[4 * i + 2], v[4 * i + 3] != 0};
    return out;
}

// Sends a micro-batch (header, tokens, hidden state) to `to`.
void send_micro(int to, std::span<const BatchToken> tokens, bool single_order, std::span<const float> x) {
    const int64_t header[kHeader] = {kEval, static_cast<int64_t>(tokens.size()), single_order ? 1 : 0, 0, 0, 0};
    MPI_Send(header, kHeader, MPI_INT64_T, to, kCommand, MPI_COMM_WORLD);
    const std::vector<int32_t> t = pack(tokens);
    MPI_Send(t.data(), static_cast<int>(t.size()), MPI_INT32_T, to, kTokens, MPI_COMM_WORLD);
    MPI_Send(x.data(), static_cast<int>(x.size()), MPI_FLOAT, to, kHidden, MPI_COMM_WORLD);
}

void send_command(int to, Command c, int64_t a = 0, int64_t b = 0, int64_t d = 0, int64_t e = 0) {
    const int64_t header[kHeader] = {c, a, b, d, e, 0};
    MPI_Send(header, kHeader, MPI_INT64_T, to, kCommand, MPI_COMM_WORLD);
}

nlohmann::json options_json(const gguf::File& file, const SessionOptions& o) {
    return {{"model", std::filesystem::absolute(file.name()).string()},
            {"file_size", file.file_size()},
            {"data_offset", file.data_offset()},
            {"n_ctx", o.n_ctx},
            {"n_ubatch", o.n_ubatch},
            {"n_seq_max", o.n_seq_max},
            {"kv_per_sequence", o.kv_per_sequence},
            {"n_threads", o.n_threads},
            {"cache_type_k", static_cast<int>(o.cache_type.k)},
            {"cache_type_v", static_cast<int>(o.cache_type.v)},
            {"simd_level", o.simd_level ? static_cast<int>(*o.simd_level) : -1},
            {"simd_from_env", o.simd_from_env},
            {"cpu_blas", o.cpu_blas},
            {"copy_host_weights", o.copy_host_weights},
            // Placement: every rank applies rank 0's flags, over the whole
            // model's layer numbers, to its own layers and its own devices.
            {"device", o.device},
            {"device_capacity", o.device_capacity},
            {"n_gpu_layers", o.n_gpu_layers},
            {"tensor_split", o.tensor_split},
            {"overrides", [&] {
                 nlohmann::json rules = nlohmann::json::array();
                 for (const TensorOverride& r : o.overrides) rules.push_back({r.pattern, r.device});
                 return rules;
             }()},
            {"cpu_moe", o.cpu_moe},
            {"n_cpu_moe", o.n_cpu_moe},
            {"kv_offload", o.kv_offload},
            // -ngl auto: each rank plans its own layers from the flags as given.
            {"stage_auto", o.stage_auto ? nlohmann::json{{"device", o.stage_auto->device},
                                                         {"capacity", o.stage_auto->capacity},
                                                         {"tensor_split", o.stage_auto->tensor_split},
                                                         {"overrides", o.stage_auto->overrides},
                                                         {"cpu_moe", o.stage_auto->cpu_moe},
                                                         {"n_cpu_moe", o.stage_auto->n_cpu_moe}}
                                        : nlohmann::json()}};
}

SessionOptions options_from(const nlohmann::json& j) {
    SessionOptions o;
    o.n_ctx = j.at("n_ctx");
    o.n_ubatch = j.at("n_ubatch");
    o.n_seq_max = j.at("n_seq_max");
    o.kv_per_sequence = j.at("kv_per_sequence");
    o.n_threads = j.at("n_threads");
    o.cache_type = {static_cast<quant::Type>(j.at("cache_type_k").get<int>()),
                    static_cast<quant::Type>(j.at("cache_type_v").get<int>())};
    if (const int level = j.at("simd_level"); level >= 0) o.simd_level = static_cast<cpu::SimdLevel>(level);
    o.simd_from_env = j.at("simd_from_env");
    o.cpu_blas = j.at("cpu_blas");
    o.copy_host_weights = j.at("copy_host_weights");
    o.device = j.at("device");
    o.device_capacity = j.at("device_capacity").get<std::vector<uint64_t>>();
    o.n_gpu_layers = j.at("n_gpu_layers");
    o.tensor_split = j.at("tensor_split").get<std::vector<double>>();
    for (const auto& r : j.at("overrides")) o.overrides.push_back({r.at(0).get<std::string>(), r.at(1).get<std::string>()});
    o.cpu_moe = j.at("cpu_moe");
    o.n_cpu_moe = j.at("n_cpu_moe");
    o.kv_offload = j.at("kv_offload");
    // Weight streaming goes through the first stage's device only.
    o.weight_stream = false;
    return o;
}

// This host's devices and what they may use, where they differ from rank
// 0's (mpirun -x, as TANDEM_PIPELINE_MODEL for the model's path):
// TANDEM_PIPELINE_DEVICE replaces --device and drops -ts (shares of rank
// 0's devices), TANDEM_PIPELINE_VRAM replaces --vram.
struct HostDevices {
    std::optional<std::string> device;
    std::optional<std::vector<uint64_t>> vram;
};

HostDevices host_devices() {
    HostDevices h;
    if (const char* d = std::getenv("TANDEM_PIPELINE_DEVICE")) h.device = d;
    if (const char* v = std::getenv("TANDEM_PIPELINE_VRAM"); v && *v) {
        h.vram = parse_vram_list("TANDEM_PIPELINE_VRAM", v);
    }
    return h;
}

// Places this stage's layers [first, end) in `o`: rank 0's flags as they
// are (an -ngl count keeps its meaning over the whole model's layer
// numbers), or under -ngl auto this stage's own plan of its own layers on
// this host's devices and capacity (serving::resolve_split, as rank 0
// planned its share). Returns the plan's line, naming fields as {field};
// empty for a count.
std::string place_stage(SessionOptions& o, const nlohmann::json& j, const gguf::File& file,
                        const model::ModelSpec& spec, std::pair<int64_t, int64_t> layers, int rank) {
    const HostDevices here = host_devices();
    const nlohmann::json& a = j.at("stage_auto");
    if (a.is_null()) {
        if (here.device) {
            o.device = *here.device;
            o.tensor_split.clear();
        }
        if (here.vram) o.device_capacity = *here.vram;
        return "";
    }
    serving::SplitRequest r;
    r.device = here.device.value_or(a.at("device").get<std::string>());
    (void)parse_accelerators(r.device);  // a bad TANDEM_PIPELINE_DEVICE fails naming the name
    r.vram = here.vram.value_or(a.at("capacity").get<std::vector<uint64_t>>());
    if (!here.device) r.tensor_split = a.at("tensor_split").get<std::vector<double>>();
    r.stage = layers;
    r.n_ctx = o.n_ctx;
    r.n_ubatch = o.n_ubatch;
    r.n_seq = o.n_seq_max;
    r.cache_type = o.cache_type;
    r.stream.weight_stream = o.weight_stream;
    r.stream.copy_host_weights = o.copy_host_weights;
    r.placement.overrides = a.at("overrides").get<std::vector<std::string>>();
    r.placement.cpu_moe = a.at("cpu_moe");
    r.placement.n_cpu_moe = a.at("n_cpu_moe");
    r.placement.kv_offload = o.kv_offload;
    const serving::Split s = serving::resolve_split(r, file, spec, [&](const std::string& w) {
        std::fprintf(stderr, "tandem: pipeline rank %d: warning: %s\n", rank, in_flags(w).c_str());
    });
    o.device = s.so.device;
    o.device_capacity = s.so.device_capacity;
    o.n_gpu_layers = s.so.n_gpu_layers;
    o.n_gpu_layers_from = s.so.n_gpu_layers_from;
    o.tensor_split = s.so.tensor_split;
    o.overrides = s.so.overrides;
    o.cpu_moe = s.so.cpu_moe;
    o.n_cpu_moe = s.so.n_cpu_moe;
    return s.why;
}

// Rank 0's side.
class MpiLink final : public StageLink {
public:
    explicit MpiLink(int size) : size_(size) {}

    std::vector<std::string> placement_notes() const override { return notes_; }

    int64_t open(const gguf::File& file, int64_t n_layer, const SessionOptions& options) override {
        if (n_layer < size_) {
            throw Error(fmt::format("--pipeline: {} ranks for a model of {} layers; use at most {}", size_, n_layer,
                                    n_layer));
        }
        const std::string request = options_json(file, options).dump();
        for (int r = 1; r < size_; ++r) send_text(request, r, kOpen);
        // Each reply: {"error": why} or {"placed": its plan's line, or ""}.
        std::string failed;
        notes_.clear();
        for (int r = 1; r < size_; ++r) {
            const nlohmann::json reply = nlohmann::json::parse(recv_text(r, kOpenReply));
            if (reply.contains("error") && failed.empty()) failed = reply.at("error");
            if (const std::string placed = reply.value("placed", ""); !placed.empty()) {
                notes_.push_back(fmt::format("pipeline rank {}: {}", r, placed));
            }
        }
        if (!failed.empty()) throw Error(failed);
        return stage_layers(n_layer, 0, size_).second;
    }

    int n_stages() const override { return size_; }

    void send_batch(std::span<const BatchToken> tokens, bool single_order, std::span<const float> x) override {
        send_micro(1, tokens, single_order, x);
    }

    void receive_logits(std::span<float> out) override {
        MPI_Status st;
        MPI_Recv(out.data(), static_cast<int>(out.size()), MPI_FLOAT, size_ - 1, kLogits, MPI_COMM_WORLD, &st);
        int n = 0;
        MPI_Get_count(&st, MPI_FLOAT, &n);
        if (static_cast<size_t>(n) != out.size()) {
            throw Error(fmt::format("--pipeline: the last stage sent {} logits, expected {}", n, out.size()));
        }
    }

    void remove_positions(int32_t seq, int32_t p0, int32_t p1) override { send_command(1, kRemove, seq, p0, p1); }
    void copy_sequence(int32_t src, int32_t dst, int32_t p0, int32_t p1) override {
        send_command(1, kCopy, src, dst, p0, p1);
    }
    void reset() override { send_command(1, kReset); }

    // Every later rank sends its blob to rank 0, then passes the command on.
    std::vector<std::vector<uint8_t>> save_sequence(int32_t seq) override {
        send_command(1, kSave, seq);
        std::vector<std::vector<uint8_t>> blobs;
        for (int r = 1; r < size_; ++r) blobs.push_back(recv_bytes(r, kState));
        return blobs;
    }

    // The blob goes down the ranks behind the command, as a micro-batch does.
    void restore_sequence(int32_t seq, std::span<const uint8_t> blob) override {
        send_command(1, kRestore, seq);
        send_bytes(blob, 1, kState);
    }

private:
    int size_;
    std::vector<std::string> notes_;  // the last open's placement_notes
};

[[noreturn]] void stage_failed(int rank, const std::string& what) {
    std::fprintf(stderr, "tandem: pipeline rank %d: error: %s\n", rank, what.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::abort();
}

}  // namespace

PipelineWorld::PipelineWorld(int& argc, char**& argv) {
    int provided = 0;
    // Serving calls the session from its scheduler's thread, one call at a time.
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    if (provided < MPI_THREAD_SERIALIZED) {
        MPI_Finalize();
        throw Error("--pipeline: this MPI library cannot be called from the serving thread (MPI_THREAD_SERIALIZED)");
    }
    if (size_ < 2) {
        MPI_Finalize();
        throw Error("--pipeline needs at least two ranks: start it as mpirun -np N tandem ... --pipeline");
    }
    if (rank_ == 0) {
        auto link = std::make_shared<MpiLink>(size_);
        link_slot() = link;
        link_ = link;
    }
}

PipelineWorld::~PipelineWorld() {
    if (rank_ == 0) {
        for (int r = 1; r < size_; ++r) {
            const int64_t header[kHeader] = {0, 0, 0, 0, 0, 0};
            MPI_Send(header, kHeader, MPI_INT64_T, r, kStop, MPI_COMM_WORLD);
        }
        link_slot().reset();
    }
    MPI_Finalize();
}

std::shared_ptr<StageLink> pipeline_link() { return link_slot().lock(); }

int PipelineWorld::serve_stage() {
    // Open: the model and the first stage's options, from rank 0, again for
    // each session rank 0 opens (bench opens one per setup). A failure is
    // answered (rank 0 says it); the stage then waits for the next open or stop.
    std::unique_ptr<gguf::File> file;
    std::unique_ptr<model::ModelSpec> spec;
    std::unique_ptr<Session> session;
    std::pair<int64_t, int64_t> layers{0, 0};
    const auto open = [&] {
        const std::string request = recv_text(0, kOpen);
        session.reset();
        try {
            const nlohmann::json j = nlohmann::json::parse(request);
            // This host's copy: TANDEM_PIPELINE_MODEL where the file is
            // elsewhere here (mpirun -x), else rank 0's path.
            const char* own = std::getenv("TANDEM_PIPELINE_MODEL");
            const std::string path = own && *own ? own : j.at("model").get<std::string>();
            if (!file || file->name() != path) {
                spec.reset();
                file = std::make_unique<gguf::File>(gguf::File::open(path));
                spec = std::make_unique<model::ModelSpec>(model::load_model_spec(*file));
            }
            const uint64_t size = j.at("file_size"), offset = j.at("data_offset");
            if (file->file_size() != size || file->data_offset() != offset) {
                throw Error(fmt::format("the model file {} ({} bytes, data at {}) is not rank 0's {} ({} bytes, data "
                                        "at {})",
                                        path, file->file_size(), file->data_offset(), j.at("model").get<std::string>(),
                                        size, offset));
            }
            SessionOptions o = options_from(j);
            layers = stage_layers(spec->hp.n_layer, rank_, size_);
            o.stage_first = layers.first;
            o.stage_end = layers.second;
            const std::string why = place_stage(o, j, *file, *spec, layers, rank_);
            session = std::make_unique<Session>(*file, *spec, o);
            const std::string placed =
                why.empty() ? "" : fmt::format("{}; holds {}", why, stage_holds(*session, layers, rank_ == size_ - 1));
            send_text(nlohmann::json{{"placed", placed}}.dump(), 0, kOpenReply);
        } catch (const FieldError& e) {
            send_text(nlohmann::json{{"error", fmt::format("pipeline rank {}: {}", rank_, in_flags(e))}}.dump(), 0,
                      kOpenReply);
        } catch (const std::exception& e) {
            send_text(nlohmann::json{{"error", fmt::format("pipeline rank {}: {}", rank_, e.what())}}.dump(), 0,
                      kOpenReply);
        }
    };
    const bool last = rank_ == size_ - 1;
    std::vector<float> out;
    // The last stage sends logits without waiting for rank 0 to take them:
    // rank 0 may be sending the next micro-batch (Session::submit keeps
    // several in flight), and a blocking send each way would wait
    // forever. Each buffer lives until its send completes.
    std::deque<std::pair<MPI_Request, std::vector<float>>> sending;
    const auto reap = [&](bool all) {
        while (!sending.empty()) {
            int done = 1;
            if (all) {
                MPI_Wait(&sending.front().first, MPI_STATUS_IGNORE);
            } else {
                MPI_Test(&sending.front().first, &done, MPI_STATUS_IGNORE);
            }
            if (!done) return;
            sending.pop_front();
        }
    };
    while (true) {
        MPI_Status st;
        MPI_Probe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
        if (st.MPI_TAG == kOpen) {
            open();
            continue;
        }
        int64_t h[kHeader];
        MPI_Recv(h, kHeader, MPI_INT64_T, st.MPI_SOURCE, st.MPI_TAG, MPI_COMM_WORLD, &st);
        if (st.MPI_TAG == kStop) {
            reap(true);
            return 0;
        }
        if (!session) continue;  // the open failed: only stop is awaited
        try {
            switch (h[0]) {
                case kEval: {
                    const auto n = static_cast<size_t>(h[1]);
                    std::vector<int32_t> t(n * 4);
                    MPI_Recv(t.data(), static_cast<int>(t.size()), MPI_INT32_T, st.MPI_SOURCE, kTokens, MPI_COMM_WORLD,
                             MPI_STATUS_IGNORE);
                    std::vector<float> x(n * static_cast<size_t>(spec->hp.n_embd));
                    MPI_Recv(x.data(), static_cast<int>(x.size()), MPI_FLOAT, st.MPI_SOURCE, kHidden, MPI_COMM_WORLD,
                             MPI_STATUS_IGNORE);
                    const std::vector<BatchToken> tokens = unpack(t);
                    session->eval_stage(tokens, h[2] != 0, x, out);
                    if (!last) {
                        send_micro(rank_ + 1, tokens, h[2] != 0, out);
                    } else if (!out.empty()) {
                        auto& [request, rows] = sending.emplace_back(MPI_REQUEST_NULL, std::move(out));
                        MPI_Isend(rows.data(), static_cast<int>(rows.size()), MPI_FLOAT, 0, kLogits, MPI_COMM_WORLD,
                                  &request);
                        reap(false);
                    }
                    break;
                }
                case kRemove: session->remove_positions(static_cast<int32_t>(h[1]), static_cast<int32_t>(h[2]),
                                                        static_cast<int32_t>(h[3])); break;
                case kCopy: session->copy_sequence(static_cast<int32_t>(h[1]), static_cast<int32_t>(h[2]),
                                                   static_cast<int32_t>(h[3]), static_cast<int32_t>(h[4])); break;
                case kReset: session->reset(); break;
                case kSave: send_bytes(session->save_sequence(static_cast<int32_t>(h[1]), {}), 0, kState); break;
                case kRestore: {
                    const std::vector<uint8_t> blob = recv_bytes(st.MPI_SOURCE, kState);
                    session->restore_sequence(static_cast<int32_t>(h[1]), blob);
                    if (!last) {
                        MPI_Send(h, kHeader, MPI_INT64_T, rank_ + 1, kCommand, MPI_COMM_WORLD);
                        send_bytes(blob, rank_ + 1, kState);
                    }
                    continue;
                }
                default: throw Error(fmt::format("unknown command {}", h[0]));
            }
            if (h[0] != kEval && !last) MPI_Send(h, kHeader, MPI_INT64_T, rank_ + 1, kCommand, MPI_COMM_WORLD);
        } catch (const std::exception& e) {
            stage_failed(rank_, fmt::format("layers [{}, {}): {}", layers.first, layers.second, e.what()));
        }
    }
}

#endif

}  // namespace tandem::tools
