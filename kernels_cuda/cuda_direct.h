// The kernel library's own answers to what cuda_api.h asks through the
// plugin: the GPUs present and their copy bandwidths, straight from the
// CUDA runtime. The plugin's table (runtime/engine_cuda/cuda_plugin.h)
// points at these; the rest of Tandem calls cuda_api.h's list_devices and
// measure_bandwidth, which go through the plugin.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "kernels_cuda/cuda_api.h"

namespace tandem::cuda::direct {

std::vector<DeviceInfo> list_devices(std::string* why_none);
BandwidthMeasurement measure_bandwidth(int device, size_t bytes);

}  // namespace tandem::cuda::direct
