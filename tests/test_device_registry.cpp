// Device names are parsed in one place (runtime/engine/device_registry.h):
// what each name means, and a clear error for the others.
#include <gtest/gtest.h>

#include <string>

#include "runtime/common/error.h"
#include "runtime/engine/device_registry.h"

namespace {

using tandem::AcceleratorKind;
using tandem::parse_accelerator;

TEST(DeviceRegistry, NamesMeanTheirAccelerator) {
    EXPECT_EQ(parse_accelerator("").kind, AcceleratorKind::None);
    EXPECT_EQ(parse_accelerator("cpu2").kind, AcceleratorKind::StandIn);
    EXPECT_EQ(parse_accelerator("cpu3").kind, AcceleratorKind::StandIn);
    EXPECT_EQ(parse_accelerator("cpu17").kind, AcceleratorKind::StandIn);
    const auto cuda = parse_accelerator("cuda");
    EXPECT_EQ(cuda.kind, AcceleratorKind::Cuda);
    EXPECT_EQ(cuda.cuda_index, 0);
    const auto cuda3 = parse_accelerator("cuda3");
    EXPECT_EQ(cuda3.kind, AcceleratorKind::Cuda);
    EXPECT_EQ(cuda3.cuda_index, 3);
}

TEST(DeviceRegistry, OtherNamesAreRefusedSayingWhatWasExpected) {
    for (const std::string name : {"bogus", "cudax", "cuda-1", "cuda12345678", "CPU2", "cpu", "cpu1", "cpu0", "cpu02"}) {
        try {
            (void)parse_accelerator(name);
            ADD_FAILURE() << name << " was accepted";
        } catch (const tandem::Error& e) {
            const std::string msg = e.what();
            EXPECT_NE(msg.find("expected cuda, cudaN (a GPU) or cpuN with N >= 2"), std::string::npos) << msg;
            EXPECT_NE(msg.find("'" + name + "'"), std::string::npos) << msg;
        }
    }
}

}  // namespace
