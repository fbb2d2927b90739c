// The remote-backend message layer: WireWriter/WireReader round trips and refusals, and Channel
// frames over a socketpair (inline and memfd payloads), with every malformed frame refused
// without a crash and without leaking a descriptor.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "backends/remote/channel.h"
#include "backends/remote/messages.h"
#include "backends/remote/wire.h"

#include "memory/cuda_devices.h"

namespace vramd::backends::remote {
namespace {
using ::testing::HasSubstr;

size_t OpenFds() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

std::string EncodedRequest() {
  const int32_t data[3] = {1, 2, 3};
  const int64_t shape[1] = {3};
  VramdTensor input{"INPUT0", VRAMD_TYPE_INT32, shape, 1, data, sizeof data};
  const char* outputs[1] = {"OUTPUT0"};
  VramdRequest q{};
  q.struct_size = sizeof q;
  q.id = "r1";
  q.inputs = &input;
  q.input_count = 1;
  q.parameters_json = "{\"a\":1}";
  q.parameters_json_size = 7;
  q.requested_outputs = outputs;
  q.requested_output_count = 1;
  q.flags = 3;
  q.correlation_id = 42;
  q.correlation_id_string = "seq";
  q.timeout_us = 5;
  q.owner = 9;
  q.preferred_output_memory = VramdMemory{VRAMD_DEVICE_GPU, -1};
  WireWriter w;
  EXPECT_TRUE(EncodeRequest(w, q, 77).ok());
  return w.buffer();
}

TEST(WireTest, RequestRoundTrips) {
  const std::string bytes = EncodedRequest();
  WireReader r(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size(), "Execute");
  WireRequest q;
  DecodeRequest(r, &q);
  ASSERT_TRUE(r.Finish().ok()) << r.status().ToString();
  ASSERT_TRUE(q.Bind().ok());
  EXPECT_STREQ(q.request.id, "r1");
  EXPECT_EQ(q.request.preferred_output_memory.kind, VRAMD_DEVICE_GPU);
  EXPECT_EQ(q.request.preferred_output_memory.device_id, -1);
  EXPECT_EQ(q.request.input_memory[0].kind, VRAMD_DEVICE_CPU);
  EXPECT_EQ(q.responder, 77u);
  EXPECT_EQ(q.request.flags, 3u);
  EXPECT_EQ(q.request.correlation_id, 42u);
  EXPECT_STREQ(q.request.correlation_id_string, "seq");
  EXPECT_EQ(q.request.timeout_us, 5u);
  EXPECT_EQ(q.request.owner, 9u);
  EXPECT_EQ(std::string(q.request.parameters_json, q.request.parameters_json_size), "{\"a\":1}");
  ASSERT_EQ(q.request.requested_output_count, 1u);
  EXPECT_STREQ(q.request.requested_outputs[0], "OUTPUT0");
  ASSERT_EQ(q.request.input_count, 1u);
  const VramdTensor& t = q.request.inputs[0];
  EXPECT_STREQ(t.name, "INPUT0");
  EXPECT_EQ(t.datatype, VRAMD_TYPE_INT32);
  ASSERT_EQ(t.rank, 1u);
  EXPECT_EQ(t.shape[0], 3);
  ASSERT_EQ(t.byte_size, 12u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % kTensorAlignment,
            reinterpret_cast<uintptr_t>(bytes.data()) % kTensorAlignment);
  int32_t got[3];
  std::memcpy(got, t.data, sizeof got);
  EXPECT_EQ(got[2], 3);
}

// A GPU tensor crosses by reference: its device, size, CUDA IPC export and DeviceAllocate id
// come back as sent, and no bytes are in the frame.
TEST(WireTest, AGpuTensorCrossesByReference) {
  const int64_t shape[2] = {2, 4};
  memory::IpcExport ipc;
  for (size_t i = 0; i < ipc.handle.size(); ++i) ipc.handle[i] = static_cast<std::byte>(i * 3);
  ipc.offset = 4096;
  WireWriter w;
  w.U32(1);
  EncodeGpuTensor(w, "Y", VRAMD_TYPE_FP32, shape, 2, 32, 1, ipc, 7);
  const std::string bytes = w.buffer();
  WireReader r(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size(), "Respond");
  std::vector<WireTensor> tensors = DecodeTensors(r);
  ASSERT_TRUE(r.Finish().ok()) << r.status().ToString();
  ASSERT_EQ(tensors.size(), 1u);
  const WireTensor& t = tensors[0];
  EXPECT_EQ(t.name, "Y");
  EXPECT_EQ(t.shape, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(t.gpu, 1);
  EXPECT_EQ(t.byte_size, 32u);
  EXPECT_EQ(t.data, nullptr);
  EXPECT_EQ(t.ipc.handle, ipc.handle);
  EXPECT_EQ(t.ipc.offset, 4096u);
  EXPECT_EQ(t.device_allocation, 7u);
  EXPECT_LT(bytes.size(), 32u + 100u) << "no tensor bytes in the frame";

  // An unknown place, or a negative device, is refused naming the field.
  WireWriter unknown;
  unknown.U32(1);
  unknown.Str("Y");
  unknown.U32(VRAMD_TYPE_FP32);
  unknown.U32(0);
  unknown.U8(5);
  unknown.U64(0);  // what a tensor takes at least (DecodeTensors' count check)
  unknown.U64(0);
  const std::string bad = unknown.buffer();
  WireReader r2(reinterpret_cast<const std::byte*>(bad.data()), bad.size(), "Respond");
  DecodeTensors(r2);
  EXPECT_THAT(r2.Finish().message(), HasSubstr("tensor place"));
  WireWriter negative;
  negative.U32(1);
  EncodeGpuTensor(negative, "Y", VRAMD_TYPE_FP32, shape, 2, 32, -3, ipc, 7);
  const std::string neg = negative.buffer();
  WireReader r3(reinterpret_cast<const std::byte*>(neg.data()), neg.size(), "Respond");
  DecodeTensors(r3);
  EXPECT_THAT(r3.Finish().message(), HasSubstr("tensor gpu"));
}

// A request's GPU input is exported for the host; without a GPU that fails naming the input,
// and nothing reads its pointer as host memory.
TEST(WireTest, AGpuInputNeedsItsDeviceToBeExported) {
  if (memory::CudaDeviceCount() > 0) GTEST_SKIP() << "checks the refusal without a GPU";
  const float data[2] = {1, 2};
  const int64_t shape[1] = {2};
  VramdTensor input{"X", VRAMD_TYPE_FP32, shape, 1, data, sizeof data};
  VramdMemory on_gpu{VRAMD_DEVICE_GPU, 0};
  VramdRequest q{};
  q.struct_size = sizeof q;
  q.id = "g";
  q.inputs = &input;
  q.input_memory = &on_gpu;
  q.input_count = 1;
  WireWriter w;
  Status encoded = EncodeRequest(w, q, 1);
  ASSERT_FALSE(encoded.ok());
  EXPECT_THAT(encoded.message(), HasSubstr("input 'X' on GPU 0"));
}

// A hosted model's call into another model: a host input crosses in the frame, a GPU one by
// reference (an offset into vramd's DeviceAllocate memory, or the host's own export), and
// whether the host keeps its inputs until the final result comes along.
TEST(WireTest, ACallsGpuInputsCrossByReference) {
  const int32_t host_data[2] = {5, 6};
  const int64_t shape[1] = {2};
  int32_t gpu_stand_in[2] = {0, 0};  // never read: a GPU input's bytes stay where they are
  VramdTensor inputs[3] = {{"H", VRAMD_TYPE_INT32, shape, 1, host_data, sizeof host_data},
                           {"D", VRAMD_TYPE_INT32, shape, 1, gpu_stand_in, 8},
                           {"E", VRAMD_TYPE_INT32, shape, 1, gpu_stand_in, 8}};
  CallInputPlace places[3];
  places[1].gpu = 0;
  places[1].device_allocation = 11;
  places[1].ipc.offset = 256;
  places[2].gpu = 1;
  places[2].ipc.handle[0] = std::byte{9};
  places[2].ipc.offset = 64;
  VramdInferCall c{};
  c.struct_size = sizeof c;
  c.model = "callee";
  c.inputs = inputs;
  c.input_count = 3;
  c.preferred_output_memory = VramdMemory{VRAMD_DEVICE_GPU, -1};
  c.inputs_outlive_call = 1;
  WireWriter w;
  EncodeInferCall(w, 3, c, places);
  const std::string bytes = w.buffer();
  WireReader r(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size(), "InferAsync");
  WireInferCall got = DecodeInferCall(r);
  ASSERT_TRUE(r.Finish().ok()) << r.status().ToString();
  EXPECT_EQ(got.context, 3u);
  EXPECT_EQ(got.model, "callee");
  EXPECT_TRUE(got.inputs_outlive_call);
  EXPECT_EQ(got.preferred_kind, VRAMD_DEVICE_GPU);
  EXPECT_EQ(got.preferred_device, -1);
  ASSERT_EQ(got.inputs.size(), 3u);
  EXPECT_EQ(got.inputs[0].gpu, -1);
  ASSERT_EQ(got.inputs[0].byte_size, 8u);
  EXPECT_EQ(std::memcmp(got.inputs[0].data, host_data, 8), 0);
  EXPECT_EQ(got.inputs[1].gpu, 0);
  EXPECT_EQ(got.inputs[1].device_allocation, 11u);
  EXPECT_EQ(got.inputs[1].ipc.offset, 256u);
  EXPECT_EQ(got.inputs[1].data, nullptr);
  EXPECT_EQ(got.inputs[2].gpu, 1);
  EXPECT_EQ(got.inputs[2].device_allocation, 0u);
  EXPECT_EQ(got.inputs[2].ipc.handle, places[2].ipc.handle);
  EXPECT_EQ(got.inputs[2].ipc.offset, 64u);

  // A library built before inputs_outlive_call (a shorter struct) reads as "not kept".
  VramdInferCall old = c;
  old.struct_size = offsetof(VramdInferCall, inputs_outlive_call);
  WireWriter w2;
  EncodeInferCall(w2, 4, old);
  const std::string b2 = w2.buffer();
  WireReader r2(reinterpret_cast<const std::byte*>(b2.data()), b2.size(), "InferAsync");
  WireInferCall got2 = DecodeInferCall(r2);
  ASSERT_TRUE(r2.Finish().ok()) << r2.status().ToString();
  EXPECT_FALSE(got2.inputs_outlive_call);
  ASSERT_EQ(got2.inputs.size(), 3u);
  EXPECT_EQ(got2.inputs[1].gpu, -1) << "no places: every input in the frame";
}

TEST(WireTest, EveryTruncationIsRefusedNamingAField) {
  const std::string bytes = EncodedRequest();
  for (size_t n = 0; n < bytes.size(); ++n) {
    WireReader r(reinterpret_cast<const std::byte*>(bytes.data()), n, "Execute");
    WireRequest q;
    DecodeRequest(r, &q);
    const Status s = r.Finish();
    ASSERT_FALSE(s.ok()) << "a request cut at " << n << " bytes was accepted";
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("malformed Execute message"));
  }
  // Trailing bytes are refused too.
  std::string longer = bytes + "x";
  WireReader r(reinterpret_cast<const std::byte*>(longer.data()), longer.size(), "Execute");
  WireRequest q;
  DecodeRequest(r, &q);
  EXPECT_THAT(r.Finish().message(), HasSubstr("left over"));
}

TEST(WireTest, HostileCountsAndValuesAreRefusedWithoutAllocating) {
  WireWriter w;
  w.U32(0xFFFFFFFFu);  // a tensor count no payload can hold
  WireReader r(reinterpret_cast<const std::byte*>(w.buffer().data()), w.size(), "Respond");
  EXPECT_TRUE(DecodeTensors(r).empty());
  EXPECT_THAT(r.status().message(), HasSubstr("more than the 0 bytes left"));

  WireWriter t;  // one tensor of datatype 99, written by hand (no VramdDataType holds 99)
  t.U32(1);
  t.Str("x");
  t.U32(99);
  t.U32(0);
  t.AlignedBytes(nullptr, 0);
  WireReader rt(reinterpret_cast<const std::byte*>(t.buffer().data()), t.size(), "Respond");
  DecodeTensors(rt);
  EXPECT_THAT(rt.status().message(), HasSubstr("not a known datatype"));

  WireWriter s;
  s.U32(1000);  // a string longer than what follows
  s.Str("ab");
  WireReader rs(reinterpret_cast<const std::byte*>(s.buffer().data()), s.size(), "Log");
  rs.Str("message");
  EXPECT_THAT(rs.status().message(), HasSubstr("says 1000 bytes"));
}

class ChannelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fds_before_ = OpenFds();
    auto pair = Channel::SocketPair();
    ASSERT_TRUE(pair.ok());
    a_ = std::make_unique<Channel>(std::move(pair->first));
    raw_b_ = pair->second.get();
    b_ = std::make_unique<Channel>(std::move(pair->second));
  }
  void TearDown() override {
    a_.reset();
    b_.reset();
    EXPECT_EQ(OpenFds(), fds_before_) << "a descriptor leaked";
  }
  // Sends raw bytes (and optionally a descriptor) from b's end, as a hostile peer would.
  void SendRaw(const std::string& bytes, int fd = -1) {
    msghdr msg{};
    iovec iov{const_cast<char*>(bytes.data()), bytes.size()};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
    if (fd >= 0) {
      msg.msg_control = control;
      msg.msg_controllen = sizeof control;
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int));
      std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
    }
    ASSERT_GE(::sendmsg(raw_b_, &msg, 0), 0);
  }
  static std::string Header(uint32_t type, uint32_t flags = 0, uint32_t magic = 0x444d5256) {
    std::string h(24, '\0');
    uint64_t id = 5;
    std::memcpy(h.data(), &magic, 4);
    std::memcpy(h.data() + 4, &type, 4);
    std::memcpy(h.data() + 8, &id, 8);
    std::memcpy(h.data() + 16, &flags, 4);
    return h;
  }
  Status ReceiveError() {
    auto got = a_->Receive();
    if (got.ok()) return Status::Ok();
    return got.status();
  }

  size_t fds_before_ = 0;
  std::unique_ptr<Channel> a_, b_;
  int raw_b_ = -1;
};

