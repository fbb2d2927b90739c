// Where a version's instances run: Triton's instance_group rules applied to the GPUs this
// process sees. Pure: the GPUs are passed in, so the rules are tested without a GPU.
//
// - KIND_CPU: `count` CPU instances, named "<group>_<i>".
// - KIND_GPU: `count` instances on each GPU of `gpus` (every visible GPU when empty), named
//   "<group>_<i>_gpu<d>". They are listed count-major, as Triton creates them, so instance
//   order alternates GPUs (0 on gpu0, 0 on gpu1, 1 on gpu0...) and a scheduler that takes the
//   first idle instance spreads work over the GPUs.
// - KIND_AUTO: KIND_GPU on every visible GPU when the backend runs on GPUs and one is visible,
//   else KIND_CPU.
// GPU ordinals are CUDA's, after CUDA_VISIBLE_DEVICES: "gpus: [0]" under CUDA_VISIBLE_DEVICES=3
// is physical GPU 3, as in Triton.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "config/model_config.pb.h"
#include "core/status.h"

namespace vramd::runtime {

struct PlacementTarget {
  std::string backend;        // for messages
  bool backend_supports_gpu = false;
  int visible_gpus = 0;       // CUDA devices this process sees
  // Why there are none, or which they are, for refusals only ("CUDA 13.0, 1 device(s)...";
  // CUDA_VISIBLE_DEVICES is named when set): asking CUDA each device's properties is left
  // out of loads that place.
  std::function<std::string()> describe_gpus;
};

// REQUIRES: config normalized (group names and counts set). InvalidArgument names the group and
// the field (`kind`, `gpus`) when the plan cannot be made here: a GPU group for a CPU-only
// backend or with no GPU visible, an ordinal past the visible GPUs. A model with no group gets
// one CPU instance named "<model>_0".
Result<std::vector<backends::InstanceContext>> PlanInstances(const config::ModelConfig& config,
                                                             const PlacementTarget& target);

// `config` with its groups as PlanInstances resolves them, as Triton's normalization gives
// them to a backend: KIND_AUTO becomes KIND_GPU or KIND_CPU, and a GPU group without `gpus`
// lists every visible GPU. A backend that reads its groups (to decide where to stage weights)
// then agrees with where its instances are placed. REQUIRES: PlanInstances(config, target)
// succeeded.
config::ModelConfig ConfigAsPlaced(const config::ModelConfig& config, const PlacementTarget& target);

// The distinct GPUs of a plan, in first-use order.
std::vector<int> GpusOfPlan(const std::vector<backends::InstanceContext>& plan);

// The target this process gives `backend`: CUDA's device count, with CUDA_VISIBLE_DEVICES.
PlacementTarget PlacementTargetFor(const backends::Backend& backend);

}  // namespace vramd::runtime
