// Fuzz target: the gRPC routes (server/grpc/grpc_routes.h) over the fixture's repository of
// built-in models (fuzz_support.h), as the gRPC server calls them: the message is what gRPC
// parsed, and the answer comes through a Reply (a StreamSend for ModelStreamInfer), possibly
// later and from an instance or batcher thread. The completion-queue machinery is gRPC's and is
// left out; the codec alone is grpc_infer_codec's.
//
// Input: byte 0: bits 0-2 the RPC (ModelInfer, one request of ModelStreamInfer, ModelMetadata,
// ModelConfig, ModelReady, ModelStatistics, RepositoryIndex, ModelInfer again), bit 3 shared
// memory on (regions "in" and "out" of 256 bytes registered) or off. The rest: the RPC's
// request message in protobuf's wire format.
//
// Checked beyond "no crash", against grpc_routes.h's promises:
//  - every call is answered exactly once, within 60 s (a stream's request: its last response
//    once, and nothing after it);
//  - the status is OK or one of the codes Triton's mapping gives a client's fault, the server's
//    state or a model's failure (INVALID_ARGUMENT, NOT_FOUND, UNAVAILABLE, UNIMPLEMENTED,
//    RESOURCE_EXHAUSTED, INTERNAL: e.g. a requested output the model did not make), and an
//    error has a message;
//  - a ModelInfer answer serializes to a ModelInferResponse with one raw entry per output; a
//    stream's response is an error message or a ModelInferResponse, never both.
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "grpc_fuzz_support.h"
#include "server/grpc/grpc_routes.h"
#include "server/grpc/infer_proto_codec.h"

namespace {
using vramd::fuzz::Fail;

constexpr auto kAnswerTimeout = std::chrono::seconds(60);

bool verbose() {
  static const bool on = std::getenv("VRAMD_FUZZ_VERBOSE") != nullptr;
  return on;
}

// The status an answer may carry: OK, or what a client's mistake or the server's state is.
void CheckStatus(const grpc::Status& status, const char* rpc) {
  if (verbose()) {
    std::fprintf(stderr, "%s -> %d %.300s\n", rpc, static_cast<int>(status.error_code()),
                 status.error_message().c_str());
  }
  switch (status.error_code()) {
    case grpc::StatusCode::OK: return;
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::NOT_FOUND:
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::UNIMPLEMENTED:
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
    case grpc::StatusCode::INTERNAL:
      if (status.error_message().empty()) Fail(std::string(rpc) + ": an error without a message");
      return;
    default:
      Fail(std::string(rpc) + " answered code " + std::to_string(status.error_code()) + ": " +
           status.error_message());
  }
}

// The fixture's manager, and routes over it with shared memory on and off. Load and unload are
// left to repository_api: the routes get the manager as const, which refuses them.
class Fixture {
 public:
  Fixture() : models_(vramd::runtime::ModelControlMode::kExplicit) {
    const vramd::runtime::ModelManager* manager = &models_.manager();
    with_shm_ = std::make_unique<vramd::grpc_server::GrpcRoutes>(
        manager, vramd::grpc_server::GrpcRoutes::ServerInfo{}, regions_.get());
    without_shm_ = std::make_unique<vramd::grpc_server::GrpcRoutes>(
        manager, vramd::grpc_server::GrpcRoutes::ServerInfo{}, nullptr);
  }

  const vramd::grpc_server::GrpcRoutes& routes(bool shm) const {
    return shm ? *with_shm_ : *without_shm_;
  }

 private:
  vramd::fuzz::RoutesFixture models_;
  vramd::fuzz::ClientRegions regions_{"grpc-routes-fuzz"};
  std::unique_ptr<vramd::grpc_server::GrpcRoutes> with_shm_;
  std::unique_ptr<vramd::grpc_server::GrpcRoutes> without_shm_;
};

// One answer of a unary RPC, waited for: it must come once.
template <typename Response>
class Answer {
 public:
  vramd::grpc_server::Reply<Response> reply() {
    return [state = state_](grpc::Status status, Response response) {
      std::lock_guard lock(state->mu);
      if (++state->calls > 1) Fail("a call was answered twice");
      state->status = std::move(status);
      state->response = std::move(response);
      state->cv.notify_all();
    };
  }
  // Waits for the answer; Fail when none comes in time.
  std::pair<grpc::Status, Response> Wait(const char* rpc) {
    std::unique_lock lock(state_->mu);
    if (!state_->cv.wait_for(lock, kAnswerTimeout, [&] { return state_->calls > 0; })) {
      Fail(std::string("no answer to ") + rpc + " within 60 s");
    }
    return {state_->status, std::move(*state_->response)};
  }

