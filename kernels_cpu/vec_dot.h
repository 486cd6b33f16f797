// Internal to kernels_cpu: the dot-product kernels behind matmul(), one per
// (weight type, SIMD level), gathered in one constant table per weight type
// (kernel_table.h) that matmul and the tests index by type instead of
// switching.
//
// Every kernel has the same shape: one weight row against up to
// kMaxTileTokens activation rows. Passing several tokens at once lets the
// SIMD kernels unpack each weight block (nibble masks, scale shuffles) once
// and reuse it from registers for every token, which is what makes batched
// prompt processing compute-efficient; with nt = 1 it is a plain matvec dot.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels_cpu/matmul.h"
#include "runtime/quant/quant_types.h"

// A kernel that exists only in x86 builds, as a table entry: null elsewhere.
#if defined(__x86_64__)
#define TANDEM_X86(f) f
#else
#define TANDEM_X86(f) nullptr
#endif

namespace tandem::cpu::detail {

// Tokens a kernel handles per call (register tile width in tokens).
inline constexpr int kMaxTileTokens = 4;

// y[t * ldy] = dot(weight row w, activation row a + t * a_stride bytes) for
// t in [0, nt), nt in [1, kMaxTileTokens]; n elements, a multiple of the
// weight type's block size.
using DotFn = void (*)(int64_t n, const void* w, const void* a, size_t a_stride, int nt, float* y, int64_t ldy);

// A kernel at each SIMD level (kernel_table.h holds them per weight type).
// A null entry means "no kernel at this level"; lookups fall back to the
// next lower level.
struct LevelKernels {
    DotFn scalar = nullptr;
    DotFn avx2 = nullptr;
    DotFn avx512 = nullptr;    // built with VNNI: the Avx512Vnni level's
    DotFn avx512nv = nullptr;  // the same source built without VNNI: the Avx512 level's
    // The AVX2 source built again with AVX-512VL and BMI2 (TANDEM_AVX2_FN in
    // simd_x86.h): the AVX-512 levels' kernel of a type that runs its AVX2
    // kernels there (WeightKernels::avx2_at_avx512). The same integers and
    // float steps; 32 vector registers, so nothing spills, and pdep.
    DotFn avx2w = nullptr;
    // The AVX2 source built with BMI2 (pdep for the IQ1 grid indices): the
    // AVX2 level's kernel where the CPU runs pdep fast (cpu_fast_pdep).
    DotFn avx2b = nullptr;
};

// The kernel for w_type at `level` (or the best available below it);
// throws tandem::Error for a type without CPU kernels.
DotFn dot_kernel(quant::Type w_type, SimdLevel level);

// X(TYPE, suffix): every weight type with a kernel (its activation type is
// quant::dot_type(TYPE)).
#define TANDEM_DOT_TYPES(X) \
    X(F32, f32)             \
    X(F16, f16)             \
    X(BF16, bf16)           \
    X(Q4_0, q4_0)           \
    X(Q4_1, q4_1)           \
    X(Q5_0, q5_0)           \
    X(Q5_1, q5_1)           \
    X(Q8_0, q8_0)           \
    X(Q2_K, q2_K)           \
    X(Q3_K, q3_K)           \
    X(Q4_K, q4_K)           \
    X(Q5_K, q5_K)           \
    X(Q6_K, q6_K)           \
    X(IQ2_XXS, iq2_xxs)     \
    X(IQ2_XS, iq2_xs)       \
    X(IQ2_S, iq2_s)         \
    X(IQ3_XXS, iq3_xxs)     \
    X(IQ3_S, iq3_s)         \
    X(IQ1_S, iq1_s)         \
    X(IQ1_M, iq1_m)         \
    X(IQ4_NL, iq4_nl)       \
    X(IQ4_XS, iq4_xs)       \
    X(MXFP4, mxfp4)

#define TANDEM_DOT_ARGS int64_t n, const void *w, const void *a, size_t a_stride, int nt, float *y, int64_t ldy
#define TANDEM_DECLARE_DOT(T, name)             \
    void dot_##name##_scalar(TANDEM_DOT_ARGS); \
    void dot_##name##_avx2(TANDEM_DOT_ARGS);   \
    void dot_##name##_avx512(TANDEM_DOT_ARGS); \
    void dot_##name##_avx512nv(TANDEM_DOT_ARGS);
TANDEM_DOT_TYPES(TANDEM_DECLARE_DOT)
#undef TANDEM_DECLARE_DOT

// How llama.cpp's single-row K-quant kernel (its AVX2 vec_dot) spreads the
// offset or minimum term over its eight integer lanes (see KLanesOrder in
// runtime/quant/dot_order.h); the SIMD kernels follow it per format.
enum class LaneTerm {
    MinLanes,      // minimum term in lane l (groups 2l, 2l+1), its own multiply-add per lane
    MinScalar,     // minimum term summed to one integer, in a scalar accumulator
    OffsetBsum,    // offset subtracted in the integer lanes through the bsums of groups 2l, 2l+1
    OffsetInline,  // offset subtracted per element pair, inside each lane's own elements
};

// llama.cpp computes some types in a float order of its own (see
// runtime/quant/dot_order.h); for those the AVX2 kernel follows it and serves the
// AVX-512 level too, so every level gives the bits llama.cpp gives.
bool follows_llama_order(quant::Type w_type);

// Rows of a batch: llama.cpp's CPU backend multiplies them with other
// kernels than single rows, in another float order: Q2_K and Q4_K through
// repacked kernels that take rows four at a time (batches of 4 or more,
// tokens [0, n - n % 4)), Q3_K, Q5_K and Q6_K through tiled kernels for
// batches of 8 or more (every token). Tandem follows, so its logits are
// llama.cpp's bit for bit.
struct BatchForm {
    DotFn fn = nullptr;     // null: the single-row kernel for every token
    int64_t min_tokens = 0;  // batches smaller than this use the single-row kernel
    int64_t group = 1;       // tokens [0, n - n % group) use fn
};
BatchForm batch_form(quant::Type w_type, SimdLevel level);
#define TANDEM_DECLARE_BATCH_DOT(name)              \
    void dot_##name##_batch_scalar(TANDEM_DOT_ARGS);   \
    void dot_##name##_batch_avx2(TANDEM_DOT_ARGS);     \
    void dot_##name##_batch_avx512(TANDEM_DOT_ARGS);   \
    void dot_##name##_batch_avx512nv(TANDEM_DOT_ARGS);
TANDEM_DECLARE_BATCH_DOT(q2_K)
TANDEM_DECLARE_BATCH_DOT(q3_K)
TANDEM_DECLARE_BATCH_DOT(q4_K)
TANDEM_DECLARE_BATCH_DOT(q5_K)
TANDEM_DECLARE_BATCH_DOT(q6_K)
TANDEM_DECLARE_BATCH_DOT(iq2_xxs)
TANDEM_DECLARE_BATCH_DOT(iq2_xs)
TANDEM_DECLARE_BATCH_DOT(iq2_s)
TANDEM_DECLARE_BATCH_DOT(iq3_xxs)
TANDEM_DECLARE_BATCH_DOT(iq3_s)
TANDEM_DECLARE_BATCH_DOT(iq1_s)
TANDEM_DECLARE_BATCH_DOT(iq1_m)
TANDEM_DECLARE_BATCH_DOT(iq4_xs)
#undef TANDEM_DECLARE_BATCH_DOT

// Decode (one token) over several rows at once: y[r] = dot(row r, a) for
// r < n_rows (<= kDecodeRows), row r at w + r * row_stride bytes. The same
// integers and the same per-row float steps as the single-row kernel, so
// the same bits; the per-block horizontal sums of several rows share
// reduction trees and the float steps run across rows in one vector,
// instead of a serial scalar tail per row (decode_rows_x86.h: Q4_K, 4 rows
// per pass, AVX2; decode_rows_kquants_avx512.cpp (Q4_K, Q2_K) and
// decode_rows_q4_0_avx512.cpp: 8 rows, VNNI; decode_rows_legacy_avx512.cpp:
// Q4_1, Q5_0, Q5_1, Q8_0, and decode_rows_q3_K_avx512.cpp, _q6_K_ and Q5_K in
// _kquants_: one row after another, VNNI; avx2/decode_rows_iquants_avx2.cpp:
// the 256-element i-quants, one row after another, AVX2 and its AVX-512VL
// build).
// Null where a type has none (then the single-row kernel runs).
inline constexpr int kDecodeRows = 16;
// Every fp16 value as a float, indexed by its bits (65536 floats, made on
// first use): a decode kernel's weight scale becomes two loads, where the
// conversion instructions take about three uops on the shuffle port per
// block and row. A matrix's scales share a few exponents, so its rows touch
// a few lines of the table's 256 KiB.
const float* f16_table();
using DecodeRowsFn = void (*)(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, float* y);
// Several tokens of a small batch (a serving step: one token per stream),
// nt in [1, kMaxDecodeTokens]: y[t * ldy + r] = dot(row r, activation t at
// a + t * a_stride), each token's bits those fn gives it alone. Each weight
// block is loaded and unpacked once for all nt tokens.
inline constexpr int kMaxDecodeTokens = 8;
using DecodeRowsMultiFn = void (*)(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a,
                                   size_t a_stride, int nt, float* y, int64_t ldy);
struct DecodeRows {
    DecodeRowsFn fn = nullptr;
    // Where set, fn reads the activation row rearranged by prepare (once
    // per matmul, into prepared_bytes(n) bytes aligned to 64), not the row.
    void (*prepare)(const void* a, int64_t n, void* out) = nullptr;
    size_t (*prepared_bytes)(int64_t n) = nullptr;
    // Null: matmul calls fn once per token (same bits, no weight reuse).
    DecodeRowsMultiFn multi = nullptr;
    // The same in the order of the type's batch form (BatchForm), for the
    // tokens of a small batch that take it; null: none.
    DecodeRowsMultiFn multi_batch = nullptr;
};
// several_tokens: for a small batch (multi is what counts).
DecodeRows decode_rows_kernel(quant::Type w_type, SimdLevel level, bool several_tokens = false);
// x[0 .. count): row r of a rows kernel's pass, r < n_rows; the rows past
// n_rows (a pass is whole) repeat row 0: computed, never stored.
template <class Block>
void decode_row_pointers(const void* w, size_t row_stride, int n_rows, int count, const Block** x) {
    for (int r = 0; r < count; ++r) {
        x[r] = reinterpret_cast<const Block*>(static_cast<const unsigned char*>(w) + (r < n_rows ? r : 0) * row_stride);
    }
}
void dot_q4_K_rows_avx2(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, float* y);
void dot_q4_0_rows_avx512(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, float* y);
void prepare_q4_0_rows(const void* a, int64_t n, void* out);
size_t q4_0_rows_prepared_bytes(int64_t n);
// Q4_0 at AVX2 (decode_rows_q4_0_avx2.cpp): eight rows a pass, its own
// prepared activation.
void dot_q4_0_rows_avx2(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, float* y);
// Q4_1, Q5_0, Q5_1 and Q8_0 at AVX2 (vec_dot_avx2.cpp): their single-row
// kernel on one row after another, streamed ahead into L1 and L2
// (prefetch_row_stream), the activation row as it is.
void dot_q4_1_rows_avx2(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, float* y);
void dot_q5_0_rows_avx2(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, float* y);
void dot_q5_1_rows_avx2(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, float* y);
void dot_q8_0_rows_avx2(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, float* y);
void prepare_q4_0_rows_avx2(const void* a, int64_t n, void* out);
size_t q4_0_rows_avx2_prepared_bytes(int64_t n);
// IQ4_NL and MXFP4 in Q4_0's passes (kernels_cpu/decode_rows_nibble_x86.h)
// at AVX2 and with AVX-512 VNNI, each its own prepared activation.
#define TANDEM_DECLARE_NIBBLE_ROWS(name, isa)                                                                         \
    void dot_##name##_rows_##isa(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, float* y); \
    void prepare_##name##_rows_##isa(const void* a, int64_t n, void* out);                                          \
    size_t name##_rows_##isa##_prepared_bytes(int64_t n);
TANDEM_DECLARE_NIBBLE_ROWS(iq4_nl, avx2)
TANDEM_DECLARE_NIBBLE_ROWS(mxfp4, avx2)
TANDEM_DECLARE_NIBBLE_ROWS(iq4_nl, avx512)
TANDEM_DECLARE_NIBBLE_ROWS(mxfp4, avx512)
#undef TANDEM_DECLARE_NIBBLE_ROWS
void dot_q4_K_rows_avx512(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, float* y);
void prepare_q4_K_rows(const void* a, int64_t n, void* out);
size_t q4_K_rows_prepared_bytes(int64_t n);
void dot_q2_K_rows_avx512(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, float* y);
#define TANDEM_DECODE_MULTI_ARGS \
    int64_t n, const void *w, size_t row_stride, int n_rows, const void *a, size_t a_stride, int nt, float *y, int64_t ldy
void dot_q4_0_rows_multi_avx2(TANDEM_DECODE_MULTI_ARGS);  // decode_rows_q4_0_avx2.cpp (decode_rows_nibble_x86.h)
void dot_iq4_nl_rows_multi_avx2(TANDEM_DECODE_MULTI_ARGS);
void dot_mxfp4_rows_multi_avx2(TANDEM_DECODE_MULTI_ARGS);
void dot_iq4_nl_rows_multi_avx512(TANDEM_DECODE_MULTI_ARGS);
void dot_mxfp4_rows_multi_avx512(TANDEM_DECODE_MULTI_ARGS);
void dot_q4_K_rows_multi_avx2(TANDEM_DECODE_MULTI_ARGS);  // avx2/decode_rows_q4_K_tokens_avx2.cpp, eight rows in the lanes
// Q4_1, Q5_0, Q5_1 and Q8_0 (vec_dot_avx2.cpp): eight rows a pass.
void dot_q4_1_rows_multi_avx2(TANDEM_DECODE_MULTI_ARGS);
void dot_q5_0_rows_multi_avx2(TANDEM_DECODE_MULTI_ARGS);
void dot_q5_1_rows_multi_avx2(TANDEM_DECODE_MULTI_ARGS);
void dot_q8_0_rows_multi_avx2(TANDEM_DECODE_MULTI_ARGS);
// The 256-element i-quants: their decode rows (avx2/decode_rows_iquants_avx2.cpp:
// one row after another, all tokens at once), and the other builds of
// those and of their row and batch kernels (TANDEM_DECLARE_IQ_BUILD): the
// AVX-512 levels' (_avx2w, LevelKernels::avx2w), and IQ1_S's and IQ1_M's
// with BMI2 (_avx2b, LevelKernels::avx2b).
#define TANDEM_DECLARE_IQ_BUILD(name, suffix)                                                                          \
    void dot_##name##_rows_##suffix(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, float* y); \
    void dot_##name##_rows_multi_##suffix(TANDEM_DECODE_MULTI_ARGS);                                                    \
    void dot_##name##_##suffix(TANDEM_DOT_ARGS);                                                                        \
    void dot_##name##_batch_##suffix(TANDEM_DOT_ARGS);
#define TANDEM_DECLARE_IQ_AVX2(name)                                                                                \
    void dot_##name##_rows_avx2(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, float* y); \
    void dot_##name##_rows_multi_avx2(TANDEM_DECODE_MULTI_ARGS);                                                    \
    TANDEM_DECLARE_IQ_BUILD(name, avx2w)
TANDEM_DECLARE_IQ_AVX2(iq2_xxs)
TANDEM_DECLARE_IQ_AVX2(iq2_xs)
TANDEM_DECLARE_IQ_AVX2(iq2_s)
TANDEM_DECLARE_IQ_AVX2(iq3_xxs)
TANDEM_DECLARE_IQ_AVX2(iq3_s)
TANDEM_DECLARE_IQ_AVX2(iq1_s)
TANDEM_DECLARE_IQ_AVX2(iq1_m)
TANDEM_DECLARE_IQ_AVX2(iq4_xs)
#undef TANDEM_DECLARE_IQ_AVX2
TANDEM_DECLARE_IQ_BUILD(iq1_s, avx2b)
TANDEM_DECLARE_IQ_BUILD(iq1_m, avx2b)
#undef TANDEM_DECLARE_IQ_BUILD
void dot_q4_K_rows_multi_avx512(TANDEM_DECODE_MULTI_ARGS);
void dot_q4_K_rows_batch_avx512(TANDEM_DECODE_MULTI_ARGS);  // in the batch form's order (dot_q4_K_batch)
void dot_q6_K_rows_multi_avx512(TANDEM_DECODE_MULTI_ARGS);
void dot_q4_1_rows_multi_avx512(TANDEM_DECODE_MULTI_ARGS);
void dot_q5_0_rows_multi_avx512(TANDEM_DECODE_MULTI_ARGS);
void dot_q5_1_rows_multi_avx512(TANDEM_DECODE_MULTI_ARGS);
void dot_q8_0_rows_multi_avx512(TANDEM_DECODE_MULTI_ARGS);
void dot_q2_K_rows_multi_avx512(TANDEM_DECODE_MULTI_ARGS);
void prepare_q2_K_rows(const void* a, int64_t n, void* out);
size_t q2_K_rows_prepared_bytes(int64_t n);
void dot_q3_K_rows_avx512(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, float* y);
void prepare_q3_K_rows(const void* a, int64_t n, void* out);
size_t q3_K_rows_prepared_bytes(int64_t n);
void dot_q5_K_rows_avx512(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, float* y);  // Q4_K's preparation
void dot_q6_K_rows_avx512(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, float* y);  // reads the Q8_K row
// Q4_1, Q5_0, Q5_1, Q8_0 (decode_rows_legacy_avx512.cpp): one prepared layout.
void dot_q8_0_rows_avx512(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, float* y);
void prepare_q8_0_rows(const void* a, int64_t n, void* out);
void dot_q4_1_rows_avx512(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, float* y);
void dot_q5_0_rows_avx512(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, float* y);
void dot_q5_1_rows_avx512(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, float* y);
void prepare_q4_1_rows(const void* a, int64_t n, void* out);
void prepare_q5_0_rows(const void* a, int64_t n, void* out);
void prepare_q5_1_rows(const void* a, int64_t n, void* out);
size_t legacy_rows_prepared_bytes(int64_t n);

// Batches with F16/BF16 weights: each activation is rounded to the
// activation type as usual but stored widened back to f32, once per
// matmul, so the token-tiled kernels do not convert every activation again
// for every weight row. The products and their order are those of the
// 16-bit kernel, so the results are identical; only the speed differs.
struct WideDot {
    DotFn fn = nullptr;
    quant::QuantizeRowFn round_row = nullptr;  // float row -> rounded float row
};
// {nullptr, nullptr} where there is none (other types, the scalar level).
WideDot wide_dot_kernel(quant::Type w_type, SimdLevel level);

void dot_f16_wide_avx2(TANDEM_DOT_ARGS);
void dot_bf16_wide_avx2(TANDEM_DOT_ARGS);
void dot_f16_wide_avx512(TANDEM_DOT_ARGS);
void dot_bf16_wide_avx512(TANDEM_DOT_ARGS);
void dot_f16_wide_avx512nv(TANDEM_DOT_ARGS);
void dot_bf16_wide_avx512nv(TANDEM_DOT_ARGS);
void round_row_f16_avx2(const float* src, void* dst, int64_t n);
void round_row_bf16_avx2(const float* src, void* dst, int64_t n);

// Quantizes activations into a_type: the reference quantize_row at Scalar,
// byte-identical SIMD versions above it (act_quant_avx2.cpp).
quant::QuantizeRowFn activation_quantizer(quant::Type a_type, SimdLevel level);
// What a KV cache row of type t is stored through: ggml's CPU conversion
// from float for t (llama.cpp's cache store), the same bytes at every
// level. The activation quantizers for F16, BF16 and Q8_0 (Q8_0 rounds
// half to even there, not as its reference), the no-search conversion for
// IQ4_NL (not the file quantizer's trial scales), the reference for the
// rest.
quant::QuantizeRowFn cache_row_quantizer(quant::Type t, SimdLevel level);

// Q8_0/Q8_1 activations as ggml's CPU backend makes them (act_quant.cpp);
// the other partners use the reference quantize_row.
void quantize_activation_q8_0(const float* src, void* dst, int64_t n);
void quantize_activation_q8_1(const float* src, void* dst, int64_t n);
quant::QuantizeRowFn scalar_activation_quantizer(quant::Type a_type);
void quantize_row_q8_0_avx2(const float* src, void* dst, int64_t n);
void quantize_row_q8_1_avx2(const float* src, void* dst, int64_t n);
void quantize_row_q8_K_avx2(const float* src, void* dst, int64_t n);
void quantize_row_f16_avx2(const float* src, void* dst, int64_t n);
void quantize_row_bf16_avx2(const float* src, void* dst, int64_t n);

// Calls a single-token dot F for each of the nt tokens: the scalar
// reference, and SIMD types whose kernels do not tile over tokens.
template <float (*F)(int64_t, const void*, const void*)>
void each_token(int64_t n, const void* w, const void* a, size_t a_stride, int nt, float* y, int64_t ldy) {
    const auto* ab = static_cast<const unsigned char*>(a);
    for (int t = 0; t < nt; ++t) y[t * ldy] = F(n, w, ab + static_cast<size_t>(t) * a_stride);
}

}  // namespace tandem::cpu::detail
