// InferRouter: the one asynchronous call through which every front end runs a request on a model
// named by the client (DESIGN.md, decision 7): HTTP, gRPC and a model calling another (BLS). Front ends parse and encode; the policy of finding the version and
// following a reload lives here alone.
//
// InferAsync(model, version, request, build, done):
//   1. finds the version to run it: `version`, or the highest ready one when it is 0;
//   2. has `build` make the request against that version's config (an HTTP raw-binary body can
//      only be parsed against the config's inputs) and stores it in `*request`; the version
//      is not held meanwhile, so a reload never waits for a request's parse;
//   3. submits it to that version;
//   4. when a reload retired that version between 1 and 3 (it refuses the request, or it is
//      gone), finds the
//      version that replaced it and submits the same request there (not built again: the
//      replacement validates it as it validates any request);
//   5. during a resource-preserving reload's gap (nothing serves), parks the request with the
//      manager, not on the caller's thread, until the new version serves or the model's
//      unavailable wait runs out; 1 to 4 then go on on the manager's releasing thread.
//
// Exactly once. `done` is moved along one chain and never copied, so at every moment exactly
// one party holds it, and whoever holds it last answers it:
//   - the lookup fails: the router answers done with its status: NotFound (unknown model or
//     version), Unavailable (no ready version; a gap longer than the model's unavailable wait;
//     the manager shutting down while the request is parked);
//   - build fails: the router answers done with build's status and submits nothing;
//   - the version accepts the request: done passes to it, and it answers exactly once
//     (LoadedModel::InferAsync's contract: the outputs, InvalidArgument from validation,
//     Unavailable from its queue, or the backend's error naming the model and version);
//   - the version refuses it (retired mid-flight): done comes back untouched
//     (LoadedModel::TryInferAsync's contract) and passes to the manager's lookup, which answers
//     exactly once: at once, when the gap ends or its wait runs out, or at shutdown; that
//     answer resumes the chain at the lookup's outcome above. Every refusal follows a completed
//     switch, so the chain ends.
//
// Threads. The fast path (an idle instance runs the request on the submitting thread,
// scheduler.h) is taken on the caller's own thread only, never on the manager's releasing
// thread, which answers every parked request. `done` runs on an instance thread, on the
// caller's thread before InferAsync returns (an error, or the fast path), or, after a gap, on
// the releasing thread (errors only). `build` runs on the caller's thread before InferAsync
// returns, or on the releasing thread after a gap, at most once either way. Neither may block
// for long (on the releasing thread they hold up every parked request) nor call
// ModelManager::Find, which may wait for that very thread.
//
// Why a class beside the manager, not a manager method: the request path (lookup, retry,
// parking) is a reader's concern apart from the lifecycle that model_manager.cc implements, and
// a front end can be handed something that runs requests without being able to load or unload.
// It holds only the manager's pointer and is free to copy. What it starts refers to the manager,
// never to the router, so a request parked in a gap may be answered after the front end that
// sent it and its router are gone; the manager must outlive every request it runs.
//
// Cost: the common case (a ready version, the fast path) adds nothing to what the front end did
// before this call existed: one shared-lock lookup, `build` called directly (a template, not a
// std::function) under a weak reference to the version, one submit. Only parking and resubmitting allocate a callback.
//
// Thread safety: InferAsync may be called from any number of threads, instance threads included.
// The router has no lock of its own; the manager's lookups it calls take the manager's and say
// so (EXCLUDES in model_manager.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "config/model_config.pb.h"
#include "core/infer_request.h"
#include "core/status.h"
#include "runtime/infer_outcome.h"
#include "runtime/loaded_model.h"
#include "runtime/model_manager.h"

namespace vramd::runtime {

class InferRouter {
 public:
  // `manager` must outlive the router and every request it routes.
  explicit InferRouter(const ModelManager* manager) : manager_(manager) {}

