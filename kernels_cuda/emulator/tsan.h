// ThreadSanitizer's annotations, or nothing in other builds: the emulator
// orders GPU threads only where CUDA does (barriers, a block's start and
// end), and its own bookkeeping, shared by the fibers of a block, is not
// checked (IgnoreScope).
#pragma once

#if defined(__SANITIZE_THREAD__)
#define TANDEM_EMU_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TANDEM_EMU_TSAN 1
#endif
#endif

#ifdef TANDEM_EMU_TSAN
extern "C" {
void __tsan_acquire(void* addr);
void __tsan_release(void* addr);
void __tsan_ignore_thread_begin();
void __tsan_ignore_thread_end();
}
#endif

namespace tandem::emu::tsan {

#ifdef TANDEM_EMU_TSAN
inline void acquire(const void* a) { __tsan_acquire(const_cast<void*>(a)); }
inline void release(const void* a) { __tsan_release(const_cast<void*>(a)); }
struct IgnoreScope {
    IgnoreScope() { __tsan_ignore_thread_begin(); }
    ~IgnoreScope() { __tsan_ignore_thread_end(); }
    IgnoreScope(const IgnoreScope&) = delete;
    IgnoreScope& operator=(const IgnoreScope&) = delete;
};
#else
inline void acquire(const void*) {}
inline void release(const void*) {}
struct IgnoreScope {
    IgnoreScope() {}  // user-provided: no unused-variable warning
    IgnoreScope(const IgnoreScope&) = delete;
    IgnoreScope& operator=(const IgnoreScope&) = delete;
};
#endif

}  // namespace tandem::emu::tsan
