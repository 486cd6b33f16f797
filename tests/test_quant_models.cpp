// Dequantizes every tensor of the shared tiny-llama files (quantized by
// llama.cpp's quantizer from tiny-llama-F16.gguf) and compares it with the
// same tensor of the F16 file. This checks our decoders against blocks
// written by the reference implementation, including the mixes (Q4_K_M
// etc. hold Q4_K, Q5_K, Q6_K... tensors side by side), which the round-trip
// tests cannot: those only prove that our quantizer and dequantizer agree.
//
// Bounds are per tensor type, on the relative RMSE (error RMS over the F16
// tensor's RMS). The weights are seeded Gaussian-like, so quantization noise
// is what the format's step predicts (see test_quant_roundtrip.cpp; the
// bounds sit ~15% above the measured values). A broken layout puts values
// in the wrong places: for independent weights that gives a relative RMSE
// near sqrt(2) ~ 1.41, and a wrong scale decode >= 0.5 for most tensors;
// BoundsAreFarBelowWhatAScrambledLayoutGives checks this on the real data.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "runtime/gguf/gguf_file.h"
#include "runtime/quant/quant_types.h"
#include "tests/test_paths.h"

namespace tq = tandem::quant;
using tandem::gguf::File;
using tandem::gguf::TensorInfo;
using tq::Type;

namespace {

// Largest acceptable relative RMSE of a tensor, by its type in the file.
// Measured aggregates on these files: Q8_0 0.0054, Q6_K 0.0177, Q5_K 0.036,
// Q4_0 0.086, Q4_K 0.071, Q3_K 0.151, Q2_K 0.297 (printed by the tests).
std::optional<double> rel_rmse_bound(Type t) {
    switch (t) {
        case Type::F32: return 0.0;  // norms are stored as F32 in every file: bit-identical
        case Type::F16: return 0.0;
        case Type::Q8_0: return 0.0065;
        case Type::Q6_K: return 0.021;
        case Type::Q5_K: return 0.042;
        case Type::Q5_0: return 0.050;
        case Type::Q5_1: return 0.045;
        case Type::Q4_K: return 0.082;
        case Type::Q4_1: return 0.090;
        case Type::Q4_0: return 0.099;
        case Type::Q3_K: return 0.175;
        case Type::Q2_K: return 0.340;
        default: return std::nullopt;
    }
}

std::filesystem::path model_path(const std::string& quant) {
    return tandem::testing::shared("models/tiny-llama-" + quant + ".gguf");
}

// The whole tensor as floats, decoded row by row (rows are what the GGUF
// shape guarantees to be whole blocks; ne[0] is the row length).
std::vector<float> dequantize_tensor(const File& f, const TensorInfo& info) {
    const int64_t row_len = info.row_length();
    const int64_t rows = info.n_rows();
    const auto rb = tq::row_bytes(info.type, row_len);
    EXPECT_TRUE(rb.has_value()) << info.name;
    const auto data = f.tensor_data(info);
    EXPECT_EQ(data.size(), *rb * static_cast<uint64_t>(rows)) << info.name;
    std::vector<float> out(static_cast<size_t>(row_len * rows));
    for (int64_t r = 0; r < rows; ++r) {
        tq::dequantize_row(info.type, data.data() + static_cast<size_t>(r) * *rb, out.data() + r * row_len, row_len);
    }
    return out;
}

struct ErrSums {
    double err2 = 0.0;
    double ref2 = 0.0;
    double worst = 0.0;  // largest per-tensor relative RMSE
    int tensors = 0;
    double rel() const { return ref2 > 0.0 ? std::sqrt(err2 / ref2) : 0.0; }
};

double rel_rmse(const std::vector<float>& ref, const std::vector<float>& got, ErrSums* sums) {
    double e2 = 0.0;
    double r2 = 0.0;
    for (size_t i = 0; i < ref.size(); ++i) {
        const double d = static_cast<double>(got[i]) - ref[i];
        e2 += d * d;
        r2 += static_cast<double>(ref[i]) * ref[i];
    }
    if (sums != nullptr) {
        sums->err2 += e2;
        sums->ref2 += r2;
        sums->tensors += 1;
    }
    return r2 > 0.0 ? std::sqrt(e2 / r2) : std::sqrt(e2);
}

}  // namespace

// Outside the anonymous namespace: the TEST_P classes derive from it, and
// in a unity build GCC warns about a base with internal linkage.
class QuantModels : public ::testing::TestWithParam<const char*> {};

TEST_P(QuantModels, EveryTensorDecodesCloseToTheF16Reference) {
    const auto qpath = model_path(GetParam());
    const auto rpath = model_path("F16");
    TANDEM_REQUIRE_SHARED(qpath);
    TANDEM_REQUIRE_SHARED(rpath);
    const File qf = File::open(qpath);
    const File rf = File::open(rpath);
    ASSERT_EQ(qf.tensors().size(), rf.tensors().size());
    std::map<std::string, ErrSums> by_type;
    for (const TensorInfo& qi : qf.tensors()) {
        SCOPED_TRACE(qi.name + " (" + std::string(tq::traits(qi.type).name) + ")");
        const TensorInfo* ri = rf.find_tensor(qi.name);
        ASSERT_NE(ri, nullptr);
        ASSERT_EQ(qi.shape, ri->shape);
        const auto bound = rel_rmse_bound(qi.type);
        ASSERT_TRUE(bound.has_value()) << "no bound for this type: extend rel_rmse_bound";
        const auto ref = dequantize_tensor(rf, *ri);
        const auto got = dequantize_tensor(qf, qi);
        auto& sums = by_type[std::string(tq::traits(qi.type).name)];
        const double rel = rel_rmse(ref, got, &sums);
        sums.worst = std::max(sums.worst, rel);
        if (*bound == 0.0) {
            EXPECT_EQ(got, ref);  // float tensors are copied, not requantized
        } else {
            EXPECT_LE(rel, *bound);
        }
        for (float v : got) ASSERT_TRUE(std::isfinite(v));
    }
    for (const auto& [name, s] : by_type) {
        std::printf("  %-8s %-5s tensors %3d  rel RMSE %.5f  worst tensor %.5f\n", GetParam(), name.c_str(), s.tensors,
                    s.rel(), s.worst);
    }
}

