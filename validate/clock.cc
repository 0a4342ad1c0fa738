#include "validate/clock.h"

#include <chrono>

namespace pipecast::validate {

TimeNs SteadyClock::NowNs() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace pipecast::validate
