// What the CPU offers: the SIMD levels the kernels dispatch on (from CPUID,
// checked against what the OS saves in XCR0) and the number of physical
// cores (from hwloc), which is the default thread count: on SMT machines a
// second thread per core only competes for the same load ports.
#pragma once

#include <string>

namespace tandem::cpu {

struct CpuFeatures {
    bool avx2 = false;
    bool fma = false;
    bool f16c = false;
    bool avx512f = false;
    bool avx512bw = false;
    bool avx512vl = false;
    bool avx512_vnni = false;
    bool avx_vnni = false;
    bool bmi2 = false;
    // pdep/pext in a few cycles: BMI2 outside AMD's families before 19h
    // (Zen 1 and 2, Hygon), whose microcoded pdep takes tens to hundreds.
    bool fast_pdep = false;
};

CpuFeatures detect_cpu_features();
std::string describe(const CpuFeatures& f);  // "avx2 fma f16c avx512f ..."

// Physical cores as hwloc counts them; at least 1.
int physical_core_count();

}  // namespace tandem::cpu
