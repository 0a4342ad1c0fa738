// The plain-C++ part of the cuda backend's transport (validate/cuda/), kept
// apart so that it is tested on machines without a GPU:
//   - which GPU each rank gets (PlaceRanks),
//   - how each directed pair of ranks moves its messages (ChooseRoute):
//     distinct GPUs -> NCCL point-to-point, one GPU -> a device-to-device
//     copy, no NCCL -> staged through host memory,
//   - per directed pair, the sequence of messages its sender issues in one
//     iteration (SendSequences), which is the order the receiver posts its
//     NCCL receives in,
//   - the receive side's reordering buffer (InOrderReceiver): a rank that
//     needs a message posts every earlier message of the pair first, and
//     keeps those until their ops want them,
//   - a check that a stream layout cannot deadlock (SimulatePosting): with
//     one stream per directed pair it never does; with one stream per rank
//     (sends and receives serialised) 1F1B does,
//   - the copy reduce of a bidirectional schedule (dualpipe): its messages
//     per directed pair (CopySendSequences), which travel on channels of
//     their own, and a check that its posting order cannot deadlock when
//     every NCCL call may block its thread until the peer's matching call
//     (SimulateCopyReduce): both ranks sending first does; each rank's send
//     and receive posted in one NCCL group does not.
// Docs: docs/validator.md, "The cuda backend".
#ifndef PIPECAST_VALIDATE_INTERNAL_P2P_ROUTES_H_
#define PIPECAST_VALIDATE_INTERNAL_P2P_ROUTES_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "base/units.h"
#include "validate/exec_plan.h"

namespace pipecast::validate {

enum class P2pRoute {
  kNccl,        // ncclSend/ncclRecv on a 2-rank communicator of the pair
  kDeviceCopy,  // cudaMemcpyAsync device to device (both ranks on one GPU, one process)
  kHostStaged,  // device -> host -> device (distinct GPUs in one process, no NCCL)
};
// "NCCL", "device-to-device copy", "host-staged": the words the report uses.
const char* RouteName(P2pRoute route);

struct RankPlacement {
  int node = 0;     // index of the machine (0 when every rank is in one process)
  int process = 0;  // the process running the rank
  int gpu = 0;      // device ordinal on its machine
};

// Where each rank runs. `node_of_process[p]` is process p's machine (any
// integer naming it, e.g. the index of its hostname); with one process every
// rank is in it. A rank's GPU is its local index on its machine (ranks of
// one process, or processes of one machine, counted in rank order) modulo
// `gpus_per_node`, so with fewer GPUs than ranks the ranks r, r+G, r+2G...
// share GPU r mod G. REQUIRES: processes 1 or `ranks`; gpus_per_node >= 1.
Result<std::vector<RankPlacement>> PlaceRanks(int ranks, int gpus_per_node,
                                              const std::vector<int>& node_of_process);

// Tensor parallelism on the cuda backend: the t workers of each pipeline
// rank (ranks k·t .. k·t + t-1 of `placement`, ExpandTensorParallel's order)
// form one NCCL communicator, which needs each on a GPU of its own (NCCL
// refuses two ranks of one communicator on one GPU). FailedPrecondition
// naming the two workers and the fix otherwise.
Status CheckTensorGroupsOnDistinctGpus(const std::vector<RankPlacement>& placement,
                                       int tensor_parallel);

// How messages from rank `a` to rank `b` travel. FailedPrecondition when no
// route exists (two processes on one GPU; distinct processes without NCCL),
// naming the ranks and what to do.
Result<P2pRoute> ChooseRoute(int a, int b, const RankPlacement& pa, const RankPlacement& pb,
                             bool nccl_available);

// The byte every message with `tag` is filled with by its sender, and that
// its receiver checks (never 0, the value fresh buffers are set to).
inline unsigned char MessagePattern(int64_t tag) {
  return static_cast<unsigned char>(1 + (static_cast<uint64_t>(tag) * 37 + 11) % 255);
}

struct PairMessage {
  int64_t tag = 0;
  Bytes bytes = 0;
  std::string what;  // "the activation of 0F2", for diagnoses
};
using DirectedPair = std::pair<int, int>;  // (sender rank, receiver rank)

// For every directed pair that exchanges messages, the messages in the order
// the sender issues them in one iteration (its action list's order).
std::map<DirectedPair, std::vector<PairMessage>> SendSequences(const ExecPlan& plan);
// The copy reduce's messages (ExecStage::copy_exchanges) per directed pair,
// in the sender's order: each rank sends each partner one message of the
// exchange's bytes, tag CopyReduceTag(sender), per iteration. Empty for a
// plan without a copy reduce. Kept apart from SendSequences: the cuda
// backend carries them on a transport of their own (device_transport.h).
std::map<DirectedPair, std::vector<PairMessage>> CopySendSequences(const ExecPlan& plan);
// The route of every directed pair that exchanges messages in `plan`
// (ChooseRoute on each); the first pair without one fails the whole table.
Result<std::map<DirectedPair, P2pRoute>> RouteTable(const ExecPlan& plan,
                                                    const std::vector<RankPlacement>& placement,
                                                    bool nccl_available);
// The same for the pairs of `sequences` (e.g. CopySendSequences').
Result<std::map<DirectedPair, P2pRoute>> RouteTable(
    const std::map<DirectedPair, std::vector<PairMessage>>& sequences,
    const std::vector<RankPlacement>& placement, bool nccl_available);

// The order rank `dst` consumes the messages from `src` in (its action
// list's order); differs from the send order in e.g. interleaved schedules.
std::vector<PairMessage> ConsumeSequence(const ExecPlan& plan, int src, int dst);

// The receive side of one directed pair. Receives are posted strictly in the
// sender's order (the only order a FIFO channel such as an NCCL
// communicator matches them in); a message wanted before its turn first
// posts every message ahead of it and keeps them (their buffers are held,
// charged to the receiver) until their own ops take them. The sequence
// repeats every iteration. Not thread-safe: one receiving thread per pair.
template <typename Buffer>
class InOrderReceiver {
 public:
  // Posts the receive of `message` and returns its buffer (the buffer may
  // complete later; the caller waits on it).
  using PostFn = std::function<Result<Buffer>(const PairMessage& message)>;

