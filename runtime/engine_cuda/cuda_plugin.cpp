// The table libtandem_cuda.so exports (cuda_plugin.h).
#include "runtime/engine_cuda/cuda_plugin.h"

extern "C" __attribute__((visibility("default"))) const tandem::cuda::CudaPlugin* tandem_cuda_plugin() {
    static const tandem::cuda::CudaPlugin table = [] {
        tandem::cuda::CudaPlugin t;
        t.list_devices = tandem::cuda::direct::list_devices;
        t.measure_bandwidth = tandem::cuda::direct::measure_bandwidth;
        t.make_device = tandem::cuda::direct::make_cuda_device;
        return t;
    }();
    return &table;
}