TEST_F(ChannelTest, SmallAndLargePayloadsArriveWhole) {
  const std::string small = "hello";
  std::string large(3 * kMaxInlinePayload + 17, '\0');
  for (size_t i = 0; i < large.size(); ++i) large[i] = static_cast<char>(i * 31);
  ASSERT_TRUE(b_->Send(MessageType::kLog, 1, small).ok());
  ASSERT_TRUE(b_->Send(MessageType::kRespond, 2, large).ok());
  auto first = a_->Receive();
  ASSERT_TRUE(first.ok() && first->has_value()) << first.status().ToString();
  EXPECT_EQ((*first)->type, MessageType::kLog);
  EXPECT_EQ((*first)->id, 1u);
  EXPECT_FALSE((*first)->external());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>((*first)->data()), (*first)->size()), small);
  auto second = a_->Receive();
  ASSERT_TRUE(second.ok() && second->has_value()) << second.status().ToString();
  EXPECT_TRUE((*second)->external());
  ASSERT_EQ((*second)->size(), large.size());
  EXPECT_EQ(std::memcmp((*second)->data(), large.data(), large.size()), 0);
  // End of stream once the other end is gone.
  b_.reset();
  auto end = a_->Receive();
  ASSERT_TRUE(end.ok());
  EXPECT_FALSE(end->has_value());
}

