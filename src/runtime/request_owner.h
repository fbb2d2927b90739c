// RequestOwner: the ledger owner of one request, opened under the instance that runs it.
//
// It is destroyed once the response has been sent (after the response's tensors are gone), and
// closing it then checks the request held nothing: anything left is filed as a leak naming the
// request. It also feeds the instance's live bytes to the growth detector, which flags an
// instance whose memory rises request after request.
#pragma once

#include <string>

#include "memory/ledger.h"
#include "runtime/memory_context.h"

namespace vramd::runtime {

class RequestOwner {
 public:
  RequestOwner() = default;
  // `name` labels the owner: the request id, or "#<sequence>" when the request has none.
  RequestOwner(const MemoryContext& memory, memory::OwnerId instance, std::string name);
  ~RequestOwner();
  RequestOwner(RequestOwner&& other) noexcept;
  RequestOwner& operator=(RequestOwner&& other) noexcept;

  memory::OwnerId id() const { return owner_.id(); }

 private:
  void Finish();

  MemoryContext memory_;
  bool open_ = false;
  memory::OwnerId instance_ = memory::kNoOwner;
  memory::ScopedOwner owner_;
};

}  // namespace vramd::runtime