  // Runs a request on `model` (version `version`; 0: the highest ready), answering `done`
  // exactly once (see the top of this file). `build` is a copyable callable
  //   Result<InferRequest>(const config::ModelConfig& config)
  // making the request for the version chosen, whose config is `config`; its result is moved
  // into `*request`, which the caller may hold (in `done`, to encode the reply) but neither read
  // nor change until `done` runs. The router sets the request's model_name to `model` and its
  // model_version to the version that runs it.
  template <typename Build>
  void InferAsync(std::string_view model, int64_t version, std::shared_ptr<InferRequest> request,
                  Build build, InferCallback done) const;

  // For a request already made (nothing depends on the version's config): as above, without
  // the build step.
  void InferAsync(std::string_view model, int64_t version, std::shared_ptr<InferRequest> request,
                  InferCallback done) const;

 private:
  // Names `target` in `request` and submits it there; when `target` refuses (retired) or is
  // null (destroyed while the request was built), finds its replacement and submits there. `on_callers_thread`: whether the fast path may run the
  // request here (false on the releasing thread). Static: it outlives the router (parking).
  static void Submit(const ModelManager* manager, int64_t version,
                     std::shared_ptr<InferRequest> request, std::shared_ptr<LoadedModel> target,
                     InferCallback done, bool on_callers_thread);
  // The build step of a request already made.
  struct NoBuild {};
  // Steps 2 and 3 for `found`, the version the lookup chose: builds the request against its
  // config, then submits it there, or to its replacement when a reload retired it meanwhile.
  // The version is not held while the build runs (it may parse a large body), so a reload
  // that retires it waits for no request that is still being parsed.
  template <typename Build>
  static void BuildAndSubmit(const ModelManager* manager, int64_t version, std::string_view model,
                             std::shared_ptr<InferRequest> request,
                             std::shared_ptr<LoadedModel> found, Build& build, InferCallback done,
                             bool on_callers_thread);

  const ModelManager* manager_;
};

template <typename Build>
void InferRouter::BuildAndSubmit(const ModelManager* manager, int64_t version,
                                 std::string_view model, std::shared_ptr<InferRequest> request,
                                 std::shared_ptr<LoadedModel> found, Build& build,
                                 InferCallback done, bool on_callers_thread) {
  if constexpr (!std::is_same_v<Build, NoBuild>) {
    const std::shared_ptr<const config::ModelConfig> config = found->shared_config();
    const std::weak_ptr<LoadedModel> chosen = found;
    found.reset();
    Result<InferRequest> built = build(*config);
    if (!built.ok()) return done(built.status());
    *request = std::move(built).value();
    found = chosen.lock();  // null once retired and destroyed: Submit finds the replacement
  }
  request->model_name = model;
  Submit(manager, version, std::move(request), std::move(found), std::move(done),
         on_callers_thread);
}

template <typename Build>
void InferRouter::InferAsync(std::string_view model, int64_t version,
                             std::shared_ptr<InferRequest> request, Build build,
                             InferCallback done) const {
  if (auto found = manager_->TryFind(model, version)) {  // the common case: no reload gap
    if (!found->ok()) return done(found->status());
    return BuildAndSubmit(manager_, version, model, std::move(request),
                          std::move(*found).value(), build, std::move(done),
                          /*on_callers_thread=*/true);
  }
  // A resource-preserving gap: the manager parks the request (the caller's thread goes on) and
  // answers here once the gap ends, on its releasing thread (waited), or at once if it ended
  // meanwhile.
  const ModelManager* manager = manager_;
  manager_->FindAsync(
      model, version,
      [manager, version, model_name = std::string(model), request = std::move(request),
       build = std::move(build), done = std::move(done)](
          Result<std::shared_ptr<LoadedModel>> found, bool waited) mutable {
        if (!found.ok()) return done(found.status());
        BuildAndSubmit(manager, version, model_name, std::move(request),
                       std::move(found).value(), build, std::move(done), !waited);
      });
}

}  // namespace vramd::runtime
