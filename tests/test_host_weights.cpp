// The host's weight matrices copied out of the file mapping
// (runtime/engine/host_weight_arena.h): the arena's copies, and sessions
// that copy or multiply from the mapping giving the same logits.
#include <gtest/gtest.h>

#include <cstdint>
#include <cctype>
#include <cstring>
#include <fstream>
#include <string>
#include <filesystem>
#include <numeric>
#include <vector>

#include "runtime/engine/host_weight_arena.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/model/model_spec.h"
#include "runtime/engine/session.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tests/test_paths.h"

namespace {

TEST(HostWeightArena, CopiesAreExactAlignedAndKept) {
    tandem::HostWeightArena arena;
    std::vector<std::vector<uint8_t>> sources;
    std::vector<const uint8_t*> copies;
    uint64_t total = 0;
    for (size_t n : {size_t{1}, size_t{63}, size_t{64}, size_t{1000}, size_t{3} << 20, size_t{7}}) {
        std::vector<uint8_t> src(n);
        std::iota(src.begin(), src.end(), static_cast<uint8_t>(n));
        copies.push_back(arena.copy(src));
        sources.push_back(std::move(src));
        total += n;
    }
    // The first copy opens a chunk on a huge-page boundary.
    EXPECT_EQ(reinterpret_cast<uintptr_t>(copies[0]) % tandem::HostWeightArena::kHugePage, 0u);
    for (size_t i = 0; i < copies.size(); ++i) {
        EXPECT_EQ(reinterpret_cast<uintptr_t>(copies[i]) % 64, 0u) << "copy " << i;
        EXPECT_EQ(0, std::memcmp(copies[i], sources[i].data(), sources[i].size())) << "copy " << i;
        if (i > 0) {
            EXPECT_GE(copies[i], copies[i - 1] + sources[i - 1].size());  // no overlap
        }
    }
    EXPECT_EQ(arena.bytes_copied(), total);
}

std::vector<float> logits_of(const tandem::gguf::File& file, bool copy) {
    const auto spec = tandem::model::load_model_spec(file);
    const auto tokens = tandem::Tokenizer::from_gguf(file).encode("The quick brown fox jumps over the lazy dog", true);
    tandem::SessionOptions opt;
    opt.n_ctx = 64;
    opt.n_ubatch = 16;
    opt.n_threads = 2;
    opt.copy_host_weights = copy;
    tandem::Session session(file, spec, opt);
    EXPECT_EQ(session.host_weights_copied(), copy && file.mapped());
    std::vector<float> prompt, step;
    session.eval(tokens, true, prompt);
    session.eval(std::vector<int32_t>{tokens[2]}, false, step);  // a decode step: the fused matvecs
    prompt.insert(prompt.end(), step.begin(), step.end());
    return prompt;
}

TEST(HostWeightArena, SessionsGiveTheSameLogitsCopiedOrMapped) {
    const auto path = tandem::testing::test_data("tiny-llama-Q4_K_M.gguf");
    const auto mapped = tandem::gguf::File::open(path);
    ASSERT_TRUE(mapped.mapped());
    const auto copied = logits_of(mapped, true);
    ASSERT_FALSE(copied.empty());
    EXPECT_EQ(copied, logits_of(mapped, false));
    // A file read into memory is not copied again; same logits.
    const auto read = tandem::gguf::File::open(path, {tandem::gguf::LoadMode::ReadIntoMemory, false});
    EXPECT_FALSE(read.mapped());
    EXPECT_EQ(copied, logits_of(read, true));
}

// Resident kB of this process's mappings of `path` (/proc/self/smaps); -1
// when there is no smaps to read.
int64_t mapped_rss_kb(const std::filesystem::path& path) {
    std::ifstream smaps("/proc/self/smaps");
    if (!smaps) return -1;
    const std::string want = std::filesystem::canonical(path).string();
    int64_t total = 0;
    bool ours = false;
    for (std::string line; std::getline(smaps, line);) {
        if (!line.empty() && std::isxdigit(static_cast<unsigned char>(line[0])) && line.find('-') != std::string::npos &&
            line.find(' ') > line.find('-')) {
            ours = line.size() >= want.size() && line.compare(line.size() - want.size(), want.size(), want) == 0;
        } else if (ours && line.rfind("Rss:", 0) == 0) {
            total += std::stoll(line.substr(4));
        }
    }
    return total;
}

// Copied out, the matrices' pages of the mapping leave the process (else
// each weight is resident twice: tandem serve on SmolLM2 held 96 MB of
// mapping beside its 94 MB of copies).
TEST(HostWeightArena, ACopyingSessionLetsTheMappingsPagesGo) {
    const auto path = tandem::testing::test_data("tiny-llama-Q4_K_M.gguf");
    const auto file = tandem::gguf::File::open(path);
    ASSERT_TRUE(file.mapped());
    uint64_t sum = 0;  // every page of every tensor read, so resident
    for (const auto& t : file.tensors()) {
        for (const uint8_t b : file.tensor_data(t)) sum += b;
    }
    const int64_t before = mapped_rss_kb(path);
    if (before < 0) GTEST_SKIP() << "no /proc/self/smaps";
    ASSERT_GT(before, static_cast<int64_t>(file.total_tensor_bytes() / 2048)) << "the tensors were read (sum " << sum << ")";
    const auto spec = tandem::model::load_model_spec(file);
    tandem::SessionOptions opt;
    opt.n_ctx = 64;
    opt.n_threads = 2;
    opt.copy_host_weights = true;
    tandem::Session session(file, spec, opt);
    ASSERT_TRUE(session.host_weights_copied());
    const int64_t after = mapped_rss_kb(path);
    EXPECT_LT(after, before / 4) << "resident kB of the mapping: " << before << " before the session, " << after
                                 << " after";
}

TEST(HostWeightArena, AvailableRamIsReadWhereTheSystemSaysIt) {
    const auto ram = tandem::available_ram();
    if (!std::filesystem::exists("/proc/meminfo")) GTEST_SKIP() << "no /proc/meminfo";
    ASSERT_TRUE(ram.has_value());
    EXPECT_GT(*ram, uint64_t{1} << 20);
}

}  // namespace
