// The exit codes every pipecast tool returns, in one place so that scripts
// and CI can rely on them whichever tool they run. Constants only.
#ifndef PIPECAST_BASE_EXIT_CODES_H_
#define PIPECAST_BASE_EXIT_CODES_H_

namespace pipecast {

inline constexpr int kExitOk = 0;        // success (a check passed, a plan was found)
inline constexpr int kExitBadInput = 1;  // bad input, or a failure while running
inline constexpr int kExitUsage = 2;     // a flag is wrong (CLI11's parse errors and range checks)
// A check failed: `planner --check` regressed, `validator` measured beyond tolerance.
inline constexpr int kExitCheckFailed = 3;
inline constexpr int kExitNoFeasiblePlan = 4;  // the planner found no configuration that fits

// The line every tool's --help ends with.
inline constexpr char kExitCodesHelp[] =
    "Exit codes: 0 ok; 1 bad input or a failure; 2 usage (a wrong flag); 3 a check failed "
    "(planner --check regressed, validator beyond tolerance); 4 no feasible plan.";

}  // namespace pipecast

#endif  // PIPECAST_BASE_EXIT_CODES_H_
