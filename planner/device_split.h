// Several accelerators splitting the layers (llama.cpp's -sm layer), internal
// to planner/: plan() hands inputs with device_capacities here.
#pragma once

#include "planner/planner.h"

namespace tandem::planner::detail {

// The devices' layers run one after the other, so a token's time is that of
// one device holding them all plus the hand-overs between devices. The
// plan is therefore made for one device of the devices' combined room
// (capacity less margin, each), and its layers shared between them in
// proportion to that room (or as tensor_split gives); each device's bytes
// are then those a session reserves on it (footprint per device, exact as
// the single-device plan's), and while one does not fit, the combined room
// shrinks by its overflow and the plan is made again. Weight streaming is
// off with several devices (the session turns it off too). The prediction
// adds, per extra boundary, one hand-over of the hidden state through the
// host per token, and of a micro-batch's per prompt batch.
Plan plan_devices(const model::ModelSpec& spec, const PlanInputs& in);

// The names of a comma list of devices, in order.
std::vector<std::string> device_names(const std::string& list);

}  // namespace tandem::planner::detail
