// `tandem bench --calibrate`: this machine's memory bandwidths, the CPU
// kernels' rates per weight type (one token, a few, micro-batches by row
// width, large batches), the fixed costs of a step and the attention's
// cost per position, measured and stored (planner/calibration.h) for
// `plan`, `run -ngl auto` and bench's predictions.
#pragma once

namespace tandem::tools {

// The CPU's read bandwidth in GB/s over `threads` threads, from a buffer
// well past the last-level cache (also bench --calibrate-each's measure).
double measure_cpu_read_gbps(int threads);

// Measures, stores in planner::calibration_path() and prints (json: as
// one JSON object) this machine's calibration: the CPU's in `rounds`
// rounds, keeping the best of each measure (planner::best_of). Throws
// tandem::Error for rounds outside [1, kMaxCalibrationRounds].
inline constexpr int kDefaultCalibrationRounds = 3;
inline constexpr int kMaxCalibrationRounds = 20;
void calibrate(bool json, int rounds = kDefaultCalibrationRounds);

}  // namespace tandem::tools
