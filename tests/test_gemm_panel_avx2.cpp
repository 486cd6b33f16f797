// The AVX2 panel GEMMs (kernels_cpu/avx2/gemm_panel_*_avx2.cpp): each
// called directly against the scalar row kernel it stands in for (bit for
// bit, on model-like data and on extreme codes and activations that reach
// the int16 limits the kernels rely on), and matmul() at the AVX2 level
// against Scalar on batches large enough to take the panels. The AVX-512
// VNNI panels of the i-quants, IQ4_NL and MXFP4 get the same direct checks,
// and so do the AVX2 decode-rows kernels of IQ4_NL and MXFP4.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels_cpu/cpu_info.h"
#include "kernels_cpu/gemm_panel.h"
#include "kernels_cpu/kernel_table.h"
#include "kernels_cpu/matmul.h"
#include "kernels_cpu/vec_dot.h"
#include "runtime/quant/fp16.h"
#include "runtime/quant/quant_blocks.h"
#include "runtime/quant/quant_types.h"
#include "tests/random_blocks.h"

namespace {

using namespace tandem;
using tandem::cpu::SimdLevel;
using tandem::quant::Type;

#define TANDEM_TEST_TYPE(T, name) Type::T,
const std::vector<Type> kWeightTypes = {TANDEM_DOT_TYPES(TANDEM_TEST_TYPE)};
#undef TANDEM_TEST_TYPE

size_t row_size(Type t, int64_t n) { return static_cast<size_t>(*quant::row_bytes(t, n)); }

// The types with an AVX2 panel, where this CPU can run it.
std::vector<Type> avx2_panel_types() {
    std::vector<Type> out;
    if (!cpu::simd_level_supported(SimdLevel::Avx2)) return out;
    for (Type t : kWeightTypes) {
        const cpu::detail::WeightKernels* k = cpu::detail::weight_kernels(t);
        if (k != nullptr && k->panel_avx2.gemm != nullptr) out.push_back(t);
    }
    return out;
}

// The grid types (i-quants, MXFP4): random codes (random_blocks.h).
bool random_codes(Type t) { return tandem::testing::tested_on_random_codes(t); }

std::vector<float> random_floats(std::mt19937& rng, size_t n, float scale) {
    std::normal_distribution<float> dist(0.0f, scale);
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    std::vector<float> v(n);
    for (float& f : v) {
        f = dist(rng);
        if (u(rng) < 0.01f) f *= 8.0f;
    }
    return v;
}

// Weight rows of raw random bytes (every code pattern, scales at their
// extremes) with the float fields set to finite values.
template <class B, class F>
void set_fields(uint8_t* data, size_t bytes, F f) {
    auto* b = reinterpret_cast<B*>(data);
    for (size_t i = 0; i < bytes / sizeof(B); ++i) f(b[i]);
}
std::vector<uint8_t> raw_weights(std::mt19937& rng, Type t, int64_t n_rows, int64_t n) {
    using namespace tandem::quant;
    std::vector<uint8_t> w(row_size(t, n) * static_cast<size_t>(n_rows));
    std::uniform_int_distribution<int> byte(0, 255);
    for (uint8_t& b : w) b = static_cast<uint8_t>(byte(rng));
    std::uniform_real_distribution<float> scale(0.001f, 0.05f);
    const auto h = [&] { return fp32_to_fp16(scale(rng)); };
    switch (t) {
        case Type::Q4_0: set_fields<block_q4_0>(w.data(), w.size(), [&](block_q4_0& b) { b.d = h(); }); break;
        case Type::Q4_1: set_fields<block_q4_1>(w.data(), w.size(), [&](block_q4_1& b) { b.d = h(), b.m = h(); }); break;
        case Type::Q5_0: set_fields<block_q5_0>(w.data(), w.size(), [&](block_q5_0& b) { b.d = h(); }); break;
        case Type::Q5_1: set_fields<block_q5_1>(w.data(), w.size(), [&](block_q5_1& b) { b.d = h(), b.m = h(); }); break;
        case Type::Q8_0: set_fields<block_q8_0>(w.data(), w.size(), [&](block_q8_0& b) { b.d = h(); }); break;
        case Type::Q2_K: set_fields<block_q2_K>(w.data(), w.size(), [&](block_q2_K& b) { b.d = h(), b.dmin = h(); }); break;
        case Type::Q3_K: set_fields<block_q3_K>(w.data(), w.size(), [&](block_q3_K& b) { b.d = h(); }); break;
        case Type::Q4_K: set_fields<block_q4_K>(w.data(), w.size(), [&](block_q4_K& b) { b.d = h(), b.dmin = h(); }); break;
        case Type::Q5_K: set_fields<block_q5_K>(w.data(), w.size(), [&](block_q5_K& b) { b.d = h(), b.dmin = h(); }); break;
        case Type::Q6_K: set_fields<block_q6_K>(w.data(), w.size(), [&](block_q6_K& b) { b.d = h(); }); break;
        default:
            if (!random_codes(t)) {
                ADD_FAILURE() << "no raw-weight rule for " << quant::traits(t).name;
                break;
            }
            // Every byte pattern is a valid block but for the scale.
            for (size_t at = 0; at < w.size(); at += quant::traits(t).block_bytes) {
                tandem::testing::set_block_scale(t, w.data() + at, scale(rng));
            }
    }
    return w;
}

// Model-like weights: quantized floats, or for the grid types random
// codes with sane scales (random_blocks.h).
std::vector<uint8_t> quantized_weights(std::mt19937& rng, Type t, int64_t n_rows, int64_t n) {
    if (random_codes(t)) {
        std::vector<uint8_t> w(row_size(t, n) * static_cast<size_t>(n_rows));
        for (int64_t r = 0; r < n_rows; ++r) {
            tandem::testing::fill_random_blocks(t, n, static_cast<uint32_t>(rng()), w.data() + r * row_size(t, n));
        }
        return w;
    }
    const std::vector<float> f = random_floats(rng, static_cast<size_t>(n_rows * n), 0.05f);
    std::vector<uint8_t> w(row_size(t, n) * static_cast<size_t>(n_rows));
    for (int64_t r = 0; r < n_rows; ++r) quant::quantize_row(t, f.data() + r * n, w.data() + r * row_size(t, n), n);
    return w;
}

// Activation rows of a_type, a_stride bytes apart (room for the panel's
// extras): quantized from floats, or (extreme) codes mostly at the ends of
// their range with consistent sums. Q8_0/Q8_1 codes stay in [-127, 127],
// as every quantizer makes them; Q8_K's reach -128.
struct Acts {
    std::vector<uint8_t> data;
    size_t stride = 0;
};
// full_range: Q8_0/Q8_1 codes down to -128 too (which no quantizer makes,
// but the Q8_0 and Q5_0 panels are exact for).
Acts make_acts(std::mt19937& rng, Type a_type, int64_t n_tokens, int64_t n, size_t extra_per_block, bool extreme,
               bool full_range = false) {
    using namespace tandem::quant;
    const int64_t nb = n / quant::traits(a_type).block_elems;
    Acts acts;
    acts.stride = (row_size(a_type, n) + extra_per_block * static_cast<size_t>(nb) + 63) / 64 * 64;
    acts.data.assign(acts.stride * static_cast<size_t>(n_tokens), 0);
    const int lowest = a_type == Type::Q8_K || full_range ? -128 : -127;
    std::uniform_int_distribution<int> code(lowest, 127), coin(0, 3);
    const auto extreme_code = [&] {
        const int c = coin(rng);
        return c == 0 ? lowest : c == 1 ? 127 : code(rng);
    };
    for (int64_t t = 0; t < n_tokens; ++t) {
        uint8_t* row = acts.data.data() + static_cast<size_t>(t) * acts.stride;
        if (!extreme) {
            const std::vector<float> x = random_floats(rng, static_cast<size_t>(n), 1.0f);
            cpu::detail::scalar_activation_quantizer(a_type)(x.data(), row, n);
            continue;
        }
        for (int64_t i = 0; i < nb; ++i) {
            if (a_type == Type::Q8_K) {
                auto& b = reinterpret_cast<block_q8_K*>(row)[i];
                b.d = 0.02f;
                for (int g = 0; g < kQK_K / 16; ++g) {
                    int s = 0;
                    for (int j = 16 * g; j < 16 * g + 16; ++j) s += b.qs[j] = static_cast<int8_t>(extreme_code());
                    b.bsums[g] = static_cast<int16_t>(s);
                }
            } else if (a_type == Type::Q8_0) {
                auto& b = reinterpret_cast<block_q8_0*>(row)[i];
                b.d = fp32_to_fp16(0.02f);
                for (int8_t& q : b.qs) q = static_cast<int8_t>(extreme_code());
            } else {
                auto& b = reinterpret_cast<block_q8_1*>(row)[i];
                b.d = fp32_to_fp16(0.02f);
                int s = 0;
                for (int8_t& q : b.qs) s += q = static_cast<int8_t>(extreme_code());
                b.s = fp32_to_fp16(0.02f * static_cast<float>(s));
            }
        }
    }
    return acts;
}

// What matmul() runs for the tokens a panel takes: the batch form where a
// type has one, else the single-row kernel (scalar builds: the reference).
cpu::detail::DotFn reference_kernel(const cpu::detail::WeightKernels& k) {
    return k.batch.scalar != nullptr ? k.batch.scalar : k.dot.scalar;
}

// Which build of a type's panel check_panel calls.
enum class PanelIsa { Avx2, AvxVnni, Avx512Vnni };
const cpu::detail::PanelKernel& panel_of(const cpu::detail::WeightKernels& k, PanelIsa isa) {
    return isa == PanelIsa::AvxVnni ? k.panel_avxvnni : isa == PanelIsa::Avx512Vnni ? k.panel : k.panel_avx2;
}

// One panel call of n_rows (<= 16) rows against n_tokens activation rows,
// each output compared with the reference's bits.
void check_panel(Type t, const std::vector<uint8_t>& w, int64_t n_rows, int64_t n, Acts acts, int64_t n_tokens,
                 const std::string& what, PanelIsa isa = PanelIsa::Avx2) {
    const cpu::detail::WeightKernels& k = *cpu::detail::weight_kernels(t);
    const cpu::detail::PanelKernel& p = panel_of(k, isa);
    ASSERT_NE(p.gemm, nullptr);
    const Type a_type = quant::dot_type(t);
    for (int64_t tok = 0; tok < n_tokens; ++tok) {
        if (p.prepare != nullptr) p.prepare(a_type, acts.data.data() + static_cast<size_t>(tok) * acts.stride, n);
    }
    const int64_t ldy = 19;  // not a multiple of 8: the stores of a half panel stay in their rows
    std::vector<float> y(static_cast<size_t>(n_tokens * ldy), -7.0f), ref(y.size(), -7.0f);
    std::unique_ptr<void, decltype(&std::free)> buf(std::aligned_alloc(64, (p.bytes(n) + 63) / 64 * 64), &std::free);
    ASSERT_NE(buf, nullptr);
    p.gemm(w.data(), row_size(t, n), n_rows, n, acts.data.data(), acts.stride, n_tokens, y.data(), ldy, buf.get());
    const cpu::detail::DotFn fn = reference_kernel(k);
    for (int64_t r = 0; r < n_rows; ++r) {
        for (int64_t tok = 0; tok < n_tokens; ++tok) {
            fn(n, w.data() + static_cast<size_t>(r) * row_size(t, n), acts.data.data() + static_cast<size_t>(tok) * acts.stride,
               acts.stride, 1, &ref[static_cast<size_t>(tok * ldy + r)], 1);
        }
    }
    // memcmp: the same bits, and the columns past n_rows untouched.
    int mismatches = 0;
    for (int64_t tok = 0; tok < n_tokens; ++tok) {
        for (int64_t r = 0; r < ldy; ++r) {
            const size_t at = static_cast<size_t>(tok * ldy + r);
            if (std::memcmp(&y[at], &ref[at], sizeof(float)) == 0) continue;
            if (mismatches++ == 0) {
                ADD_FAILURE() << quant::traits(t).name << " " << what << " rows=" << n_rows << " n=" << n << " token=" << tok
                              << " row=" << r << ": " << y[at] << " vs " << ref[at];
            }
        }
    }
    EXPECT_EQ(mismatches, 0) << quant::traits(t).name << " " << what << " rows=" << n_rows << " n=" << n;
}

std::vector<int64_t> panel_widths(Type t) {
    return quant::traits(t).block_elems == 32 ? std::vector<int64_t>{32, 96, 800} : std::vector<int64_t>{256, 768, 2048};
}

TEST(GemmPanelAvx2, MatchesReferenceRowKernelBits) {
    const std::vector<Type> types = avx2_panel_types();
    if (types.empty()) GTEST_SKIP() << "no AVX2 on this CPU";
    std::mt19937 rng(26);
    for (Type t : types) {
        const size_t extra = cpu::detail::weight_kernels(t)->panel_avx2.extra_bytes;
        for (int64_t n : panel_widths(t)) {
            for (int64_t n_rows : {16, 13, 8, 3}) {
                const int64_t n_tokens = 12;
                check_panel(t, quantized_weights(rng, t, n_rows, n), n_rows, n,
                            make_acts(rng, quant::dot_type(t), n_tokens, n, extra, false), n_tokens, "quantized");
                check_panel(t, raw_weights(rng, t, n_rows, n), n_rows, n,
                            make_acts(rng, quant::dot_type(t), n_tokens, n, extra, true), n_tokens, "extreme");
            }
        }
    }
}

// The AVX-512 VNNI panels of the i-quants (avx512/gemm_panel_iq_avx512.cpp)
// and of IQ4_NL and MXFP4 (avx512/gemm_panel_kq_avx512.cpp), called directly
// as the AVX2 panels above: random codes with sane scales, and every byte
// pattern against activations mostly at -128 (Q8_K) or -127 and 127.
TEST(GemmPanelAvx512, IquantPanelsMatchReferenceRowKernelBits) {
    if (!cpu::simd_level_supported(SimdLevel::Avx512Vnni)) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
    std::mt19937 rng(33);
    int checked = 0;
    for (Type t : kWeightTypes) {
        const cpu::detail::WeightKernels* k = cpu::detail::weight_kernels(t);
        if (!random_codes(t) || k->panel.gemm == nullptr) continue;
        for (int64_t n : panel_widths(t)) {
            for (int64_t n_rows : {16, 13, 3}) {
                const int64_t n_tokens = 12;
                check_panel(t, quantized_weights(rng, t, n_rows, n), n_rows, n,
                            make_acts(rng, quant::dot_type(t), n_tokens, n, k->panel.extra_bytes, false), n_tokens, "random",
                            PanelIsa::Avx512Vnni);
                check_panel(t, raw_weights(rng, t, n_rows, n), n_rows, n,
                            make_acts(rng, quant::dot_type(t), n_tokens, n, k->panel.extra_bytes, true), n_tokens, "extreme",
                            PanelIsa::Avx512Vnni);
            }
        }
        ++checked;
    }
    EXPECT_EQ(checked, 10) << "the eight 256-element i-quants, IQ4_NL and MXFP4 have AVX-512 panels";
}

// The Q8_0 and Q5_0 panels (avx2/gemm_panel_signed_avx2.cpp) walk tiles of
// 8 tokens (then 4) over chunks of 8 blocks: token counts of one and
// several tiles, widths on and past a chunk boundary, and activations at
// both ends of int8 (their integer sums are exact for -128 too).
TEST(GemmPanelAvx2, SignedPanelsTilesChunksAndFullRange) {
    if (avx2_panel_types().empty()) GTEST_SKIP() << "no AVX2 on this CPU";
    std::mt19937 rng(29);
    for (Type t : {Type::Q8_0, Type::Q5_0}) {
        for (int64_t n : {256, 288, 544}) {
            for (int64_t n_tokens : {4, 8, 20}) {
                for (int64_t n_rows : {16, 9, 5}) {
                    check_panel(t, raw_weights(rng, t, n_rows, n), n_rows, n,
                                make_acts(rng, Type::Q8_0, n_tokens, n, 0, true, true), n_tokens, "full range");
                }
            }
        }
    }
}

// The AVX-VNNI builds of the Q8_0 and Q5_0 panels
// (avx2/gemm_panel_signed_avxvnni.cpp): the same checks, on CPUs with
// AVX-VNNI (Alder Lake and later, Sapphire Rapids, Zen 5).
TEST(GemmPanelAvxVnni, SignedPanelsMatchReferenceBits) {
    if (!cpu::detect_cpu_features().avx_vnni || !cpu::simd_level_supported(SimdLevel::Avx2)) {
        GTEST_SKIP() << "no AVX-VNNI on this CPU";
    }
    std::mt19937 rng(31);
    for (Type t : {Type::Q8_0, Type::Q5_0}) {
        ASSERT_NE(cpu::detail::weight_kernels(t)->panel_avxvnni.gemm, nullptr);
        for (int64_t n : {32, 256, 288, 800}) {
            for (int64_t n_tokens : {4, 12, 20}) {
                for (int64_t n_rows : {16, 9, 5}) {
                    check_panel(t, raw_weights(rng, t, n_rows, n), n_rows, n,
                                make_acts(rng, Type::Q8_0, n_tokens, n, 0, true, true), n_tokens, "full range", PanelIsa::AvxVnni);
                    check_panel(t, quantized_weights(rng, t, n_rows, n), n_rows, n,
                                make_acts(rng, Type::Q8_0, n_tokens, n, 0, false), n_tokens, "quantized", PanelIsa::AvxVnni);
                }
            }
        }
    }
}

// The decode-rows kernels of the table formats IQ4_NL and MXFP4
// (kernels_cpu/decode_rows_nibble_x86.h: AVX2, and AVX-512 VNNI where the
// CPU has it), called directly: every byte pattern of weights against
// activations mostly at -128 and 127 (their int32 totals are exact over
// the whole int8 range), rows of whole chunks of 8 blocks and of a tail,
// one token and several, each output the scalar single-row kernel's bits.
TEST(DecodeRowsAvx2, TableFormatsMatchSingleRowBitsAtExtremes) {
    if (avx2_panel_types().empty()) GTEST_SKIP() << "no AVX2 on this CPU";
    std::mt19937 rng(35);
    const bool vnni = cpu::simd_level_supported(SimdLevel::Avx512Vnni);
    for (Type t : {Type::IQ4_NL, Type::MXFP4}) {
        const cpu::detail::WeightKernels& k = *cpu::detail::weight_kernels(t);
        std::vector<const cpu::detail::DecodeRows*> builds{&k.rows_avx2};
        if (vnni) builds.push_back(&k.rows_avx512);
        for (const cpu::detail::DecodeRows* rows : builds) {
            ASSERT_NE(rows->multi, nullptr);
            const std::string what = std::string(quant::traits(t).name) + (rows == &k.rows_avx2 ? " avx2" : " avx512");
            for (int64_t n : {256, 352, 2080}) {
                const int n_rows = 13, nt = 3;
                const std::vector<uint8_t> w = raw_weights(rng, t, n_rows, n);
                const Acts acts = make_acts(rng, Type::Q8_0, nt, n, 0, true, true);
                const size_t prepared = (rows->prepared_bytes(n) + 63) / 64 * 64;
                std::unique_ptr<void, decltype(&std::free)> buf(std::aligned_alloc(64, prepared * nt), &std::free);
                auto* base = static_cast<uint8_t*>(buf.get());
                for (int tok = 0; tok < nt; ++tok) rows->prepare(acts.data.data() + tok * acts.stride, n, base + tok * prepared);
                std::vector<float> one(n_rows), y(static_cast<size_t>(nt * n_rows)), ref(y.size());
                rows->fn(n, w.data(), row_size(t, n), n_rows, base, one.data());
                rows->multi(n, w.data(), row_size(t, n), n_rows, base, prepared, nt, y.data(), n_rows);
                for (int tok = 0; tok < nt; ++tok) {
                    for (int r = 0; r < n_rows; ++r) {
                        k.dot.scalar(n, w.data() + r * row_size(t, n), acts.data.data() + tok * acts.stride, acts.stride, 1,
                                     &ref[tok * n_rows + r], 1);
                    }
                }
                EXPECT_EQ(std::memcmp(one.data(), ref.data(), one.size() * sizeof(float)), 0) << what << " n=" << n;
                EXPECT_EQ(std::memcmp(y.data(), ref.data(), y.size() * sizeof(float)), 0) << what << " n=" << n;
            }
        }
    }
}

// Through matmul(): batches that take the AVX2 panels (tokens >= 32; row
// counts not multiples of 16 or 8; tokens not multiples of 4, whose tail
// the row kernels take) give the Scalar level's bits.
TEST(GemmPanelAvx2, MatmulAtAvx2MatchesScalarBits) {
    const std::vector<Type> types = avx2_panel_types();
    if (types.empty()) GTEST_SKIP() << "no AVX2 on this CPU";
    std::mt19937 rng(27);
    for (Type t : types) {
        const int64_t be = quant::traits(t).block_elems;
        for (auto [n_rows, n] : {std::pair<int64_t, int64_t>{40, 3 * 256}, std::pair<int64_t, int64_t>{21, 8 * 256}}) {
            if (n % be != 0) continue;
            const auto wq = quantized_weights(rng, t, n_rows, n);
            const cpu::WeightView view{t, wq.data(), n_rows, n, row_size(t, n)};
            for (int64_t n_tokens : {8, 11, 32, 37, 67}) {
                const auto x = random_floats(rng, static_cast<size_t>(n_tokens * n), 1.0f);
                cpu::ThreadPool pool(2, false);
                std::vector<float> ref(static_cast<size_t>(n_tokens * n_rows)), y(ref.size());
                cpu::matmul(view, x.data(), n, n_tokens, ref.data(), n_rows, pool, SimdLevel::Scalar);
                // AVX2's panels, and AVX-VNNI's where the CPU has it.
                for (SimdLevel level : {SimdLevel::Avx2, SimdLevel::Avx2Vnni}) {
                    if (!cpu::simd_level_supported(level)) continue;
                    cpu::matmul(view, x.data(), n, n_tokens, y.data(), n_rows, pool, level);
                    EXPECT_EQ(std::memcmp(y.data(), ref.data(), y.size() * sizeof(float)), 0)
                        << quant::traits(t).name << " rows=" << n_rows << " n=" << n << " tokens=" << n_tokens
                        << " level=" << cpu::simd_level_name(level);
                }
            }
        }
    }
}

// In the single-token order (MatmulOrder::SingleToken) every token of a
// batch gets its bits alone: the panels, which types with a batch form run
// in its order, must not take such batches.
TEST(GemmPanelAvx2, SingleTokenOrderKeepsEachTokensBits) {
    const std::vector<Type> types = avx2_panel_types();
    if (types.empty()) GTEST_SKIP() << "no AVX2 on this CPU";
    std::mt19937 rng(28);
    const int64_t n_rows = 24, n = 512;
    for (Type t : types) {
        const auto wq = quantized_weights(rng, t, n_rows, n);
        const cpu::WeightView view{t, wq.data(), n_rows, n, row_size(t, n)};
        const int64_t n_tokens = 40;
        const auto x = random_floats(rng, static_cast<size_t>(n_tokens * n), 1.0f);
        cpu::ThreadPool pool(2, false);
        std::vector<float> y(static_cast<size_t>(n_tokens * n_rows)), one(static_cast<size_t>(n_rows));
        cpu::matmul(view, x.data(), n, n_tokens, y.data(), n_rows, pool, SimdLevel::Avx2, cpu::MatmulOrder::SingleToken);
        for (int64_t tok = 0; tok < n_tokens; ++tok) {
            cpu::matmul(view, x.data() + tok * n, n, 1, one.data(), n_rows, pool, SimdLevel::Avx2);
            EXPECT_EQ(std::memcmp(one.data(), y.data() + tok * n_rows, one.size() * sizeof(float)), 0)
                << quant::traits(t).name << " token=" << tok;
        }
    }
}

}  // namespace
