// The server's side of the backend ABI's request-list interface (include/vramd/backend.h):
// the VramdResponder and VramdResponse handles and the VramdServerApi entry points over them
// (response_create, response_add_output, response_set_parameters, response_delete, respond,
// is_cancelled), plus copy.
//
// A VramdResponder wraps one request's runtime Responder (backends/backend.h) and is shared by
// two holders: the execute_requests call that made it, and the backend until its final respond.
// Whichever lets go last frees it, so a backend may answer from another thread while the call
// is still returning, or long after.
//
// Thread safety: every entry point is safe from any thread; one VramdResponse is one thread's
// at a time (the backend builds it, then hands it to respond).
#pragma once

#include <memory>
#include <vector>

#include "backends/backend.h"
#include "core/status.h"
#include "core/tensor.h"
#include "memory/allocator.h"
#include "vramd/backend.h"

namespace vramd::backends::abi {

// Sets the table's request-list entry points and copy.
void FillResponseTable(VramdServerApi* table);

// A handle for `listed`'s responder, holding the call's reference and the backend's.
VramdResponder* NewResponder(const ListedRequest& listed);

// Lets go of the call's reference once execute_requests returned. With `failed` (the call
// returned an error), a request the backend has not completed is handed back: answered with
// *failed and the backend's reference dropped too, as the ABI says.
void ReleaseAfterExecute(VramdResponder* responder, const Status* failed);

// An output tensor without its bytes, after checking the arguments as the ABI requires (a name,
// a known datatype, a shape without negative dimensions, a fixed-size type's byte size matching
// its shape, a name not already among outputs[first..]). InvalidArgument naming `entry` and the
// output otherwise.
Result<Tensor> NewOutput(const std::vector<Tensor>& outputs, size_t first, const char* entry,
                         const char* name, VramdDataType datatype, const int64_t* shape,
                         size_t rank, size_t byte_size);

// An output tensor of `byte_size` bytes of `device` memory from `allocator`'s pool of it,
// charged to `owner`, checked as NewOutput (a GPU one says its device); freed when its last
// reference goes. The error names `entry` and the output.
Result<Tensor> NewPooledOutput(memory::Allocator& allocator, memory::Device device,
                               memory::OwnerId owner, const std::vector<Tensor>& outputs,
                               size_t first, const char* entry, const char* name,
                               VramdDataType datatype, const int64_t* shape, size_t rank,
                               size_t byte_size);

// Appends a host tensor of `byte_size` bytes to `outputs`, checked as NewOutput; returns where
// the backend writes its bytes. ResourceExhausted when host memory runs out.
Result<void*> AppendHostOutput(std::vector<Tensor>* outputs, size_t first, const char* entry,
                               const char* name, VramdDataType datatype, const int64_t* shape,
                               size_t rank, size_t byte_size);

}  // namespace vramd::backends::abi
