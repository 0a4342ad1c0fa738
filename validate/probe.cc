// ProbeAsRank (backend.h): a short ping-pong over the very transport the plan's
// messages take, so the comparison simulates the link the run really had.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <vector>

#include "validate/backend.h"

namespace pipecast::validate {
namespace {

// Round trips per message size; the median is kept (robust to a preempted
// round on a noisy machine).
constexpr int kProbeRounds = 21;
constexpr Bytes kTinyBytes = 8;
// Probe tags sit above every plan tag (plans check theirs stay below).
constexpr int64_t kProbeTagBase = int64_t{1} << 30;
constexpr TimeNs kProbeTimeoutNs = 10'000'000'000;  // 10 s for one message

TimeNs Median(std::vector<TimeNs> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

Result<Link> ProbeAsRank(int rank, Transport* transport, MemoryPool* pool, const Clock* clock,
                         Bytes bytes) {
  std::atomic<bool> never{false};
  const int peer = 1 - rank;
  auto exchange = [&](Bytes size, int64_t tag, std::vector<TimeNs>* rtts) -> Status {
    if (rank == 0) {
      PIPECAST_ASSIGN_OR_RETURN(Allocation buf,
                                pool->Allocate(size, MemoryKind::kComm, "the link probe"));
      const TimeNs t0 = clock->NowNs();
      PIPECAST_RETURN_IF_ERROR(transport->Send(0, 1, tag, std::move(buf)));
      Result<Allocation> back =
          transport->Recv(1, 0, tag, kTinyBytes, pool, kProbeTimeoutNs, never);
      if (!back.ok()) return back.status().WithPrefix("link probe: rank 1 did not answer");
      rtts->push_back(clock->NowNs() - t0);
      return transport->FlushSends(0, kProbeTimeoutNs, never);
    }
    Result<Allocation> got = transport->Recv(0, 1, tag, size, pool, kProbeTimeoutNs, never);
    if (!got.ok()) return got.status().WithPrefix("link probe: rank 0 sent nothing");
    PIPECAST_ASSIGN_OR_RETURN(Allocation reply,
                              pool->Allocate(kTinyBytes, MemoryKind::kComm, "the link probe"));
    PIPECAST_RETURN_IF_ERROR(transport->Send(1, 0, tag, std::move(reply)));
    return transport->FlushSends(1, kProbeTimeoutNs, never);
  };
  (void)peer;
  std::vector<TimeNs> tiny, big;
  for (int i = 0; i < kProbeRounds; ++i) {
    PIPECAST_RETURN_IF_ERROR(exchange(kTinyBytes, kProbeTagBase + 2 * i, &tiny));
  }
  for (int i = 0; i < kProbeRounds; ++i) {
    PIPECAST_RETURN_IF_ERROR(exchange(bytes, kProbeTagBase + 2 * i + 1, &big));
  }
  if (rank != 0) return Link{};
  const TimeNs rtt_tiny = Median(tiny);
  const TimeNs rtt_big = Median(big);
  Link link;
  link.latency_us = NsToUs(rtt_tiny) / 2;
  // rtt_big = 2 latency + bytes / bandwidth (+ the tiny reply's serialisation,
  // negligible); a difference at the clock's resolution means "too fast to see".
  const TimeNs serial = std::max<TimeNs>(rtt_big - rtt_tiny, 1);
  link.bandwidth_gbps = static_cast<double>(bytes) / static_cast<double>(serial);
  return link;
}

}  // namespace pipecast::validate
