// What the frameworks' exporters share (frameworks/export.cc): the plan's shape read once, its
// label, which layers are transformer blocks, and the three exporters ExportPlan chooses from
// (export_megatron.cc, export_torchtitan.cc, export_deepspeed.cc). Private to frameworks/.
#ifndef PIPECAST_FRAMEWORKS_INTERNAL_EXPORT_SHAPE_H_
#define PIPECAST_FRAMEWORKS_INTERNAL_EXPORT_SHAPE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "formats/plan.h"
#include "frameworks/export.h"

namespace pipecast::internal {

// Which of the model's layers are the embedding and the output layer (ExportRequest).
struct LayerRoles {
  bool has_embedding = false;
  bool has_output = false;
};

LayerRoles RolesOf(const std::vector<std::string>& names);

bool IsTransformerLayer(int layer, int num_layers, const LayerRoles& roles);

// The plan's shape, read once.
struct Shape {
  int t, p, d, v, mbs, m, zero;
  int64_t global_batch;
  bool sp;
  bool looped;         // stage s on rank s % p (Megatron's and torchtitan's loop placement)
  bool v_placement;    // rank r holds stages r and 2p-1-r
  bool bidirectional;  // DualPipe's two paths
  ScheduleKind kind;
  std::string schedule_name;
};

Shape ShapeOf(const PlanFile& plan);

// The plan in one line, for the exports' first comment.
std::string PlanLabel(const PlanFile& plan, const Shape& s);

FrameworkExport ExportMegatron(const PlanFile& plan, const ExportRequest& request);
FrameworkExport ExportTorchtitan(const PlanFile& plan, const ExportRequest& request);
FrameworkExport ExportDeepSpeed(const PlanFile& plan, const ExportRequest& request);

}  // namespace pipecast::internal

#endif  // PIPECAST_FRAMEWORKS_INTERNAL_EXPORT_SHAPE_H_
