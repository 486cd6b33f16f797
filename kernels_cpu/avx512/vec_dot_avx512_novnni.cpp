// The same AVX-512 kernels built without VNNI, for AVX-512 CPUs that lack
// it (Skylake-SP/X): simd_x86.h then emulates dpbusd/dpwssd with
// maddubs/madd + add.
#if defined(__AVX512VNNI__)
#error "vec_dot_avx512_novnni.cpp must be compiled without -mavx512vnni"
#endif
#define TANDEM_AVX512_FN(name) dot_##name##_avx512nv
#include "kernels_cpu/avx512/vec_dot_avx512_body.h"
#include "kernels_cpu/avx512/vec_dot_kquants_avx512_body.h"
