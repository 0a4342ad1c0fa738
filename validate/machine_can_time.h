// Whether this machine can time a pipeline now, for the validator's end-to-end
// tests (validator_cli_test.cc): they check time only when it can, and say
// why not otherwise; memory is checked always.
#ifndef PIPECAST_VALIDATE_MACHINE_CAN_TIME_H_
#define PIPECAST_VALIDATE_MACHINE_CAN_TIME_H_

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <thread>

namespace pipecast::validate::testing {

// The share of a core each of two busy threads gets now: CPU time over wall
// time while both spin for kProbe. Timing assertions mean nothing on a
// machine whose other load takes the cores away (measured ops then run
// several times their profiled length, honestly), so the loop checks time
// only when both threads get at least kMinCoreShare, and says so otherwise;
// memory is checked always.
inline constexpr auto kProbe = std::chrono::milliseconds(200);
inline constexpr double kMinCoreShare = 0.8;

inline double CoreShareOfTwoThreads() {
  auto spin = [](double* share) {
    timespec c0{}, c1{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
    const auto start = std::chrono::steady_clock::now();
    volatile uint64_t x = 1;
    while (std::chrono::steady_clock::now() - start < kProbe) x = x * 3 + 1;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
    const double cpu = (c1.tv_sec - c0.tv_sec) + (c1.tv_nsec - c0.tv_nsec) * 1e-9;
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    *share = cpu / wall;
  };
  double a = 0, b = 0;
  std::thread t(spin, &a);
  spin(&b);
  t.join();
  return std::min(a, b);
}

// Whether this machine can time a pipeline now; says why not.
inline bool MachineCanTime() {
#if defined(__SANITIZE_ADDRESS__)
  // Under ASan every allocation and copy costs several times its normal
  // time, which the profile did not see: time is not checked there.
  std::cout << "NOTE: time not checked in a sanitizer build; memory is checked\n";
  return false;
#endif
  const double share = CoreShareOfTwoThreads();
  if (share >= kMinCoreShare) return true;
  std::cout << "NOTE: time not checked: the machine is too busy to time a pipeline (two "
            << "threads get " << static_cast<int>(share * 100) << "% of a core each, need "
            << static_cast<int>(kMinCoreShare * 100) << "%); memory is checked\n";
  return false;
}

}  // namespace pipecast::validate::testing

#endif  // PIPECAST_VALIDATE_MACHINE_CAN_TIME_H_
