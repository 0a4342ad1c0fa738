// The error catalogue (tests/error_catalogue_test.cc runs it): a row's
// shape and the inputs rows write. The rows themselves are in
// tests/error_catalogue_inputs.cc (bad input) and tests/error_catalogue_runs.cc
// (outputs and runs), in the order the catalogue lists them.
#ifndef PIPECAST_TESTS_ERROR_CATALOGUE_H_
#define PIPECAST_TESTS_ERROR_CATALOGUE_H_

#include <ostream>
#include <string>
#include <vector>

namespace pipecast::cli_test {

enum Tool { kSimulator, kPlanner, kProfiler, kValidator };

// A file the row writes into the test's folder before running.
struct File {
  std::string name;
  std::string text;
};

// After the run, what the folder must look like.
enum class After {
  kAnything,
  kNoOutputs,  // no file but the inputs (and the captured stdout/stderr): nothing half-written
  kInputsUnchanged,  // kNoOutputs, and every input file still holds its text
};

struct Case {
  std::string name;  // test name: letters, digits, underscores
  Tool tool;
  std::vector<File> files;
  std::string args;  // shell text; {dir} and {ex} are replaced
  int exit_code;
  std::string error;  // must appear in stderr
  After after = After::kAnything;
  // A folder to create in the test's folder before the run, read-only (mode
  // 0555) when `read_only`.
  std::string make_dir;
  bool read_only = false;
  std::string output;  // when not empty: must appear in stdout
  // Skipped where a CUDA device exists (the row is about having none).
  bool needs_no_gpu = false;
  std::string absent;  // when not empty: must not appear in stderr
};

// gtest shows a failing row by its name.
// gtest shows a failing row by its name.
void PrintTo(const Case& c, std::ostream* os);

// Inputs

// A valid model.json with `layers` identical layers; `profile` replaces the
// profile object of layer 0 when given.
std::string Model(int layers, const std::string& profile = "",
                  const std::string& parameters = "1000");

// A profile with one field replaced by `value` (raw JSON text), or removed
// when `value` is empty.
std::string Profile(const std::string& field, const std::string& value);

inline constexpr char kCluster[] =
    R"({"format": "pipecast-cluster/1", "name": "c", "gpus_per_node": 8,
  "gpu": {"name": "g", "memory_bytes": 85899345920, "peak_tflops": 989},
  "intra_node": {"bandwidth_gbps": 450, "latency_us": 2},
  "inter_node": {"bandwidth_gbps": 50, "latency_us": 5}})";

// kCluster with `from` replaced by `to`.
std::string ClusterWith(const std::string& from, const std::string& to);

inline const File kGoodModel = {"m.json", Model(8)};

// examples/baselines/gpt-7b-8gpu.plan.json with `from` replaced by `to`.
std::string Baseline(const std::string& from, const std::string& to);
// Simulates with: simulator --model {dir}/m.json --stages 2 --microbatches 2.
inline constexpr char kSim[] = "--model {dir}/m.json --stages 2 --microbatches 2";

// A row with the fields most rows set.
Case Row(std::string name, Tool tool, std::vector<File> files, std::string args, int exit_code,
         std::string error, After after = After::kAnything, std::string make_dir = "",
         bool read_only = false);

// The rows, each group in the catalogue's order.
std::vector<Case> InputRows();
std::vector<Case> RunRows();

}  // namespace pipecast::cli_test

#endif  // PIPECAST_TESTS_ERROR_CATALOGUE_H_
