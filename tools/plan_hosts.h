// tandem plan --hosts FILE: pipeline stages over hosts (planner/hosts.h),
// from a file of one line per host and one for the link:
//   NAME ram=SIZE [vram=SIZE[,SIZE...]]
//   link BANDWIDTH [latency=TIME]       e.g. link 10Gbit latency=50us
// ('#' starts a comment). Sizes as --vram takes them; bandwidths in Gbit,
// Mbit (per second) or GB/s, MB/s; times in s, ms, us.
#pragma once

#include <string>

#include "planner/hosts.h"
#include "runtime/model/model_spec.h"

namespace tandem::tools {

struct HostsFile {
    std::vector<planner::Host> hosts;
    planner::Link link;
};

// Throws tandem::Error naming the file, the line and what was expected.
HostsFile read_hosts_file(const std::string& path);

// Plans and prints (a table and the reasons, or JSON).
void print_hosts_plan(const std::string& path, const std::string& model_name, const model::ModelSpec& spec,
                      const planner::PlanInputs& base, bool json);

}  // namespace tandem::tools
