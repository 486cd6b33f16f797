// Measured hardware speeds, stored between runs so the planner predicts
// with this machine's numbers instead of the built-in defaults. The file is
// written by `tandem bench --calibrate` and read by `plan` and `run -ngl
// auto`. This header only stores and applies numbers; the measuring lives
// in tools/cmd_bench.cpp because the planner must stay free of kernels.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/planner.h"

namespace tandem::planner {

struct Calibration {
    std::string cpu_model;  // /proc/cpuinfo "model name", so a copied file is recognisable
    int physical_cores = 0;
    std::optional<double> cpu_gbps;   // CPU read bandwidth, all physical cores
    std::optional<double> gpu_gbps;   // device-to-device copy bandwidth
    std::optional<double> pcie_gbps;  // host-to-device copy bandwidth
    // The CPU kernels' rates per weight type and the fixed costs of a step
    // (planner.h), measured with `kernel_threads` threads; all empty in
    // files from before they were measured (version 1), which then predict
    // with the defaults.
    KernelCosts cpu_kernels;
    int kernel_threads = 0;
};

// The stand-in device's kernels: the host's (it holds its copies of the
// weights in the host's weight memory), with hand-overs that are copies
// between host buffers (bench --device cpu2). Files from before that
// recorded its one-token rates from heap memory (standin_matvec_gbps);
// they load, and those entries are not read.
KernelCosts standin_costs(const Calibration& c);

// The calibration as it would read on a host whose CPU read bandwidth is
// now `gbps` (bench --calibrate-each measures it around each test): the
// rates bound by memory (the bandwidth, one-token products from DRAM,
// copies) scaled by gbps / the calibrated bandwidth; rates
// from cache and batch products (bound by the cores; the few-token rate
// too, though its weights come from memory) kept. Unchanged
// without a calibrated bandwidth or for gbps <= 0.
Calibration at_bandwidth(const Calibration& c, double gbps);

// The quieter of two calibrations of one machine, measure by measure: the
// higher of each rate and bandwidth, the lower of each fixed cost. A
// shared host only ever slows a measurement down, so bench --calibrate
// measures in rounds and keeps the best, as bench keeps the fastest run.
// A measure one side lacks is the other's; the cache size, the CPU and
// the thread count are a's.
Calibration best_of(const Calibration& a, const Calibration& b);

// bench --calibrate's rounds combined: the best of each measure (best_of),
// but for the measures memory bandwidth bounds (the CPU's read bandwidth,
// one-token products from memory, copies) the middle round's value (the
// lower middle for an even count). This VM's bandwidth moves between
// states (28 to 64 GB/s within minutes) that the cores do not see, so the
// fastest round is a state, not an undisturbed run. Throws tandem::Error
// for no rounds.
Calibration combine_rounds(const std::vector<Calibration>& rounds);

// Tandem's cache directory: $TANDEM_CACHE_DIR, else $XDG_CACHE_HOME/tandem,
// else $HOME/.cache/tandem. Throws tandem::Error when none can be derived.
std::filesystem::path cache_dir();
std::filesystem::path calibration_path();  // cache_dir() / "calibration.json"

nlohmann::json to_json(const Calibration& c);
// Throws tandem::Error (one line) when the object is not a calibration.
Calibration calibration_from_json(const nlohmann::json& j);

// Writes atomically (temp file + rename), creating the directory.
void save_calibration(const Calibration& c, const std::filesystem::path& path);

// nullopt when the file is absent. A file that cannot be read or parsed
// also gives nullopt, with a one-line reason in *warning: a damaged cache
// must never stop a run, only fall back to the defaults.
std::optional<Calibration> load_calibration(const std::filesystem::path& path, std::string* warning);

// Fills the speeds the caller did not set (a flag on the command line wins
// over a measurement), and the host's kernel rates and fixed costs the
// caller left empty. Returns the names of the inputs it filled, so the
// caller can label them "measured".
std::vector<std::string> apply_calibration(const Calibration& c, PlanInputs& in);

// Reads a whole text file; used by both caches. Throws tandem::Error.
std::string read_text_file(const std::filesystem::path& path);
// Writes through a temp file and a rename, so a crash never leaves half a
// cache behind. Throws tandem::Error.
void write_text_file_atomic(const std::filesystem::path& path, const std::string& text);

}  // namespace tandem::planner
