// A pipeline whose later stages are Sessions of this process, driven by a
// thread of their own: what goes down the link is queued in order, as MPI
// keeps rank 0's messages in order, and the later stages work while the
// first evaluates on (tools/pipeline.cpp is the MPI transport). So
// Session::submit and the scheduler's steps in flight are tested without
// mpirun, bit for bit against one session.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "runtime/common/error.h"
#include "runtime/engine/session.h"
#include "runtime/engine/stage_link.h"
#include "runtime/model/model_spec.h"

namespace tandem::testing {

class LocalStageLink final : public StageLink {
public:
    explicit LocalStageLink(int n_stages) : n_stages_(n_stages) {}
    ~LocalStageLink() override {
        {
            std::lock_guard lock(mu_);
            stopping_ = true;
        }
        cv_.notify_all();
        if (worker_.joinable()) worker_.join();
    }

    int64_t open(const gguf::File& file, int64_t n_layer, const SessionOptions& options) override {
        spec_ = std::make_unique<model::ModelSpec>(model::load_model_spec(file));
        for (int r = 1; r < n_stages_; ++r) {
            SessionOptions o = options;
            o.next_stages = nullptr;
            o.weight_stream = false;
            std::tie(o.stage_first, o.stage_end) = stage_layers(n_layer, r, n_stages_);
            stages_.push_back(std::make_unique<Session>(file, *spec_, o));
        }
        worker_ = std::thread([this] { work(); });
        return stage_layers(n_layer, 0, n_stages_).second;
    }
    int n_stages() const override { return n_stages_; }

    void send_batch(std::span<const BatchToken> tokens, bool single_order, std::span<const float> x) override {
        post([this, t = std::vector<BatchToken>(tokens.begin(), tokens.end()), single_order,
              h = std::vector<float>(x.begin(), x.end())]() mutable {
            for (auto& s : stages_) {
                std::vector<float> out;
                s->eval_stage(t, single_order, h, out);
                h = std::move(out);
            }
            if (h.empty()) return;
            std::lock_guard lock(mu_);
            logits_.push_back(std::move(h));
            cv_.notify_all();
        });
    }

    void receive_logits(std::span<float> out) override {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return !logits_.empty() || !failed_.empty(); });
        if (logits_.empty()) throw Error("local pipeline: " + failed_);
        std::vector<float> rows = std::move(logits_.front());
        logits_.pop_front();
        if (rows.size() != out.size()) {
            throw Error(fmt::format("local pipeline: {} logits, expected {}", rows.size(), out.size()));
        }
        std::copy(rows.begin(), rows.end(), out.begin());
    }

    void remove_positions(int32_t seq, int32_t p0, int32_t p1) override {
        each([=](Session& s) { s.remove_positions(seq, p0, p1); });
    }
    void copy_sequence(int32_t src, int32_t dst, int32_t p0, int32_t p1) override {
        each([=](Session& s) { s.copy_sequence(src, dst, p0, p1); });
    }
    void reset() override {
        each([](Session& s) { s.reset(); });
    }
    std::vector<std::vector<uint8_t>> save_sequence(int32_t seq) override {
        auto done = std::make_shared<std::promise<std::vector<std::vector<uint8_t>>>>();
        auto result = done->get_future();
        post([this, seq, done] {
            std::vector<std::vector<uint8_t>> blobs;
            for (auto& s : stages_) blobs.push_back(s->save_sequence(seq, {}));
            done->set_value(std::move(blobs));
        });
        return result.get();
    }
    void restore_sequence(int32_t seq, std::span<const uint8_t> blob) override {
        each([seq, b = std::vector<uint8_t>(blob.begin(), blob.end())](Session& s) { s.restore_sequence(seq, b); });
    }

private:
    void each(std::function<void(Session&)> fn) {
        post([this, fn = std::move(fn)] {
            for (auto& s : stages_) fn(*s);
        });
    }
    void post(std::function<void()> fn) {
        std::lock_guard lock(mu_);
        queue_.push_back(std::move(fn));
        cv_.notify_all();
    }
    void work() {
        while (true) {
            std::function<void()> fn;
            {
                std::unique_lock lock(mu_);
                cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
                if (queue_.empty()) return;
                fn = std::move(queue_.front());
                queue_.pop_front();
            }
            try {
                fn();
            } catch (const std::exception& e) {  // as a rank that dies: every later receive says why
                std::lock_guard lock(mu_);
                failed_ = e.what();
                cv_.notify_all();
            }
        }
    }

    int n_stages_;
    std::unique_ptr<model::ModelSpec> spec_;
    std::vector<std::unique_ptr<Session>> stages_;
    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::deque<std::function<void()>> queue_;
    std::deque<std::vector<float>> logits_;
    std::string failed_;
    bool stopping_ = false;
    std::thread worker_;
};

}  // namespace tandem::testing
