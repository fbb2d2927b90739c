#include "runtime/infer_router.h"

namespace vramd::runtime {

void InferRouter::InferAsync(std::string_view model, int64_t version,
                             std::shared_ptr<InferRequest> request, InferCallback done) const {
  InferAsync(model, version, std::move(request), NoBuild{}, std::move(done));
}

void InferRouter::Submit(const ModelManager* manager, int64_t version,
                         std::shared_ptr<InferRequest> request,
                         std::shared_ptr<LoadedModel> target, InferCallback done,
                         bool on_callers_thread) {
  if (target != nullptr) {
    request->model_version = target->version();  // not yet seen by anyone else
    std::shared_ptr<const InferRequest> shared = request;
    if (target->TryInferAsync(shared, &done, /*allow_inline=*/on_callers_thread)) return;
    // Retired between its lookup and here. Released before the lookup, which may wait for a
    // resource-preserving reload that waits for this very reference.
    target.reset();
  }
  const std::string& model = request->model_name;
  manager->FindAsync(model, version,
                     [manager, version, request = std::move(request), done = std::move(done)](
                         Result<std::shared_ptr<LoadedModel>> found, bool waited) mutable {
                       if (!found.ok()) return done(found.status());
                       Submit(manager, version, std::move(request), std::move(found).value(),
                              std::move(done), !waited);
                     });
}

}  // namespace vramd::runtime
