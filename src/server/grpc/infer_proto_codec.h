// ModelInferRequest <-> InferRequest and InferResponse -> ModelInferResponse: the gRPC form of
// what server/http/infer_codec.h does for HTTP, with the same checks and error texts where the
// protocols overlap.
//
// Request:
//   - model_version: "" (the version the model's policy serves) or a positive integer.
//   - Each input's bytes come from raw_input_contents (then one entry per input, in order, and
//     no input with `contents`) or from its typed `contents` (the field of its datatype:
//     INT8/16/32 in int_contents, UINT8/16/32 in uint_contents, each value in the type's
//     range; FP16 and BF16 only raw). The element count must equal the shape's; a raw
//     tensor's size must equal shape x element size (BYTES: well-formed length-prefixed
//     elements, as many as the shape says).
//   - Raw bytes are not copied: input tensors view the request message, which they keep.
//   - Request parameters as the HTTP front end reads them: timeout (microseconds), priority
//     (checked, dropped), sequence_id (integer or string), sequence_start, sequence_end; keys
//     starting with "triton_" are refused; every other key reaches the model.
//   - An output's "classification" parameter (a positive integer) asks for the top classes.
//   - An input or output with shared_memory_region and shared_memory_byte_size (and optionally
//     shared_memory_offset) is in that registered system shared-memory region: an input is
//     read there in place (the tensor holds the mapping; it has no raw entry, so
//     raw_input_contents holds the other inputs' in order); an output is written there at the
//     end, its response entry saying where with an empty raw entry. With `shm` null (turned
//     off) such parameters are Unsupported, naming the tensor.
// Response: every output's bytes in raw_output_contents, in the order of `outputs` (as Triton
// answers), with the response's parameters. For ModelInfer the bytes are not copied into the
// message: EncodedInferResponse keeps them as buffers, and SerializeInferResponse hands gRPC
// the large ones as they are (the message is written to the socket from the model's output).
//
// Pure functions: no I/O, safe from any thread.
#pragma once

#include <grpcpp/support/byte_buffer.h>

#include <memory>
#include <vector>

#include "core/infer_request.h"
#include "core/shared_buffer.h"
#include "core/status.h"
#include "server/grpc/grpc_service.pb.h"
#include "server/shared_memory/shared_memory_regions.h"

namespace vramd::grpc_server {

// Every malformed request is an InvalidArgument naming the field or tensor at fault.
// model_name and model_version are the caller's (the lookup's).
Result<InferRequest> DecodeInferRequest(std::shared_ptr<const inference::ModelInferRequest> message,
                                        const shared_memory::SharedMemoryRegions* shm = nullptr);

// "" -> 0; a positive decimal integer -> itself; anything else InvalidArgument.
Result<int64_t> ParseModelVersion(const std::string& text);

// `response` into `out` (cleared first); `request` gives the id to echo; outputs `message`
// asks for in shared memory are written into `shm`'s regions. With `raw` set, the raw output
// entries go there (an empty buffer for an output placed in shared memory) and `out` has no
// raw_output_contents.
Status EncodeInferResponse(const InferResponse& response, const InferRequest& request,
                           inference::ModelInferResponse* out,
                           const inference::ModelInferRequest* message = nullptr,
                           const shared_memory::SharedMemoryRegions* shm = nullptr,
                           std::vector<SharedBuffer>* raw = nullptr);

// A ModelInferResponse with its raw output bytes kept apart: `message` has no
// raw_output_contents, `raw` has each entry's bytes in order, and `keep` holds what they may
// view (the request's outcome: its ledger owner, released last, checks they are gone).
struct EncodedInferResponse {
  std::shared_ptr<const void> keep;
  inference::ModelInferResponse message;
  std::vector<SharedBuffer> raw;
};

// Entries this large or larger are handed to gRPC in place; smaller ones are copied, which
// costs less than a slice of their own.
inline constexpr size_t kRawInPlaceBytes = 16 * 1024;

// One ModelInferResponse on the wire: `response.message`'s fields, then each raw entry as
// raw_output_contents (field 6; a parser reads fields in any order, and these come last as a
// serializer would write them). The large entries are not copied: the buffer views them and
// holds `response.raw` and `keep` until gRPC has sent them.
grpc::ByteBuffer SerializeInferResponse(EncodedInferResponse response);

}  // namespace vramd::grpc_server