TEST_P(QuantModels, BoundsAreFarBelowWhatAScrambledLayoutGives) {
    // Decode each quantized tensor, then move values within each block as
    // a layout bug would (swap the block's halves: the nibble-order
    // mistake), and confirm the error dwarfs the bound.
    const auto qpath = model_path(GetParam());
    const auto rpath = model_path("F16");
    TANDEM_REQUIRE_SHARED(qpath);
    TANDEM_REQUIRE_SHARED(rpath);
    const File qf = File::open(qpath);
    const File rf = File::open(rpath);
    for (const TensorInfo& qi : qf.tensors()) {
        if (!tq::traits(qi.type).is_quantized || qi.name == "token_embd.weight") continue;  // embd: large, same blocks
        SCOPED_TRACE(qi.name);
        const auto ref = dequantize_tensor(rf, *rf.find_tensor(qi.name));
        auto got = dequantize_tensor(qf, qi);
        const int64_t qk = tq::traits(qi.type).block_elems;
        for (auto block = got.begin(); block != got.end(); block += qk) {
            std::rotate(block, block + qk / 2, block + qk);
        }
        EXPECT_GT(rel_rmse(ref, got, nullptr), 3.0 * *rel_rmse_bound(qi.type));
    }
}

TEST_P(QuantModels, OurQuantizerMatchesTheFilesQuality) {
    // Requantize the F16 reference with our quantizer to each tensor's type
    // and compare the error with that of the file's blocks: the scale
    // searches must be as good as llama.cpp's (within 2% per type).
    const auto qpath = model_path(GetParam());
    const auto rpath = model_path("F16");
    TANDEM_REQUIRE_SHARED(qpath);
    TANDEM_REQUIRE_SHARED(rpath);
    const File qf = File::open(qpath);
    const File rf = File::open(rpath);
    std::map<std::string, ErrSums> file_err;
    std::map<std::string, ErrSums> our_err;
    for (const TensorInfo& qi : qf.tensors()) {
        if (!tq::traits(qi.type).is_quantized) continue;
        const auto ref = dequantize_tensor(rf, *rf.find_tensor(qi.name));
        const auto got = dequantize_tensor(qf, qi);
        const std::string tname(tq::traits(qi.type).name);
        rel_rmse(ref, got, &file_err[tname]);
        const int64_t row_len = qi.row_length();
        const auto rb = *tq::row_bytes(qi.type, row_len);
        std::vector<uint8_t> q(rb);
        std::vector<float> ours(ref.size());
        for (int64_t r = 0; r < qi.n_rows(); ++r) {
            tq::quantize_row(qi.type, ref.data() + r * row_len, q.data(), row_len);
            tq::dequantize_row(qi.type, q.data(), ours.data() + r * row_len, row_len);
        }
        rel_rmse(ref, ours, &our_err[tname]);
    }
    for (const auto& [name, s] : file_err) {
        const double ours = our_err[name].rel();
        std::printf("  %-8s %-5s file rel RMSE %.5f  ours %.5f\n", GetParam(), name.c_str(), s.rel(), ours);
        EXPECT_LE(ours, 1.02 * s.rel()) << name;
    }
}

TEST(QuantModelsF16, F16TensorsRequantizeToTheSameBytes) {
    // The F16 file is the reference for the others; its own decode must be
    // lossless: dequantize then quantize gives the stored bytes back.
    const auto path = model_path("F16");
    TANDEM_REQUIRE_SHARED(path);
    const File f = File::open(path);
    int checked = 0;
    for (const TensorInfo& info : f.tensors()) {
        SCOPED_TRACE(info.name);
        const auto values = dequantize_tensor(f, info);
        const auto data = f.tensor_data(info);
        std::vector<uint8_t> back(data.size());
        const int64_t row_len = info.row_length();
        const auto rb = *tq::row_bytes(info.type, row_len);
        for (int64_t r = 0; r < info.n_rows(); ++r) {
            uint8_t* dst = back.data() + static_cast<size_t>(r) * rb;
            tq::quantize_row(info.type, values.data() + r * row_len, dst, row_len);
        }
        ASSERT_TRUE(std::equal(back.begin(), back.end(), data.begin()));
        for (float v : values) ASSERT_TRUE(std::isfinite(v));
        checked += info.type == Type::F16;
    }
    EXPECT_GT(checked, 0) << "no F16 tensors in the F16 file";
}

INSTANTIATE_TEST_SUITE_P(TinyLlama, QuantModels,
                         ::testing::Values("Q8_0", "Q4_0", "Q4_K_M", "Q5_K_M", "Q6_K", "Q3_K_M", "Q2_K"),
                         [](const ::testing::TestParamInfo<const char*>& info) { return std::string(info.param); });