  explicit InOrderReceiver(std::vector<PairMessage> sequence) : seq_(std::move(sequence)) {}

  // The buffer of message `tag`: already posted, or posted now after every
  // message ahead of it. NotFound when the sender never sends `tag`;
  // Internal when its size differs from `bytes`.
  Result<Buffer> Take(int64_t tag, Bytes bytes, const PostFn& post) {
    auto held = posted_.find(tag);
    if (held == posted_.end()) {
      size_t index = seq_.size();
      for (size_t i = 0; i < seq_.size(); ++i) {
        if (seq_[(next_ + i) % seq_.size()].tag == tag) {
          index = i;
          break;
        }
      }
      if (index == seq_.size()) {
        return Status::NotFound("tag " + std::to_string(tag) +
                                " is not among the messages its sender sends");
      }
      for (size_t i = 0; i <= index; ++i) {
        const PairMessage& m = seq_[next_];
        PIPECAST_ASSIGN_OR_RETURN(Buffer b, post(m));
        posted_.emplace(m.tag, std::move(b));
        next_ = (next_ + 1) % seq_.size();
      }
      held = posted_.find(tag);
    }
    for (const PairMessage& m : seq_) {
      if (m.tag == tag && m.bytes != bytes) {
        return Status::Internal("message tag " + std::to_string(tag) + " has " +
                                std::to_string(m.bytes) + " bytes in its sender's sequence, " +
                                std::to_string(bytes) + " wanted");
      }
    }
    Buffer out = std::move(held->second);
    posted_.erase(held);
    return out;
  }

  // Posts the next message of the sequence now, ahead of any Take, and holds
  // it; returns the held buffer (for the caller to finish, e.g. record its
  // completion once an NCCL group has launched it). A later Take of its tag
  // returns it. REQUIRES: no message of that tag is held already.
  Result<Buffer*> PostNext(const PostFn& post) {
    if (seq_.empty()) return Status::NotFound("the sender sends no message");
    const PairMessage& m = seq_[next_];
    PIPECAST_ASSIGN_OR_RETURN(Buffer b, post(m));
    auto [it, inserted] = posted_.emplace(m.tag, std::move(b));
    if (!inserted) {
      return Status::Internal("message tag " + std::to_string(m.tag) + " is posted already");
    }
    next_ = (next_ + 1) % seq_.size();
    return &it->second;
  }

  // Messages posted ahead of their turn and not yet taken.
  size_t buffered() const { return posted_.size(); }
  // Drops what is buffered (after a failed run).
  void Clear() { posted_.clear(); }

 private:
  std::vector<PairMessage> seq_;
  size_t next_ = 0;  // the next message to post, in seq_
  std::map<int64_t, Buffer> posted_;
};

enum class StreamLayout {
  kStreamPerDirectedPair,  // the cuda backend's: each pair's sends and receives apart
  kStreamPerRank,          // every comm op of a rank on one stream (the unsafe one)
};

struct PostingReport {
  bool completes = false;
  std::string stuck;        // when not: what each rank waits for
  size_t max_buffered = 0;  // most messages any receiver held ahead of their op
};

// Plays one iteration of `plan` with blocking point-to-point semantics
// (NCCL's: a send or receive occupies its stream until its peer's matching
// operation, posted in the same order on the pair, is reached; receives
// posted through InOrderReceiver), with compute taking no time; an
// overlapped F&B pair sends its forward's output when the pair ends, after
// its backward's receive, as the runtime runs it. Reports whether every op
// completes, or where it gets stuck.
PostingReport SimulatePosting(const ExecPlan& plan, StreamLayout layout);

// How a rank posts one copy-reduce exchange (ExecStage::copy_exchanges) with
// its partner, on the pair's channels (CopySendSequences).
enum class CopyPosting {
  kSendThenReceive,  // the send, then (once it returns) the receive: two calls
  kGroupedExchange,  // the send and the receive in one NCCL group (the cuda backend's)
};

// Plays one iteration's copy reduce of `plan` (every rank past its last op,
// as SimulatePosting checks they get) under the strictest blocking
// semantics NCCL allows: a call, or a group of calls, holds its thread until
// each of its operations meets its peer's matching one (the same directed
// pair, the same place in the pair's order), as a first use that connects
// the channel may. Each rank takes its exchanges in the order listed (rank
// order). Reports whether every exchange completes, or where each rank is
// stuck. kSendThenReceive deadlocks on any pair of partners (both send
// first); kGroupedExchange completes for exchanges listed in rank order.
PostingReport SimulateCopyReduce(const ExecPlan& plan, CopyPosting posting);

}  // namespace pipecast::validate

#endif  // PIPECAST_VALIDATE_INTERNAL_P2P_ROUTES_H_
