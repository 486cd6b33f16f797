#include "kernels_cuda/emulator/fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <atomic>
#include <new>

#include "kernels_cuda/emulator/tsan.h"  // TANDEM_EMU_TSAN; emu.h (through fiber.h) has TANDEM_EMU_ASAN

#ifdef TANDEM_EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#ifdef TANDEM_EMU_TSAN
extern "C" {
void* __tsan_get_current_fiber();
void* __tsan_create_fiber(unsigned flags);
void __tsan_destroy_fiber(void* fiber);
void __tsan_switch_to_fiber(void* fiber, unsigned flags);
}
constexpr unsigned __tsan_switch_to_fiber_no_sync = 1;
#endif

#if !defined(__x86_64__)
#error "the CUDA emulator's fibers are written for x86-64"
#endif

// tandem_emu_switch(void** save_sp, void* new_sp): pushes the callee-saved
// registers on the current stack, stores the stack pointer in *save_sp,
// loads new_sp and pops the same from it. MXCSR and the x87 control word
// are not switched: no kernel changes rounding modes, and ldmxcsr and fldcw
// cost more than the rest of a switch.
// tandem_emu_trampoline: a new fiber's first return lands here with its
// argument in r12 and its entry in r13 (an entry never returns).
asm(R"(
    .text
    .globl tandem_emu_switch
    .type tandem_emu_switch, @function
tandem_emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size tandem_emu_switch, .-tandem_emu_switch

    .globl tandem_emu_trampoline
    .type tandem_emu_trampoline, @function
tandem_emu_trampoline:
    movq %r12, %rdi
    callq *%r13
    ud2
    .size tandem_emu_trampoline, .-tandem_emu_trampoline
    .section .note.GNU-stack,"",@progbits
    .text
)");

extern "C" void tandem_emu_switch(void** save_sp, void* new_sp);
extern "C" void tandem_emu_trampoline();