 private:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    int calls = 0;
    grpc::Status status;
    std::optional<Response> response;
  };
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

template <typename Request, typename Response, typename Handler>
void Unary(const Fixture& fixture, bool shm, const uint8_t* data, size_t size, Handler handler,
           const char* rpc) {
  auto request = std::make_shared<Request>();
  if (!request->ParseFromArray(data, static_cast<int>(size))) return;
  Answer<Response> answer;
  (fixture.routes(shm).*handler)(request, answer.reply());
  CheckStatus(answer.Wait(rpc).first, rpc);
}

// A call with no trace context, no cancel flag and no forwarded metadata.
vramd::grpc_server::GrpcRoutes::CallContext NewCall() {
  vramd::grpc_server::GrpcRoutes::CallContext call;
  call.received = std::chrono::steady_clock::now();
  return call;
}

void ModelInfer(const Fixture& fixture, bool shm, const uint8_t* data, size_t size) {
  auto request = std::make_shared<inference::ModelInferRequest>();
  if (!request->ParseFromArray(data, static_cast<int>(size))) return;
  Answer<vramd::grpc_server::EncodedInferResponse> answer;
  fixture.routes(shm).ModelInfer(request, NewCall(), answer.reply());
  auto [status, encoded] = answer.Wait("ModelInfer");
  CheckStatus(status, "ModelInfer");
  if (!status.ok()) return;
  const size_t outputs = static_cast<size_t>(encoded.message.outputs_size());
  if (encoded.raw.size() != outputs) Fail("a ModelInfer answer's raw entries are not its outputs");
  const inference::ModelInferResponse back =
      vramd::fuzz::ReadBack(vramd::grpc_server::SerializeInferResponse(std::move(encoded)));
  if (back.raw_output_contents_size() != back.outputs_size() ||
      static_cast<size_t>(back.outputs_size()) != outputs) {
    Fail("a ModelInfer answer does not parse back with one raw entry per output");
  }
}

void StreamInfer(const Fixture& fixture, bool shm, const uint8_t* data, size_t size) {
  auto request = std::make_shared<inference::ModelInferRequest>();
  if (!request->ParseFromArray(data, static_cast<int>(size))) return;
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    bool last = false;
  };
  auto state = std::make_shared<State>();
  fixture.routes(shm).StreamInfer(
      request, NewCall(),
      [state](std::optional<inference::ModelStreamInferResponse> response, bool last) {
        std::lock_guard lock(state->mu);
        if (state->last) Fail("a stream's request was sent to after its last response");
        if (response.has_value()) {
          if (verbose()) std::fprintf(stderr, "stream response: %.300s\n", response->error_message().c_str());
          if (!response->error_message().empty() && response->has_infer_response()) {
            Fail("a stream response with an error and an answer");
          }
        }
        state->last = last;
        state->cv.notify_all();
      });
  std::unique_lock lock(state->mu);
  if (!state->cv.wait_for(lock, kAnswerTimeout, [&] { return state->last; })) {
    Fail("a stream's request had no last response within 60 s");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static Fixture* fixture = [] {  // loaded once: the models stay for the process
    vramd::fuzz::SilenceProtobuf();
    return new Fixture();
  }();
  const bool shm = (data[0] & 8) != 0;
  const uint8_t* message = data + 1;
  const size_t n = size - 1;
  using vramd::grpc_server::GrpcRoutes;
  using namespace inference;  // NOLINT: the message names, as the service spells them
  switch (data[0] & 7) {
    case 1: StreamInfer(*fixture, shm, message, n); break;
    case 2:
      Unary<ModelMetadataRequest, ModelMetadataResponse>(*fixture, shm, message, n,
                                                         &GrpcRoutes::ModelMetadata, "ModelMetadata");
      break;
    case 3:
      Unary<ModelConfigRequest, ModelConfigResponse>(*fixture, shm, message, n,
                                                     &GrpcRoutes::ModelConfig, "ModelConfig");
      break;
    case 4:
      Unary<ModelReadyRequest, ModelReadyResponse>(*fixture, shm, message, n,
                                                   &GrpcRoutes::ModelReady, "ModelReady");
      break;
    case 5:
      Unary<ModelStatisticsRequest, ModelStatisticsResponse>(
          *fixture, shm, message, n, &GrpcRoutes::ModelStatistics, "ModelStatistics");
      break;
    case 6:
      Unary<RepositoryIndexRequest, RepositoryIndexResponse>(
          *fixture, shm, message, n, &GrpcRoutes::RepositoryIndex, "RepositoryIndex");
      break;
    default: ModelInfer(*fixture, shm, message, n); break;
  }
  return 0;
}
