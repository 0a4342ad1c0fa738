// Presenting a SimResult to people: the short summary and a table per rank.
// It names the two bubble forms plainly: the bubble ratio (idle share of the
// pipeline span, mean over ranks) and bubble/ideal (Megatron-LM's bubble /
// ideal time). The `--json` object is formats/result_json.h.
#ifndef PIPECAST_REPORT_REPORT_H_
#define PIPECAST_REPORT_REPORT_H_

#include <string>

#include "sim/cluster.h"
#include "sim/simulator.h"

namespace pipecast {

// The GPUs of rank `rank` of replica 0 with t-way tensor parallelism (the
// placement in sim/simulator.h): "GPU 3" at t = 1, "t=8: GPUs 0-7" above.
std::string RankGpusText(int rank, int tensor_parallel, int context_parallel = 1);

// The data-parallel collectives of the iteration, as the summary's
// iteration line names them: "all-reduce 1.234 ms" (ZeRO 0),
// "reduce-scatter 1.234 ms" (ZeRO 1, after the last op), and at ZeRO 2-3,
// whose gradient reduce-scatters (and at 3 parameter all-gathers) run inside
// the ops, "per-op reduce-scatters 0.123 ms exposed" ("per-op all-gathers
// and reduce-scatters" at 3), with the step's own reduce-scatter after it
// when there is one (issue 28: ZeRO-3 showed "all-reduce 0.000 ms").
std::string DataParallelCommText(const SimResult& result);

// A few lines of summary and a table per rank, for people.
std::string ResultToText(const SimResult& result, const Cluster& cluster);

}  // namespace pipecast

#endif  // PIPECAST_REPORT_REPORT_H_