namespace tandem::emu {

FiberStack::FiberStack() {
    const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t bytes = kFiberStackBytes;
    // Twice the size, trimmed to the aligned part.
    void* p = mmap(nullptr, 2 * bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    const auto start = reinterpret_cast<uintptr_t>(p);
    const uintptr_t aligned = (start + bytes - 1) & ~static_cast<uintptr_t>(bytes - 1);
    if (aligned > start) munmap(p, aligned - start);
    if (aligned + bytes < start + 2 * bytes) munmap(reinterpret_cast<void*>(aligned + bytes), start + 2 * bytes - aligned - bytes);
    region_ = reinterpret_cast<char*>(aligned);
    new (region_) StackHeader{};
    // An overflow faults on the guard page instead of writing the header.
    mprotect(region_ + page, page, PROT_NONE);
    base_ = region_ + 2 * page;
    size_ = bytes - 2 * page;
    static std::atomic<unsigned> next_colour{0};
    colour = (next_colour.fetch_add(1) * 7 % 64) * 64;
}

FiberStack::~FiberStack() {
    if (region_) munmap(region_, kFiberStackBytes);
}

Fiber::~Fiber() {
#ifdef TANDEM_EMU_TSAN
    if (owns_tsan_ && tsan_fiber_) __tsan_destroy_fiber(tsan_fiber_);
#endif
}

void Fiber::adopt_current() {
    stack_ = nullptr;
#ifdef TANDEM_EMU_TSAN
    tsan_fiber_ = __tsan_get_current_fiber();
    owns_tsan_ = false;
#endif
}

void Fiber::prepare() {
#ifdef TANDEM_EMU_TSAN
    if (!tsan_fiber_ || !owns_tsan_) {
        tsan_fiber_ = __tsan_create_fiber(0);
        owns_tsan_ = true;
    }
#endif
}

void Fiber::start(FiberStack* stack, Entry entry, void* arg) {
    stack_ = stack;
    stack_bottom_ = stack->bottom();
    stack_size_ = stack->size();
#ifdef TANDEM_EMU_ASAN
    // The frames a finished fiber never returned from (its entry's, at the
    // top) left their redzones poisoned; a fiber ended by an error left
    // any. Unpoisoning all of a 512 KiB stack each time would cost 64 KiB of
    // shadow writes per GPU thread.
    constexpr size_t kEntryFrames = size_t{32} << 10;
    if (stack->abandoned || stack->size() <= kEntryFrames) {
        __asan_unpoison_memory_region(stack->bottom(), stack->size());
        stack->abandoned = false;
    } else {
        __asan_unpoison_memory_region(stack->bottom() + stack->size() - kEntryFrames, kEntryFrames);
    }
#endif
#ifdef TANDEM_EMU_TSAN
    prepare();
#endif
    // Top of the stack, 16-byte aligned; the return address sits so that the
    // trampoline starts with rsp % 16 == 0 (its call then pushes to 8 mod 16).
    // Each stack's frames start at a different offset within 4 KiB (the
    // stacks are a whole number of pages apart, so their tops would share
    // one L1 set and evict each other at every switch).
    auto top = reinterpret_cast<uintptr_t>(stack->bottom() + stack->size() - stack->colour) & ~uintptr_t{15};
    auto* slot = reinterpret_cast<uint64_t*>(top - 24);
    slot[0] = reinterpret_cast<uint64_t>(&tandem_emu_trampoline);  // ret
    slot[-1] = 0;                                                  // rbp
    slot[-2] = 0;                                                  // rbx
    entry_ = entry;
    arg_ = arg;
    slot[-3] = reinterpret_cast<uint64_t>(this);                   // r12
    slot[-4] = reinterpret_cast<uint64_t>(&Fiber::main);           // r13
    slot[-5] = 0;                                                  // r14
    slot[-6] = 0;                                                  // r15
    sp_ = &slot[-6];
    asan_fake_ = nullptr;
}

// A fiber's first instructions: finish the switch that started it (the
// bounds of the stack it came from are learned here the first time).
void Fiber::main(Fiber* self) {
#ifdef TANDEM_EMU_TSAN
    // A TSan fiber reused from a thread that ended ignoring accesses (below).
    if (self->ends_ignoring_) {
        self->ends_ignoring_ = false;
        __tsan_ignore_thread_end();
    }
#endif
#ifdef TANDEM_EMU_ASAN
    const void* old_bottom = nullptr;
    size_t old_size = 0;
    __sanitizer_finish_switch_fiber(nullptr, &old_bottom, &old_size);
    Fiber* from = self->came_from_;
    if (from && !from->stack_ && from->stack_size_ == 0) {
        from->stack_bottom_ = old_bottom;
        from->stack_size_ = old_size;
    }
#endif
    self->entry_(self->arg_);
    std::abort();  // entries end by switching away for good
}

void Fiber::switch_to(Fiber& from, Fiber& to, bool from_ends) {
#ifdef TANDEM_EMU_TSAN
    // The emulator's own reads of `to` are not the kernel's: a thread that
    // ends leaves ignoring them, and its fiber's next start stops (main).
    if (from_ends) {
        __tsan_ignore_thread_begin();
        from.ends_ignoring_ = true;
    }
#endif
#ifdef TANDEM_EMU_ASAN
    to.came_from_ = &from;  // for Fiber::main (only ASan wants it: under TSan this write would be a race of ours)
    __sanitizer_start_switch_fiber(from_ends ? nullptr : &from.asan_fake_, to.stack_bottom_, to.stack_size_);
#else
    (void)from_ends;
#endif
#ifdef TANDEM_EMU_TSAN
    // No synchronisation implied by the switch: only barriers order threads.
    __tsan_switch_to_fiber(to.tsan_fiber_, __tsan_switch_to_fiber_no_sync);
#endif
    tandem_emu_switch(&from.sp_, to.sp_);
#ifdef TANDEM_EMU_ASAN
    // Back in `from`.
    __sanitizer_finish_switch_fiber(from.asan_fake_, nullptr, nullptr);
#endif
}

FiberStack* StackPool::take() {
    if (!free_.empty()) {
        FiberStack* s = free_.back();
        free_.pop_back();
        return s;
    }
    all_.push_back(new FiberStack());
    return all_.back();
}

void StackPool::give(FiberStack* s) { free_.push_back(s); }

StackPool::~StackPool() {
    for (FiberStack* s : all_) delete s;
}

}  // namespace tandem::emu
