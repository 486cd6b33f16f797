#include "kernels_cuda/emulator/block.h"

#include <cstdio>
#include <cstring>
#include <memory>

#include <fmt/format.h>

#include "kernels_cuda/emulator/tsan.h"

namespace tandem::emu {

namespace detail {
void outside_kernel(const char* what) {
    std::fprintf(stderr, "CUDA emulator: %s used outside a kernel\n", what);
    std::abort();
}
}  // namespace detail

namespace {

constexpr int kMaxThreads = 1024;

// Per OS thread: the block being run and the stacks of its fibers.
struct Worker {
    BlockState block;
    std::unique_ptr<ThreadState[]> threads{new ThreadState[kMaxThreads]};
    std::unique_ptr<WarpWait[]> warps{new WarpWait[kMaxThreads / 32]};
    StackPool stacks;
    bool adopted = false;
};

Worker& worker() {
    static thread_local Worker w;
    return w;
}

std::string where(const ThreadState& t) { return fmt::format("thread ({},{},{})", t.idx.x, t.idx.y, t.idx.z); }

std::string block_name(const BlockState& b) {
    return fmt::format("block ({},{},{})", b.block_idx.x, b.block_idx.y, b.block_idx.z);
}

// The block's first error (a later one is dropped).
void record(BlockState* b, std::string msg) {
    if (b->error.empty()) b->error = std::move(msg);
}

// Ends the running thread's part in the block after record(): it never
// runs again. Called in a statement of its own, so that no temporary (the
// message's parts) is left alive on the abandoned stack.
[[noreturn]] void leave() {
    StackHeader& h = detail::here();
    Fiber::switch_to(h.thread->fiber, h.block->scheduler, true);
    std::abort();  // not reached: the scheduler never resumes a failed thread
}

void thread_entry(void* arg);

// Makes `t` ready to run: a new thread gets a stack, whose header names
// the thread and its block.
void enter(BlockState& b, ThreadState& t) {
    if (t.started) return;
    FiberStack* stack = b.stacks->take();
    *stack->header() = StackHeader{kStackMagic, &t, &b, &t.idx, &b.block_idx, &b.block_dim, &b.grid_dim};
    t.fiber.start(stack, &thread_entry, &t);
    t.started = true;
}

// Suspends the running thread until it is resumed: straight to the next
// ready thread after it in the block, or back to the scheduler (which
// starts the next pass) when there is none. A collective of a warp then
// costs one switch per lane, not two.
void yield(ThreadState* t, BlockState* b) {
    for (int i = t->linear + 1; i < b->n; ++i) {
        ThreadState& next = b->threads[i];
        if (next.state != RunState::Ready) continue;
        enter(*b, next);
        Fiber::switch_to(t->fiber, next.fiber);
        return;
    }
    Fiber::switch_to(t->fiber, b->scheduler);
}

void thread_entry(void* arg) {
    auto* t = static_cast<ThreadState*>(arg);
    BlockState* b = detail::here().block;
    tsan::acquire(&b->sync_token[0]);  // after everything before the launch
    b->call->invoke();
    tsan::release(&b->sync_token[1]);  // before everything after the block
    {
        tsan::IgnoreScope quiet;
        t->state = RunState::Done;
        ++b->done;
        b->finished = t;  // the scheduler gives its stack back
    }
    Fiber::switch_to(t->fiber, b->scheduler, true);
}

// The source lane of `lane` for a shuffle, or -1 for "its own value".
int source_lane(WarpOp op, int lane, int arg, int width) {
    const int group = lane / width * width;
    switch (op) {
        case WarpOp::Shfl: return group + ((arg % width) + width) % width;
        case WarpOp::ShflUp: return lane - arg >= group ? lane - arg : -1;
        case WarpOp::ShflDown: return lane + arg < group + width ? lane + arg : -1;
        case WarpOp::ShflXor: {
            const int src = lane ^ arg;
            return src >= 32 || src / width > lane / width ? -1 : src;
        }
        default: return -1;
    }
}

const char* op_name(WarpOp op) {
    switch (op) {
        case WarpOp::Shfl: return "__shfl_sync";
        case WarpOp::ShflUp: return "__shfl_up_sync";
        case WarpOp::ShflDown: return "__shfl_down_sync";
        case WarpOp::ShflXor: return "__shfl_xor_sync";
        case WarpOp::Ballot: return "__ballot_sync";
        case WarpOp::All: return "__all_sync";
        case WarpOp::Any: return "__any_sync";
        case WarpOp::Sync: return "__syncwarp";
        case WarpOp::MmaS8: return "mma.sync m16n8k16 s8";
    }
    return "?";
}

// The product of a whole warp's m16n8k16 s8 fragments (emu.h), into each
// lane's c.
void complete_mma(const WarpWait& w) {
    const auto frag = [&](int lane) -> MmaS8Fragments& {
        return *reinterpret_cast<MmaS8Fragments*>(static_cast<uintptr_t>(w.value[lane]));
    };
    const auto byte = [](uint32_t v, int e) { return static_cast<int32_t>(static_cast<int8_t>(v >> (8 * e))); };
    int32_t a[16][16], b[16][8];
    for (int lane = 0; lane < 32; ++lane) {
        const int g = lane / 4, t = lane % 4;
        const MmaS8Fragments& f = frag(lane);
        for (int e = 0; e < 4; ++e) {
            a[g][4 * t + e] = byte(f.a[0], e);
            a[g + 8][4 * t + e] = byte(f.a[1], e);
            b[4 * t + e][g] = byte(f.b, e);
        }
    }
    int32_t d[32][4];
    for (int lane = 0; lane < 32; ++lane) {
        const int g = lane / 4, t = lane % 4;
        for (int i = 0; i < 4; ++i) {
            const int row = g + (i / 2) * 8, col = 2 * t + i % 2;
            int32_t s = frag(lane).c[i];
            for (int k = 0; k < 16; ++k) s += a[row][k] * b[k][col];
            d[lane][i] = s;
        }
    }
    for (int lane = 0; lane < 32; ++lane) {
        for (int i = 0; i < 4; ++i) frag(lane).c[i] = d[lane][i];
    }
}

// Every lane of the mask has arrived: each gets its result and is ready.
void complete(BlockState& b, int warp, WarpWait& w) {
    if (w.op == WarpOp::MmaS8) complete_mma(w);
    unsigned ballot = 0;
    if (w.op == WarpOp::Ballot || w.op == WarpOp::All || w.op == WarpOp::Any) {
        for (int l = 0; l < 32; ++l) {
            if ((w.mask >> l & 1u) && w.value[l] != 0) ballot |= 1u << l;
        }
    }
    for (int l = 0; l < 32; ++l) {
        if (!(w.mask >> l & 1u)) continue;
        ThreadState& t = b.threads[warp * 32 + l];
        switch (w.op) {
            case WarpOp::Ballot: t.result = ballot; break;
            case WarpOp::All: t.result = ballot == w.mask; break;
            case WarpOp::Any: t.result = ballot != 0; break;
            case WarpOp::Sync:
            case WarpOp::MmaS8: t.result = 0; break;
            default: {
                const int src = source_lane(w.op, l, w.arg[l], w.width);
                if (src >= 0 && !(w.mask >> src & 1u)) {
                    b.error = fmt::format(
                        "{} at {}: lane {} of warp {} reads lane {}, which is not in the mask {:#010x} ({})",
                        op_name(w.op), site(w.file, w.line), l, warp, src, w.mask, block_name(b));
                    return;
                }
                t.result = src < 0 ? w.value[l] : w.value[src];
            }
        }
        t.state = RunState::Ready;
    }
    w.open = false;
    w.arrived = 0;
    ++w.gen;
}

bool same_site(const char* f1, int l1, const char* f2, int l2) {
    return l1 == l2 && (f1 == f2 || std::strcmp(f1, f2) == 0);
}

}  // namespace

std::string site(const char* file, int line) { return fmt::format("{}:{}", file ? file : "?", line); }

void syncthreads(const char* file, int line) {
    StackHeader& h = detail::in_kernel("__syncthreads");
    ThreadState* t = h.thread;
    BlockState* b = h.block;
    tsan::IgnoreScope quiet;
    if (b->at_barrier == 0) {
        b->barrier_file = file;
        b->barrier_line = line;
    } else if (!same_site(b->barrier_file, b->barrier_line, file, line)) {
        record(b, fmt::format("__syncthreads: threads of {} wait at different calls: {} at {}, others at {}", block_name(*b),
                         where(*t), site(file, line), site(b->barrier_file, b->barrier_line)));
        leave();
    }
    // Alternating tokens: a thread already past this barrier and at the next
    // one does not order the threads still leaving this one.
    const char* token = &b->sync_token[2 + (b->barrier_gen & 1u)];
    tsan::release(token);
    t->wait_file = file;
    t->wait_line = line;
    if (++b->at_barrier == b->n) {
        b->at_barrier = 0;
        ++b->barrier_gen;
        for (int i = 0; i < b->n; ++i) {
            if (b->threads[i].state == RunState::AtBarrier) b->threads[i].state = RunState::Ready;
        }
    } else {
        t->state = RunState::AtBarrier;
        yield(t, b);
    }
    tsan::acquire(token);
}

uint64_t warp_collective(WarpOp op, unsigned mask, uint64_t value, int arg, int width, const char* file, int line) {
    StackHeader& h = detail::in_kernel(op_name(op));
    ThreadState* t = h.thread;
    BlockState* b = h.block;
    tsan::IgnoreScope quiet;
    const int lane = t->linear % 32, warp = t->linear / 32;
    if (!(mask >> lane & 1u)) {
        record(b, fmt::format("{} at {}: lane {} of warp {} calls it with mask {:#010x}, which omits the lane ({}, {})",
                         op_name(op), site(file, line), lane, warp, mask, where(*t), block_name(*b)));
        leave();
    }
    if (width <= 0 || width > 32 || (width & (width - 1)) != 0) {
        record(b, fmt::format("{} at {}: width {} is not a power of two up to 32", op_name(op), site(file, line), width));
        leave();
    }
    const int warp_lanes = std::min(32, b->n - warp * 32);
    const unsigned existing = warp_lanes == 32 ? 0xffffffffu : (1u << warp_lanes) - 1u;
    if (mask & ~existing) {
        record(b, fmt::format("{} at {}: mask {:#010x} names lanes that warp {} of {} does not have ({} threads)",
                         op_name(op), site(file, line), mask, warp, block_name(*b), warp_lanes));
        leave();
    }
    WarpWait& w = b->warps[warp];
    if (!w.open) {
        w.open = true;
        w.op = op;
        w.mask = mask;
        w.width = width;
        w.file = file;
        w.line = line;
        w.arrived = 0;
    } else if (w.op != op || w.mask != mask || !same_site(w.file, w.line, file, line)) {
        record(b, fmt::format("{}: lanes of warp {} in {} disagree: lane {} calls {} at {} with mask {:#010x}, lanes "
                         "{:#010x} wait in {} at {} with mask {:#010x}",
                         op_name(op), warp, block_name(*b), lane, op_name(op), site(file, line), mask, w.arrived,
                         op_name(w.op), site(w.file, w.line), w.mask));
        leave();
    }
    w.value[lane] = value;
    w.arg[lane] = arg;
    w.arrived |= 1u << lane;
    t->wait_file = file;
    t->wait_line = line;
    const char* token = &w.token[w.gen & 1u];
    if (op == WarpOp::Sync) tsan::release(token);
    if (w.arrived == w.mask) {
        complete(*b, warp, w);
        if (!b->error.empty()) leave();
    } else {
        t->state = RunState::AtWarp;
        yield(t, b);
    }
    if (op == WarpOp::Sync) tsan::acquire(token);
    return t->result;
}

unsigned active_mask() {
    StackHeader& h = detail::in_kernel("__activemask");
    ThreadState* t = h.thread;
    BlockState* b = h.block;
    const int warp = t->linear / 32;
    unsigned m = 0;
    for (int l = 0; l < 32 && warp * 32 + l < b->n; ++l) {
        if (b->threads[warp * 32 + l].state != RunState::Done) m |= 1u << l;
    }
    return m;
}

void syncwarp(unsigned mask, const char* file, int line) { warp_collective(WarpOp::Sync, mask, 0, 0, 32, file, line); }

namespace {

// Why no thread can go on: the barrier or collective that cannot complete.
std::string stuck(const BlockState& b) {
    int ended = 0, at_warp = 0;
    const ThreadState* first_ended = nullptr;
    for (int i = 0; i < b.n; ++i) {
        const ThreadState& t = b.threads[i];
        if (t.state == RunState::Done && !first_ended) first_ended = &t;
        ended += t.state == RunState::Done;
        at_warp += t.state == RunState::AtWarp;
    }
    if (b.at_barrier > 0 && at_warp == 0) {
        return fmt::format(
            "__syncthreads at {} is not reached by every thread of {}: {} of {} wait there, {} ended without it "
            "(first: {})",
            site(b.barrier_file, b.barrier_line), block_name(b), b.at_barrier, b.n, ended,
            first_ended ? where(*first_ended) : "none");
    }
    for (int w = 0; w * 32 < b.n; ++w) {
        const WarpWait& ww = b.warps[w];
        if (!ww.open) continue;
        const unsigned missing = ww.mask & ~ww.arrived;
        std::string why;
        for (int l = 0; l < 32; ++l) {
            if (!(missing >> l & 1u)) continue;
            const ThreadState& t = b.threads[w * 32 + l];
            why = t.state == RunState::Done ? fmt::format("lane {} ended", l)
                                            : fmt::format("lane {} waits at {}", l, site(t.wait_file, t.wait_line));
            break;
        }
        return fmt::format("{} at {} in warp {} of {}: mask {:#010x}, lanes {:#010x} never arrive ({})",
                           op_name(ww.op), site(ww.file, ww.line), w, block_name(b), ww.mask, missing, why);
    }
    return fmt::format("threads of {} wait at a barrier that cannot complete", block_name(b));
}

}  // namespace

std::string run_block(KernelCall* call, const dim3& grid, const dim3& block, const uint3& block_idx) {
    Worker& wk = worker();
    BlockState& b = wk.block;
    if (!wk.adopted) {
        b.scheduler.adopt_current();
        wk.adopted = true;
    }
    tsan::IgnoreScope quiet;
    b.block_idx = block_idx;
    b.block_dim = block;
    b.grid_dim = grid;
    b.call = call;
    b.n = static_cast<int>(block.x * block.y * block.z);
    b.threads = wk.threads.get();
    b.warps = wk.warps.get();
    b.stacks = &wk.stacks;
    b.done = 0;
    b.at_barrier = 0;
    b.barrier_gen = 0;
    b.error.clear();
    for (int w = 0; w * 32 < b.n; ++w) {
        b.warps[w].open = false;
        b.warps[w].arrived = 0;
    }
    for (int i = 0; i < b.n; ++i) {
        ThreadState& t = b.threads[i];
        t.idx = uint3{static_cast<unsigned>(i) % block.x, static_cast<unsigned>(i) / block.x % block.y,
                      static_cast<unsigned>(i) / (block.x * block.y)};
        t.linear = i;
        t.state = RunState::Ready;
        t.started = false;
        t.fiber.prepare();
    }
    tsan::release(&b.sync_token[0]);
    for (;;) {
        bool progress = false;
        for (int i = 0; i < b.n && b.error.empty(); ++i) {
            ThreadState& t = b.threads[i];
            if (t.state != RunState::Ready) continue;
            enter(b, t);
            b.finished = nullptr;
            // Back here when a thread ends, or when one that waits finds no
            // ready thread after it (yield).
            Fiber::switch_to(b.scheduler, t.fiber);
            if (b.finished) wk.stacks.give(b.finished->fiber.stack());
            progress = true;
        }
        if (!b.error.empty() || b.done == b.n || !progress) break;
    }
    std::string error = b.error;
    if (error.empty() && b.done != b.n) error = stuck(b);
    // Stacks of threads that never finished (an error) go back too.
    for (int i = 0; i < b.n; ++i) {
        if (b.threads[i].started && b.threads[i].state != RunState::Done) {
            b.threads[i].fiber.stack()->abandoned = true;
            wk.stacks.give(b.threads[i].fiber.stack());
        }
    }
    tsan::acquire(&b.sync_token[1]);
    return error;
}

void mma_s8_m16n8k16(MmaS8Fragments& f, const char* file, int line) {
    // .aligned: every lane of the warp, at the same instruction.
    warp_collective(WarpOp::MmaS8, 0xffffffffu, static_cast<uint64_t>(reinterpret_cast<uintptr_t>(&f)), 0, 32, file,
                    line);
}

}  // namespace tandem::emu
