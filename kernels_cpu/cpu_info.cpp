#include "kernels_cpu/cpu_info.h"

#include <cpuid.h>
#include <hwloc.h>

#include <thread>

namespace tandem::cpu {
namespace {

uint64_t read_xcr0() {
    uint32_t eax = 0, edx = 0;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return (static_cast<uint64_t>(edx) << 32) | eax;
}

}  // namespace

CpuFeatures detect_cpu_features() {
    CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
    const bool osxsave = (c >> 27) & 1u;
    if (!osxsave) return f;
    const uint64_t xcr0 = read_xcr0();
    // The OS must save YMM (bits 1-2) for AVX and opmask/ZMM (bits 5-7) for
    // AVX-512, or using those registers corrupts state across switches.
    const bool os_avx = (xcr0 & 0x6) == 0x6;
    const bool os_avx512 = os_avx && (xcr0 & 0xe0) == 0xe0;
    f.fma = os_avx && ((c >> 12) & 1u);
    f.f16c = os_avx && ((c >> 29) & 1u);
    const unsigned family_id = a;  // leaf 1's eax: base family 8-11, extended 20-27
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
        f.bmi2 = (b >> 8) & 1u;
        f.avx2 = os_avx && ((b >> 5) & 1u);
        f.avx512f = os_avx512 && ((b >> 16) & 1u);
        f.avx512bw = os_avx512 && ((b >> 30) & 1u);
        f.avx512vl = os_avx512 && ((b >> 31) & 1u);
        f.avx512_vnni = os_avx512 && ((c >> 11) & 1u);
    }
    if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) {
        f.avx_vnni = os_avx && ((a >> 4) & 1u);
    }
    __get_cpuid(0, &a, &b, &c, &d);  // the vendor: ebx, edx, ecx
    const bool amd = b == 0x68747541u || b == 0x6f677948u;  // "Auth"enticAMD, "Hygo"nGenuine
    const unsigned base = (family_id >> 8) & 0xFu;
    const unsigned family = base == 0xFu ? base + ((family_id >> 20) & 0xFFu) : base;
    f.fast_pdep = f.bmi2 && !(amd && family < 0x19u);
#endif
    return f;
}

std::string describe(const CpuFeatures& f) {
    std::string s;
    auto add = [&s](bool on, const char* name) {
        if (!on) return;
        if (!s.empty()) s += ' ';
        s += name;
    };
    add(f.avx2, "avx2");
    add(f.fma, "fma");
    add(f.f16c, "f16c");
    add(f.avx512f, "avx512f");
    add(f.avx512bw, "avx512bw");
    add(f.avx512vl, "avx512vl");
    add(f.avx512_vnni, "avx512_vnni");
    add(f.avx_vnni, "avx_vnni");
    add(f.bmi2, "bmi2");
    return s.empty() ? "none" : s;
}

int physical_core_count() {
    hwloc_topology_t topo = nullptr;
    int cores = 0;
    if (hwloc_topology_init(&topo) == 0) {
        if (hwloc_topology_load(topo) == 0) cores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
        hwloc_topology_destroy(topo);
    }
    if (cores <= 0) cores = static_cast<int>(std::thread::hardware_concurrency());
    return cores > 0 ? cores : 1;
}

}  // namespace tandem::cpu
