// What the simulator benchmarks share: the synthetic model they replay and
// the thread CPU clock they time it with. Header-only, bench/ only.
#ifndef PIPECAST_BENCH_BENCH_UTIL_H_
#define PIPECAST_BENCH_BENCH_UTIL_H_

#include <ctime>
#include <string>
#include <utility>

#include "base/units.h"
#include "sim/model.h"

namespace pipecast::bench {

// `num_layers` identical layers: F 100 us, B 200 us (W 100 us of it, for the
// zero-bubble schedules), 1 MiB of activations and of output each.
inline Model SyntheticModel(int num_layers) {
  Model model;
  model.name = "synthetic";
  model.source.method = "manual";
  for (int i = 0; i < num_layers; ++i) {
    Layer layer;
    layer.name = "layer" + std::to_string(i);
    layer.parameters = 1'000'000;
    LayerProfile profile;
    profile.microbatch_size = 1;
    profile.forward_ns = 100 * kNsPerUs;
    profile.backward_ns = 200 * kNsPerUs;
    profile.backward_weight_ns = 100 * kNsPerUs;
    profile.activation_bytes = 1 * kMiB;
    profile.output_bytes = 1 * kMiB;
    layer.profiles.push_back(profile);
    model.layers.push_back(std::move(layer));
  }
  return model;
}

// CPU time of this thread: on a machine shared with other work, wall time
// per op grows with the load; CPU time per op much less.
inline double ThreadCpuNs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
}

}  // namespace pipecast::bench

#endif  // PIPECAST_BENCH_BENCH_UTIL_H_
