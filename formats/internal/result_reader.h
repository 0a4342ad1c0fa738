// Reads the simulation result as JSON (ResultJson's object) back into a SimResult: plan.json's
// `predicted`. Private to formats/; the reader and the writer share one key list in
// formats/result_json.cc.
#ifndef PIPECAST_FORMATS_INTERNAL_RESULT_READER_H_
#define PIPECAST_FORMATS_INTERNAL_RESULT_READER_H_

#include <string>

#include "base/status.h"
#include "formats/internal/json_reader.h"
#include "sim/simulator.h"

namespace pipecast::internal {

// Reads `obj` (at `path`, for messages) into *out. The metrics the planner's check compares
// (iteration_time_us, throughput_samples_per_s, bubble_ratio, bubble_fraction_of_ideal, a rank's
// peak_memory_bytes) are required; the other keys keep *out's defaults when absent and must have
// the right type and range when present. `stages` must have one entry per rank (`ranks`).
[[nodiscard]] Status ReadResultJson(const JsonReader& r, const Json& obj, const std::string& path,
                                    int ranks, SimResult* out);

}  // namespace pipecast::internal

#endif  // PIPECAST_FORMATS_INTERNAL_RESULT_READER_H_
