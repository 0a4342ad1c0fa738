// Decoding real CUPTI 13.0 record structs, packed into a buffer as CUPTI
// packs them, walked by the real libcupti (no GPU or driver needed), then
// attributed and aggregated: the whole path after the GPU, checked against
// hand-worked numbers.
#include "profiler/activity_decode.h"

#include <cupti.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <string>
#include <thread>
#include <vector>

#include "profiler/aggregate.h"
#include "profiler/attribution.h"

namespace pipecast {
namespace {

// Packs zeroed, filled CUPTI structs back to back (each 8-byte aligned).
class RecordBuffer {
 public:
  template <typename T>
  T& Add(CUpti_ActivityKind kind) {
    static_assert(sizeof(T) % 8 == 0, "CUPTI records are 8-byte multiples");
    const size_t at = bytes_.size();
    bytes_.resize(at + sizeof(T), 0);
    T* rec = reinterpret_cast<T*>(bytes_.data() + at);
    rec->kind = kind;
    return *rec;
  }
  void Kernel(uint32_t corr, uint64_t start, uint64_t end, uint32_t device = 0,
              uint32_t stream = 7) {
    auto& k = Add<CUpti_ActivityKernel10>(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    k.correlationId = corr;
    k.start = start;
    k.end = end;
    k.deviceId = device;
    k.streamId = stream;
    k.name = Intern("_Z4gemmv");
  }
  void Runtime(uint32_t corr, uint32_t thread, uint64_t start) {
    auto& a = Add<CUpti_ActivityAPI>(CUPTI_ACTIVITY_KIND_RUNTIME);
    a.cbid = CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000;
    a.correlationId = corr;
    a.threadId = thread;
    a.start = start;
    a.end = start + 3;
  }
  void Marker(uint32_t id, uint32_t thread, uint64_t ts, const char* name) {
    auto& m = Add<CUpti_ActivityMarker2>(CUPTI_ACTIVITY_KIND_MARKER);
    m.flags = name != nullptr ? CUPTI_ACTIVITY_FLAG_MARKER_START : CUPTI_ACTIVITY_FLAG_MARKER_END;
    m.timestamp = ts;
    m.id = id;
    m.objectKind = CUPTI_ACTIVITY_OBJECT_THREAD;
    m.objectId.pt.threadId = thread;
    m.name = name != nullptr ? Intern(name) : nullptr;
  }
  void Memory(bool alloc, uint32_t corr, uint64_t ts, uint64_t address, uint64_t bytes) {
    auto& m = Add<CUpti_ActivityMemory4>(CUPTI_ACTIVITY_KIND_MEMORY2);
    m.memoryOperationType = alloc ? CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION
                                  : CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE;
    m.correlationId = corr;
    m.timestamp = ts;
    m.address = address;
    m.bytes = bytes;
  }
  // Copies the records into `buffer` (a collector buffer); returns the size.
  size_t CopyTo(uint8_t* buffer) const {
    std::memcpy(buffer, bytes_.data(), bytes_.size());
    return bytes_.size();
  }
  std::vector<uint8_t>& bytes() { return bytes_; }

 private:
  const char* Intern(const std::string& s) { return strings_.emplace_back(s).c_str(); }
  std::vector<uint8_t> bytes_;
  std::deque<std::string> strings_;
};

// The buffer walk relies on CUPTI's internal buffer layout: only checked
// against the libcupti this was built for.
bool SameCupti() {
  uint32_t version = 0;
  return cuptiGetVersion(&version) == CUPTI_SUCCESS && version == CUPTI_API_VERSION;
}

TEST(ActivityDecodeTest, EachRecordStructDecodesItsFields) {
  RecordBuffer b;
  b.Kernel(5, 1000, 1250, 1, 9);
  b.Runtime(5, 4242, 900);
  b.Marker(3, 4242, 800, "pipecast:L:forward");
  b.Memory(true, 6, 950, 0x7f00, 4096);
  auto& dev = b.Add<CUpti_ActivityDevice5>(CUPTI_ACTIVITY_KIND_DEVICE);
  dev.id = 1;
  dev.coreClockRate = 1980000;
  dev.computeCapabilityMajor = 9;
  b.Add<CUpti_ActivityOverhead3>(CUPTI_ACTIVITY_KIND_OVERHEAD).end = 40;
  b.Add<CUpti_ActivityAPI>(CUPTI_ACTIVITY_KIND_NAME);  // a kind the profiler does not use

  ActivityTrace t;
  std::vector<uint8_t>& bytes = b.bytes();
  for (size_t at = 0; at < bytes.size();) {
    const auto* rec = reinterpret_cast<const CUpti_Activity*>(bytes.data() + at);
    DecodeActivityRecord(rec, &t);
    switch (rec->kind) {
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
        at += sizeof(CUpti_ActivityKernel10);
        break;
      case CUPTI_ACTIVITY_KIND_RUNTIME:
      case CUPTI_ACTIVITY_KIND_NAME:
        at += sizeof(CUpti_ActivityAPI);
        break;
      case CUPTI_ACTIVITY_KIND_MARKER:
        at += sizeof(CUpti_ActivityMarker2);
        break;
      case CUPTI_ACTIVITY_KIND_MEMORY2:
        at += sizeof(CUpti_ActivityMemory4);
        break;
      case CUPTI_ACTIVITY_KIND_DEVICE:
        at += sizeof(CUpti_ActivityDevice5);
        break;
      default:
        at += sizeof(CUpti_ActivityOverhead3);
        break;
    }
  }
  ASSERT_EQ(t.gpu.size(), 1u);
  EXPECT_EQ(t.gpu[0].start_ns, 1000u);
  EXPECT_EQ(t.gpu[0].end_ns, 1250u);
  EXPECT_EQ(t.gpu[0].device_id, 1u);
  EXPECT_EQ(t.gpu[0].stream_id, 9u);
  EXPECT_EQ(t.gpu[0].correlation_id, 5u);
  EXPECT_EQ(t.gpu[0].name, "_Z4gemmv");
  ASSERT_EQ(t.api.size(), 1u);
  EXPECT_EQ(t.api[0].thread_id, 4242u);
  EXPECT_EQ(t.api[0].cbid, static_cast<uint32_t>(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000));
  ASSERT_EQ(t.markers.size(), 1u);
  EXPECT_EQ(t.markers[0].phase, MarkerEvent::Phase::kStart);
  EXPECT_EQ(t.markers[0].thread_id, 4242u);
  EXPECT_EQ(t.markers[0].name, "pipecast:L:forward");
  ASSERT_EQ(t.memory.size(), 1u);
  EXPECT_TRUE(t.memory[0].allocation);
  EXPECT_EQ(t.memory[0].bytes, 4096u);
  ASSERT_EQ(t.devices.size(), 1u);
  EXPECT_EQ(t.devices[0].core_clock_khz, 1980000u);
  EXPECT_EQ(t.overhead_records, 1u);
  EXPECT_EQ(t.overhead_ns, 40u);
  EXPECT_EQ(t.other_records, 1u);
}

TEST(ActivityDecodeTest, ZeroTimestampsAreCountedNotKept) {
  RecordBuffer b;
  b.Kernel(1, 0, 0);
  b.Kernel(2, 10, 20);
  ActivityTrace t;
  DecodeActivityRecord(reinterpret_cast<const CUpti_Activity*>(b.bytes().data()), &t);
  DecodeActivityRecord(
      reinterpret_cast<const CUpti_Activity*>(b.bytes().data() + sizeof(CUpti_ActivityKernel10)),
      &t);
  EXPECT_EQ(t.zero_timestamp_records, 1u);
  ASSERT_EQ(t.gpu.size(), 1u);
  EXPECT_EQ(t.gpu[0].correlation_id, 2u);
}

// One training step as CUPTI would report it: a layer with a nested
// weight-gradient range, kernels on two streams, an allocation kept for the
// backward. Step k's kernels take (k + 1) times as long.
void AddStep(RecordBuffer& b, int k, uint32_t* marker, uint32_t* corr) {
  const uint64_t t0 = 100000 * k, g0 = 10000000 + 100000 * k;
  const uint32_t main = 11, autograd = 12;
  const uint64_t scale = k + 1;
  const uint32_t step = ++*marker, fw = ++*marker, bw = ++*marker, wg = ++*marker;
  b.Marker(step, main, t0, "pipecast:step");
  b.Marker(fw, main, t0 + 10, "pipecast:L:forward:params=1000:out=256");
  b.Runtime(++*corr, main, t0 + 20);
  b.Kernel(*corr, g0, g0 + 100 * scale, 0, 1);  // stream 1
  b.Runtime(++*corr, main, t0 + 30);
  b.Kernel(*corr, g0 + 50 * scale, g0 + 150 * scale, 0, 2);  // stream 2, overlapping 50
  b.Runtime(++*corr, main, t0 + 35);
  b.Memory(true, *corr, t0 + 35, 0x1000 + k, 512);
  b.Marker(fw, main, t0 + 40, nullptr);
  b.Marker(bw, autograd, t0 + 50, "pipecast:L:backward");
  b.Runtime(++*corr, autograd, t0 + 60);
  b.Kernel(*corr, g0 + 200 * scale, g0 + 260 * scale);
  b.Marker(wg, autograd, t0 + 65, "pipecast:L:weight_grad");
  b.Runtime(++*corr, autograd, t0 + 70);
  b.Kernel(*corr, g0 + 260 * scale, g0 + 300 * scale);
  b.Runtime(++*corr, autograd, t0 + 75);
  b.Memory(false, *corr, t0 + 75, 0x1000 + k, 512);
  b.Marker(wg, autograd, t0 + 80, nullptr);
  b.Marker(bw, autograd, t0 + 90, nullptr);
  b.Marker(step, main, t0 + 99, nullptr);
}

TEST(ActivityDecodeTest, BufferThroughLibcuptiToPerLayerMedians) {
  if (!SameCupti()) GTEST_SKIP() << "libcupti is not the version of the headers";
  RecordBuffer b;
  uint32_t marker = 0, corr = 0;
  for (int k = 0; k < 5; ++k) AddStep(b, k, &marker, &corr);
  ActivityCollector collector;
  size_t size = 0;
  uint8_t* buffer = collector.RequestBuffer(&size);
  ASSERT_NE(buffer, nullptr);
  ASSERT_EQ(reinterpret_cast<uintptr_t>(buffer) % 8, 0u);
  ASSERT_LE(b.bytes().size(), size);
  collector.CompleteBuffer(buffer, b.CopyTo(buffer));
  const ActivityTrace t = collector.Take();
  EXPECT_EQ(t.invalid_records, 0u);
  EXPECT_EQ(t.gpu.size(), 20u);
  EXPECT_EQ(t.markers.size(), 40u);

  Result<Attribution> a = Attribute(t);
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(a->stats.attributed, 20u);
  EXPECT_EQ(a->stats.steps, 5);
  AggregateOptions o;
  o.warmup = 1;
  o.iterations = 3;  // steps 1..3: scales 2, 3, 4; median scale 3
  Result<Aggregation> agg = Aggregate({*a}, o);
  ASSERT_TRUE(agg.ok()) << agg.status().message();
  ASSERT_EQ(agg->layers.size(), 1u);
  const LayerAggregate& l = agg->layers[0];
  EXPECT_DOUBLE_EQ(l.forward_ns.median, 150 * 3);  // union of [0,100] and [50,150]
  EXPECT_DOUBLE_EQ(l.forward_ns.min, 150 * 2);
  EXPECT_DOUBLE_EQ(l.forward_ns.max, 150 * 4);
  EXPECT_DOUBLE_EQ(l.backward_ns.median, 100 * 3);  // input 60 + weight 40
  EXPECT_DOUBLE_EQ(l.weight_grad_ns->median, 40 * 3);
  EXPECT_DOUBLE_EQ(l.activation_bytes.median, 512);
  EXPECT_EQ(l.parameters, 1000);
  EXPECT_EQ(l.output_bytes, 256);
  ASSERT_TRUE(agg->step_busy_ns.has_value());
  EXPECT_DOUBLE_EQ(agg->step_busy_ns->median, 250 * 3);
}

TEST(ActivityDecodeTest, CollectorTakesBuffersFromManyThreadsOnce) {
  if (!SameCupti()) GTEST_SKIP() << "libcupti is not the version of the headers";
  constexpr int kThreads = 8, kBuffersPerThread = 4, kKernelsPerBuffer = 50;
  ActivityCollector collector;
  std::vector<std::thread> threads;
  for (int th = 0; th < kThreads; ++th) {
    threads.emplace_back([&collector, th] {
      for (int n = 0; n < kBuffersPerThread; ++n) {
        RecordBuffer b;
        for (int k = 0; k < kKernelsPerBuffer; ++k) {
          const uint32_t corr = (th * kBuffersPerThread + n) * kKernelsPerBuffer + k + 1;
          b.Kernel(corr, 10 * corr, 10 * corr + 5);
        }
        b.Kernel(0, 0, 0);  // one without timestamps per buffer
        size_t size = 0;
        uint8_t* buffer = collector.RequestBuffer(&size);
        collector.CompleteBuffer(buffer, b.CopyTo(buffer));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(collector.OutstandingBuffers(), 0u);
  // A pointer completed twice (the Fuser#5402 bug) is refused, not re-read.
  size_t size = 0;
  uint8_t* buffer = collector.RequestBuffer(&size);
  RecordBuffer one;
  one.Kernel(99999, 1, 2);
  collector.CompleteBuffer(buffer, one.CopyTo(buffer));
  collector.CompleteBuffer(buffer, 0);
  collector.AddDropped(3);
  const ActivityTrace t = collector.Take();
  EXPECT_EQ(t.gpu.size(),
            static_cast<size_t>(kThreads * kBuffersPerThread * kKernelsPerBuffer + 1));
  EXPECT_EQ(t.zero_timestamp_records, static_cast<uint64_t>(kThreads * kBuffersPerThread));
  EXPECT_EQ(t.dropped_records, 3u);
  ASSERT_EQ(t.errors.size(), 1u);
  EXPECT_THAT(t.errors[0], ::testing::HasSubstr("did not hand out"));
  std::vector<uint32_t> ids;
  for (const GpuEvent& e : t.gpu) ids.push_back(e.correlation_id);
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(std::adjacent_find(ids.begin(), ids.end()), ids.end()) << "a record decoded twice";
}

TEST(ActivityDecodeTest, CollectorMergesWhatEachSourceKnowsOfADevice) {
  // The context-created callback knows only the memory figures, CUPTI's
  // DEVICE record the rest; in either order one device results.
  ActivityCollector collector;
  DeviceInfo context;
  context.id = 1;
  context.usable_memory_bytes = 150110011392u;
  context.context_memory_bytes = 536870912u;
  collector.AddDevice(context);
  collector.AddDevice({1, "NVIDIA H200", 9, 0, 1980000, 150000000000, 132});
  collector.AddDevice({0, "NVIDIA H200", 9, 0, 1980000, 150000000000, 132});
  ActivityTrace t = collector.Take();
  ASSERT_EQ(t.devices.size(), 2u);
  EXPECT_EQ(t.devices[0].id, 1u);
  EXPECT_EQ(t.devices[0].name, "NVIDIA H200");
  EXPECT_EQ(t.devices[0].multiprocessors, 132u);
  EXPECT_EQ(t.devices[0].context_memory_bytes, 536870912u);
  EXPECT_EQ(t.devices[1].context_memory_bytes, 0u);
}

TEST(ActivityDecodeTest, CollectorRefusesPastTheBufferLimit) {
  ActivityCollector collector;
  std::vector<uint8_t*> held;
  size_t size = 0;
  for (size_t i = 0; i < 3; ++i) held.push_back(collector.RequestBuffer(&size));
  EXPECT_EQ(collector.OutstandingBuffers(), 3u);
  for (uint8_t* p : held) collector.CompleteBuffer(p, 0);
  EXPECT_EQ(collector.OutstandingBuffers(), 0u);
}

}  // namespace
}  // namespace pipecast
