// RequestOwner: the ledger owner of one request, under the instance that runs it. It is a
// LazyOwner: opened only if the request allocates through the ledger, so a request that
// allocates nothing costs no change to the owner tree.
//
// It is destroyed once the response has been sent (after the response's tensors are gone), and
// closing it then checks the request held nothing: anything left is filed as a leak naming the
// request. After a request that allocated, it also feeds the instance's live bytes to the
// growth detector, which flags an instance whose memory rises request after request (a request
// that allocates nothing cannot raise it, and is not an observation).
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

  // For an OwnerScope around the request's execution. REQUIRES: not moved while in scope.
  memory::LazyOwner* lazy_owner() { return &owner_; }

 private:
  void Finish();

  MemoryContext memory_;
  bool open_ = false;
  memory::OwnerId instance_ = memory::kNoOwner;
  memory::LazyOwner owner_;
};

}  // namespace vramd::runtime
