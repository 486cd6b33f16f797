// Fibers for the emulator's GPU threads: a stack and a saved stack
// pointer, switched by a few instructions (fiber.cpp: callee-saved
// registers, MXCSR and the x87 control word), with the switches announced to
// AddressSanitizer and ThreadSanitizer so that both follow a fiber's stack
// and ThreadSanitizer treats each GPU thread as a thread of its own (its
// races are reported; only the emulator's barriers order them).
#pragma once

#include <cstddef>
#include <vector>

#include "kernels_cuda/emulator/emu.h"

namespace tandem::emu {

// kFiberStackBytes (emu.h), aligned to its size: a page for the
// StackHeader, a guard page, then the stack.
class FiberStack {
public:
    FiberStack();
    ~FiberStack();
    FiberStack(const FiberStack&) = delete;
    FiberStack& operator=(const FiberStack&) = delete;
    char* bottom() const { return base_; }
    size_t size() const { return size_; }
    StackHeader* header() const { return reinterpret_cast<StackHeader*>(region_); }
    // A fiber left this stack without returning through its frames (an
    // error ended it): AddressSanitizer's marks of those frames remain.
    bool abandoned = false;
    size_t colour = 0;  // bytes left unused at the top (fiber.cpp)

private:
    char* region_ = nullptr;  // kFiberStackBytes, aligned to it
    char* base_ = nullptr;
    size_t size_ = 0;
};

// One execution context. The scheduler's own context is a Fiber made with
// Fiber::current(); the others start at entry(arg) on a stack.
class Fiber {
public:
    using Entry = void (*)(void*);
    Fiber() = default;
    ~Fiber();
    Fiber(const Fiber&) = delete;
    Fiber& operator=(const Fiber&) = delete;

    // Makes the fiber's ThreadSanitizer state, if not yet made: call it
    // from the scheduler, so that the fiber starts after what the scheduler
    // has seen and after no GPU thread (start() calls it too, late).
    void prepare();
    // Prepares this fiber to run entry(arg) on `stack` (not yet running).
    void start(FiberStack* stack, Entry entry, void* arg);
    // Makes this object stand for the calling thread's own context.
    void adopt_current();
    // Switches from `from` (the running fiber) to `to`. `from_ends`: from
    // will never run again (its sanitizer state is released).
    static void switch_to(Fiber& from, Fiber& to, bool from_ends = false);

    FiberStack* stack() const { return stack_; }

private:
    static void main(Fiber* self);
    void* sp_ = nullptr;
    Entry entry_ = nullptr;
    void* arg_ = nullptr;
    Fiber* came_from_ = nullptr;  // who switched to this fiber last
    FiberStack* stack_ = nullptr;
    // Sanitizer state: ASan's fake stack of a suspended fiber, the bounds of
    // the stack it runs on, TSan's fiber.
    void* asan_fake_ = nullptr;
    const void* stack_bottom_ = nullptr;
    size_t stack_size_ = 0;
    void* tsan_fiber_ = nullptr;
    bool owns_tsan_ = false;
    bool ends_ignoring_ = false;
};

// Stacks of one OS thread, reused from block to block.
class StackPool {
public:
    FiberStack* take();
    void give(FiberStack* s);
    ~StackPool();

private:
    std::vector<FiberStack*> free_, all_;
};

}  // namespace tandem::emu
