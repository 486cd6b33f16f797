// AVX-512 kernels built with VNNI (dpbusd/dpwssd): picked on CPUs that
// have avx512_vnni (Ice Lake, Zen 4 and later).
#define TANDEM_AVX512_FN(name) dot_##name##_avx512
#include "kernels_cpu/avx512/vec_dot_avx512_body.h"
#include "kernels_cpu/avx512/vec_dot_kquants_avx512_body.h"