TEST_F(ChannelTest, SegmentsLeaveNothingInDevShm) {
  auto before = std::distance(std::filesystem::directory_iterator("/dev/shm"), {});
  std::string large(kMaxInlinePayload * 4, 'x');
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(b_->Send(MessageType::kRespond, i, large).ok());
    auto got = a_->Receive();
    ASSERT_TRUE(got.ok() && got->has_value());
  }
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator("/dev/shm"), {}), before);
}

TEST_F(ChannelTest, MalformedFramesAreRefused) {
  SendRaw("short");
  EXPECT_THAT(ReceiveError().message(), HasSubstr("shorter than its header"));
  SendRaw(Header(1, 0, 0x12345678));
  EXPECT_THAT(ReceiveError().message(), HasSubstr("magic"));
  SendRaw(Header(999));
  EXPECT_THAT(ReceiveError().message(), HasSubstr("unknown type 999"));
  SendRaw(Header(1, 4));
  EXPECT_THAT(ReceiveError().message(), HasSubstr("unknown flags"));
  SendRaw(Header(1) + std::string(kMaxInlinePayload + 1, 'x'));
  EXPECT_THAT(ReceiveError().message(), HasSubstr("larger than"));

  // An inline frame with a descriptor: refused, and the descriptor is closed.
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  SendRaw(Header(1), pipe_fds[0]);
  EXPECT_THAT(ReceiveError().message(), HasSubstr("came with descriptors"));

  // External frames: a pipe is not a sealed memfd; an unsealed memfd neither; a sealed one too
  // small for what the frame says.
  uint64_t size = kMaxInlinePayload + 100;
  std::string external = Header(1, 1) + std::string(reinterpret_cast<const char*>(&size), 8);
  SendRaw(external, pipe_fds[0]);
  EXPECT_THAT(ReceiveError().message(), HasSubstr("sealed"));
  int unsealed = ::memfd_create("t", MFD_CLOEXEC);
  ASSERT_EQ(::ftruncate(unsealed, size), 0);
  SendRaw(external, unsealed);
  EXPECT_THAT(ReceiveError().message(), HasSubstr("sealed"));
  int sealed = ::memfd_create("t", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ASSERT_EQ(::ftruncate(sealed, 10), 0);
  ASSERT_EQ(::fcntl(sealed, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE), 0);
  SendRaw(external, sealed);
  EXPECT_THAT(ReceiveError().message(), HasSubstr("has 10"));
  SendRaw(Header(1, 1), sealed);
  EXPECT_THAT(ReceiveError().message(), HasSubstr("8-byte size"));
  uint64_t tiny = 3;
  SendRaw(Header(1, 1) + std::string(reinterpret_cast<const char*>(&tiny), 8), sealed);
  EXPECT_THAT(ReceiveError().message(), HasSubstr("says 3 bytes"));
  ::close(unsealed);
  ::close(sealed);
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);

  // The channel still works after all that.
  ASSERT_TRUE(b_->Send(MessageType::kLog, 9, "ok").ok());
  auto fine = a_->Receive();
  ASSERT_TRUE(fine.ok() && fine->has_value());
  EXPECT_EQ((*fine)->id, 9u);
}

}  // namespace
}  // namespace vramd::backends::remote
