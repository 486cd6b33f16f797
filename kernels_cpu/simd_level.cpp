// SimdLevel detection and the TANDEM_CPU override.
#include <cstdlib>
#include <string>

#include "kernels_cpu/cpu_info.h"
#include "kernels_cpu/matmul.h"
#include "kernels_cpu/vec_dot.h"
#include "runtime/common/error.h"

namespace tandem::cpu {

std::string_view simd_level_name(SimdLevel level) {
    switch (level) {
        case SimdLevel::Scalar: return "scalar";
        case SimdLevel::Avx2: return "avx2";
        case SimdLevel::Avx2Vnni: return "avxvnni";
        case SimdLevel::Avx512: return "avx512";
        case SimdLevel::Avx512Vnni: return "avx512vnni";
    }
    return "unknown";
}

namespace {

// Computed once: CPUID does not change while the process runs.
const CpuFeatures& features() {
    static const CpuFeatures f = detect_cpu_features();
    return f;
}

}  // namespace

bool simd_level_supported(SimdLevel level) {
#if defined(__x86_64__)
    const CpuFeatures& f = features();
    switch (level) {
        case SimdLevel::Scalar: return true;
        // The AVX2 kernels convert fp16 with F16C and accumulate with FMA.
        case SimdLevel::Avx2: return f.avx2 && f.fma && f.f16c;
        // The AVX-512 kernels also use AVX2/F16C instructions on 256-bit
        // halves, and byte/word ops (BW) on 128/256-bit registers (VL).
        // The kernels are built twice, with and without VNNI.
        case SimdLevel::Avx512: return f.avx512f && f.avx512bw && f.avx512vl && f.avx2 && f.fma && f.f16c;
        case SimdLevel::Avx2Vnni: return simd_level_supported(SimdLevel::Avx2) && f.avx_vnni;
        case SimdLevel::Avx512Vnni: return simd_level_supported(SimdLevel::Avx512) && f.avx512_vnni;
    }
    return false;
#else
    return level == SimdLevel::Scalar;
#endif
}

bool cpu_fast_pdep() {
#if defined(__x86_64__)
    return features().fast_pdep;
#else
    return false;
#endif
}

SimdLevel best_simd_level() {
    for (SimdLevel level : {SimdLevel::Avx512Vnni, SimdLevel::Avx512, SimdLevel::Avx2Vnni, SimdLevel::Avx2}) {
        if (simd_level_supported(level)) return level;
    }
    return SimdLevel::Scalar;
}

SimdLevel simd_level_from_env() {
    const char* env = std::getenv("TANDEM_CPU");
    if (env == nullptr || *env == '\0') return best_simd_level();
    const std::string_view want(env);
    for (SimdLevel level :
         {SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx2Vnni, SimdLevel::Avx512, SimdLevel::Avx512Vnni}) {
        if (want != simd_level_name(level)) continue;
        if (!simd_level_supported(level)) {
            throw Error("TANDEM_CPU=" + std::string(want) + ": this CPU does not support " + std::string(want) +
                        " (best available: " + std::string(simd_level_name(best_simd_level())) + ")");
        }
        return level;
    }
    throw Error("TANDEM_CPU=" + std::string(want) + ": expected one of scalar, avx2, avxvnni, avx512, avx512vnni");
}

}  // namespace tandem::cpu
