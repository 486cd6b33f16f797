// The Q8_0/Q5_0 panel GEMMs for AVX2 CPUs with AVX-VNNI (Alder Lake and
// later, Zen 5; vpdpbusd on 256-bit registers): the body of
// gemm_panel_signed_avx2.cpp built with -mavxvnni, a lane one vpdpbusd.
// matmul() takes them at the AVX2 level where CPUID has AVX-VNNI and
// TANDEM_CPU is not avx2 (kernel_table.h).
#define TANDEM_SIGNED_NAME(x) x##_avxvnni
#include "kernels_cpu/avx2/gemm_panel_signed_body.h"
