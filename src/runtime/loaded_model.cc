#include "runtime/loaded_model.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <string>
#include <vector>

#include "memory/byte_size.h"
#include "runtime/batch_assembly.h"
#include "runtime/instance_placement.h"
#include "runtime/request_validator.h"
#include "runtime/sequence_batcher.h"
#include "runtime/tensor_memory.h"

namespace vramd::runtime {

VersionReaper::VersionReaper() : thread_([this](std::stop_token stop) { Run(stop); }) {}

VersionReaper::~VersionReaper() {
  thread_.request_stop();
  thread_.join();  // Run destroys what is left first
}

void VersionReaper::Destroy(std::unique_ptr<LoadedModel> doomed) {
  {
    MutexLock lock(mu_);
    doomed_.push_back(std::move(doomed));
  }
  wake_.notify_one();
}

void VersionReaper::Run(std::stop_token stop) {
  MutexLock lock(mu_);
  for (;;) {
    lock.Wait(wake_, stop, [this]() REQUIRES(mu_) { return !doomed_.empty(); });
    if (doomed_.empty()) return;  // stopped, and nothing is left to destroy
    std::vector<std::unique_ptr<LoadedModel>> batch;
    batch.swap(doomed_);
    lock.Unlock();
    batch.clear();  // a destruction waits for the version's instance threads: not under mu_
    lock.Lock();
  }
}

Result<memory::MemoryQuota> MemoryQuotaOfConfig(const config::ModelConfig& config) {
  const auto& parameters = config.parameters();
  auto it = parameters.find(std::string(kMemoryQuotaParameter));
  if (it == parameters.end()) return memory::MemoryQuota{};
  auto quota = memory::ParseMemoryQuota(it->second.string_value());
  if (!quota.ok()) {
    return quota.status().WithContext(fmt::format("parameter '{}'", kMemoryQuotaParameter));
  }
  return quota;
}

LoadedModel::LoadedModel(std::shared_ptr<const config::ModelConfig> config, int64_t version,
                         const MemoryContext& memory, memory::OwnerId model_owner,
                         Classifier classifier, memory::MemoryQuota quota,
                         SleepSettings sleep_settings)
    : config_(std::move(config)),
      version_(version),
      memory_(memory),
      model_owner_(model_owner),
      sleep_settings_(std::move(sleep_settings)),
      executor_(config_->name(), version, memory, &stats_, TensorReshape::From(*config_),
                std::move(classifier)),
      // Measured even without a quota: it learns its executions' peaks (LearnExecutionPeaks).
      owner_(memory.ledger, model_owner, memory::OwnerKind::kVersion, std::to_string(version),
             quota.empty() ? memory::MeasurePeaks() : std::move(quota)) {}

LoadedModel::~LoadedModel() {
  Shutdown();
  readiness_.reset();  // waits for a readiness round in flight, which uses the instances
  scheduler_.reset();
  // Before backend_model_, whose state they may use. Each end is measured: what an instance's
  // libraries keep after it (a handle pooled for the next thread) becomes its backend's
  // residue (memory/native_memory.h).
  for (Instance& instance : instances_) {
    instance.native.ReleaseAround([&] { instance.backend.reset(); });
  }
  instances_.clear();
  {
    memory::OwnerScope scope(owner_.id());  // the backend frees what it holds as the version
    memory::NativeCharges::ReleaseGroupAround(native_, [&] { backend_model_.reset(); });
  }
  owner_.Close();
}

Result<std::shared_ptr<LoadedModel>> LoadedModel::Load(
    std::shared_ptr<const config::ModelConfig> config, const std::filesystem::path& model_dir,
    int64_t version, const MemoryContext& memory, memory::OwnerId model_owner,
    LoadTiming* timing, backends::ServerServices* services) {
  const std::string where = fmt::format("model '{}' version {}", config->name(), version);
  // On any failure below, destroying `model` releases what was created and closes its owners,
  // so a failed load leaves its owner at zero or files a leak naming it.
  // When outcomes hold their version (HoldVersionInOutcomes), the last reference can drop on
  // one of the version's own instance threads (a callback dropping its outcome), and
  // destroying it there would join that thread from itself: then the reaper's thread destroys
  // it, as Triton's model deleter hands a model to another thread.
  auto classifier = Classifier::Load(*config, model_dir);
  if (!classifier.ok()) return classifier.status().WithContext(where);
  auto quota = MemoryQuotaOfConfig(*config);
  if (!quota.ok()) return quota.status().WithContext(where);
  auto sleep_settings = SleepSettingsOfConfig(*config);
  if (!sleep_settings.ok()) return sleep_settings.status().WithContext(where);
  // A load under memory pressure puts idle models to sleep first (memory/allocator.h).
  memory::Allocator::ReliefScope relief;
  std::shared_ptr<LoadedModel> model(
      new LoadedModel(config, version, memory, model_owner, std::move(classifier).value(),
                      std::move(quota).value(), std::move(sleep_settings).value()),
      [](LoadedModel* released) {
        std::unique_ptr<LoadedModel> doomed(released);
        if (doomed->reaper_ != nullptr && doomed->scheduler_ != nullptr &&
            doomed->scheduler_->OnWorkerThread()) {
          doomed->reaper_->Destroy(std::move(doomed));
        }
      });

  auto backend = backends::FindBackend(*config);  // its errors name the model already
  if (!backend.ok()) return backend.status();
  const PlacementTarget target = PlacementTargetFor(**backend);
  auto plan = PlanInstances(*config, target);
  if (!plan.ok()) return plan.status().WithContext(where);
  // The backend sees its groups as placed (KIND_AUTO resolved, gpus filled), as Triton's
  // backends do; the version keeps the config as written.
  model->backend_config_ =
      std::make_shared<const config::ModelConfig>(ConfigAsPlaced(*config, target));
  // Before the backend sees the model: a GPU's context is made and measured before anything
  // allocates there, and only GPUs that instances use get one.
  if (memory.contexts != nullptr) {
    for (int gpu : GpusOfPlan(*plan)) {
      if (Status s = memory.contexts->Open(gpu); !s.ok()) return s.WithContext(where);
    }
  }
  auto memory_log = ExecuteMemoryLog::From(*config, memory, where);
  if (!memory_log.ok()) return memory_log.status().WithContext(where);
  model->executor_.set_memory_log(std::move(memory_log).value());
  model->request_lists_ = (*backend)->TakesRequestLists();
  model->decoupled_ = config->model_transaction_policy().decoupled();
  if (model->decoupled_ && !model->request_lists_) {
    return Status::InvalidArgument(fmt::format(
        "{}: model_transaction_policy.decoupled is set, but backend '{}' sends one response "
        "per request (only backends that take request lists, such as python, can be decoupled)",
        where, (*backend)->name()));
  }

  backends::ModelContext ctx;
  ctx.name = config->name();
  ctx.version = version;
  ctx.model_dir = model_dir;
  ctx.version_dir = model_dir / std::to_string(version);
  ctx.config = model->backend_config_.get();
  ctx.allocator = memory.allocator;
  ctx.owner = model->owner_.id();
  ctx.timing = timing;
  ctx.services = services;
  {
    memory::OwnerScope scope(ctx.owner);
    // The model's creation is measured on every GPU its instances will use: a library may
    // set itself up there (memory/native_memory.h).
    if (memory.native != nullptr) {
      for (const backends::InstanceContext& instance_ctx : *plan) {
        if (instance_ctx.kind != backends::DeviceKind::kGpu) continue;
        const bool listed = std::any_of(
            model->native_.begin(), model->native_.end(),
            [&](const memory::NativeCharges& c) { return c.ordinal() == instance_ctx.device_id; });
        if (listed) continue;
        model->native_.emplace_back(memory.native, ctx.owner, instance_ctx.device_id,
                                    std::string((*backend)->name()));
      }
    }
    Result<std::unique_ptr<backends::BackendModel>> backend_model =
        Status::Internal("model not created");
    auto create = [&] { backend_model = (*backend)->LoadModel(ctx); };
    if (!memory::NativeCharges::MeasureGroup(model->native_, create,
                                             memory::NativeMemoryMeter::kCreationWait)) {
      spdlog::info("{}: a GPU was being measured; the model was created unmeasured (what its "
                   "libraries took shows as unattributed)",
                   where);
    }
    if (!backend_model.ok()) return backend_model.status().WithContext(where);
    model->backend_model_ = std::move(backend_model).value();
  }

  // "instances" is the time of creating them less the h2d the backend recorded meanwhile
  // (a device's first instance may upload the weights), so phases add up.
  auto h2d_seconds = [timing] {
    double seconds = 0;
    if (timing != nullptr) {
      for (const auto& phase : timing->phases()) {
        if (phase.name == "h2d") seconds += phase.seconds;
      }
    }
    return seconds;
  };
  const double h2d_before = h2d_seconds();
  const auto instances_start = std::chrono::steady_clock::now();
  model->instances_.reserve(plan->size());
  for (auto& instance_ctx : *plan) {
    instance_ctx.timing = timing;
    memory::ScopedOwner owner(memory.ledger, ctx.owner, memory::OwnerKind::kInstance,
                              instance_ctx.name, memory::MeasurePeaks());
    instance_ctx.owner = owner.id();
    memory::OwnerScope scope(owner.id());
    memory::NativeCharges native;
    if (memory.native != nullptr && instance_ctx.kind == backends::DeviceKind::kGpu) {
      native = memory::NativeCharges(memory.native, owner.id(), instance_ctx.device_id,
                                     std::string((*backend)->name()));
    }
    Result<std::unique_ptr<backends::BackendInstance>> instance =
        Status::Internal("instance not created");
    native.Measure([&] { instance = model->backend_model_->CreateInstance(instance_ctx); });
    if (!instance.ok()) {
      return instance.status().WithContext(
          fmt::format("{}: instance '{}'", where, instance_ctx.name));
    }
    const memory::Device device = instance_ctx.kind == backends::DeviceKind::kGpu
                                      ? memory::Device::Cuda(instance_ctx.device_id)
                                      : memory::Device::Cpu();
    model->instances_.emplace_back(std::move(owner), std::move(instance).value(),
                                   std::move(native), device);
  }
  // A joined batch (dynamic batching without request lists) is assembled with memcpy: its
  // inputs come to the host first, whatever the backend takes.
  model->gpu_inputs_ = model->backend_model_->TakesGpuInputs() &&
                       (model->request_lists_ || !config->has_dynamic_batching());
  if (timing != nullptr) {
    const std::chrono::duration<double> elapsed =
        std::chrono::steady_clock::now() - instances_start;
    timing->Add("instances", elapsed.count() - (h2d_seconds() - h2d_before));
  }

  LoadedModel* gated = model.get();  // the gate outlives the scheduler (members' order)
  const bool by_backend = model->backend_model_->CanSleep();
  const bool in_place = !by_backend && model->backend_model_->SleepsInPlace();
  // Sleeping in place gives back GPU memory: what its GPU instances keep.
  std::vector<memory::Device> park_devices;
  for (const Instance& instance : model->instances_) {
    if (instance.device.is_cuda() &&
        std::find(park_devices.begin(), park_devices.end(), instance.device) ==
            park_devices.end()) {
      park_devices.push_back(instance.device);
    }
  }
  const bool can_sleep =
      by_backend || (in_place && !park_devices.empty() && memory.allocator->CanPark());
  if (!can_sleep) {
    const std::string_view backend_name = (*backend)->name();
    if (!in_place) {
      model->cannot_sleep_ = fmt::format(
          "model '{}' cannot sleep: backend '{}' cannot sleep (it has no model_sleep and "
          "model_wake)",
          config->name(), backend_name);
    } else if (park_devices.empty()) {
      model->cannot_sleep_ = fmt::format(
          "model '{}' cannot sleep: backend '{}' sleeps in place, which gives back GPU memory, "
          "and the model has no GPU instance (host memory gains nothing from a copy to host)",
          config->name(), backend_name);
    } else {
      model->cannot_sleep_ = fmt::format(
          "model '{}' cannot sleep: backend '{}' sleeps in place, which needs the VMM pool "
          "(start vramd with --device-pool=vmm)",
          config->name(), backend_name);
    }
  }
  if (model->sleep_settings_.configured && !can_sleep) {
    return Status::InvalidArgument(fmt::format(
        "{}: parameters '{}' and '{}' ask for sleeping, but {}", where, kSleepAfterIdleParameter,
        kSleepLevelParameter, model->cannot_sleep_));
  }
  if (in_place && model->sleep_settings_.configured &&
      model->sleep_settings_.level != backends::SleepLevel::kHostCopy) {
    return Status::InvalidArgument(fmt::format(
        "{}: parameter '{}': backend '{}' sleeps in place, at level 1 only", where,
        kSleepLevelParameter, (*backend)->name()));
  }
  SleepGate::Actions actions;
  actions.name = where;
  if (can_sleep && in_place) {
    actions.sleep = [gated, where, park_devices](backends::SleepLevel level) -> Status {
      if (level != backends::SleepLevel::kHostCopy) {
        return Status::InvalidArgument(fmt::format(
            "{} sleeps in place, at level 1 only: its memory is kept in host memory, and level "
            "2 needs a backend that reads its weights again",
            where));
      }
      memory::Allocator* allocator = gated->memory_.allocator;
      VRAMD_ASSIGN_OR_RETURN(size_t given_back,
                             allocator->Park(gated->owner_.id(), park_devices));
      spdlog::info("{}: asleep in place: {} given back to the devices, {} kept in host memory",
                   where, memory::FormatBytes(given_back),
                   memory::FormatBytes(allocator->ParkedBytes(gated->owner_.id())));
      allocator->TrimAll();
      return Status::Ok();
    };
    actions.wake = [gated] {
      memory::Allocator::ReliefScope relief;  // may put other idle models to sleep
      return gated->memory_.allocator->Unpark(gated->owner_.id());
    };
  } else if (can_sleep) {
    actions.sleep = [gated](backends::SleepLevel level) {
      memory::OwnerScope scope(gated->owner_.id());  // what the backend keeps is the version's
      Status slept = gated->backend_model_->Sleep(level);
      // What it gave back is cached in the pools until trimmed: to the driver, as promised.
      if (slept.ok()) gated->memory_.allocator->TrimAll();
      return slept;
    };
    actions.wake = [gated] {
      memory::OwnerScope scope(gated->owner_.id());
      memory::Allocator::ReliefScope relief;  // may put other idle models to sleep
      return gated->backend_model_->Wake();
    };
    // The host copy a level-1 sleep kept is left cached in the pinned pool, for the next
    // sleep to reuse, until the server's next trim (after a load or any model's sleep) gives
    // it back: giving pinned pages back synchronizes the device, which stalled the request
    // that woke an 8 GiB model by 1.2 s (run 42, on the waking thread; run 44, on another).
  }
  model->sleep_ = std::make_unique<SleepGate>(std::move(actions));

  Scheduler::Options options;
  options.name = where;
  options.thread_name = config->name();
  options.instance_count = model->instances_.size();
  if (config->has_dynamic_batching()) {
    const auto& batching = config->dynamic_batching();
    if (batching.priority_levels() > 0 || !batching.priority_queue_policy().empty() ||
        batching.preserve_ordering()) {
      spdlog::warn(
          "{}: dynamic_batching priority_levels, priority_queue_policy and preserve_ordering "
          "are not supported; requests share one queue under default_queue_policy, and "
          "responses of different instances are not reordered",
          where);
    }
    options.batching = BatcherOptions::From(*config);
    options.queue_policy =
        RequestQueue::PolicyFrom(config->dynamic_batching().default_queue_policy());
  }
  // A backend with per-thread state runs on its instances' threads only (backend.h). On a
  // device with a budget, an inline execution is one that memory admits at once: one that
  // would wait goes to the instance threads (RunBatch), so no wait holds the caller's thread.
  options.inline_execution = !(*backend)->ExecutesOnInstanceThreads();
  options.idle_spin = Scheduler::DefaultIdleSpin();
  if ((*backend)->ChecksReadiness()) {
    LoadedModel* self = model.get();  // the probe goes before the instances (destructor)
    model->readiness_ = std::make_unique<ReadinessProbe>([self]() -> Status {
      for (size_t i = 0; i < self->instances_.size(); ++i) {
        Status ready = self->instances_[i].backend->Ready();
        if (!ready.ok()) return ready;
      }
      return Status::Ok();
    });
  }
  LoadedModel* raw = model.get();
  auto run = [raw](size_t index, std::vector<QueuedRequest> batch) {
    raw->RunBatch(index, std::move(batch));
  };
  if (config->has_sequence_batching()) {
    auto controls = SequenceControls::From(*config, model_dir);
    if (!controls.ok()) return controls.status().WithContext(where);
    std::vector<memory::OwnerId> owners;
    for (const Instance& instance : model->instances_) owners.push_back(instance.owner.id());
    model->scheduler_ = std::make_unique<SequenceBatcher>(
        SequenceBatcher::Options::From(*config, where, model->instances_.size(),
                                       model->request_lists_),
        std::move(controls).value(), memory, std::move(owners), std::move(run), &model->stats_);
    return model;
  }
  model->scheduler_ = std::make_unique<Scheduler>(std::move(options), std::move(run),
                                                  &model->stats_);
  return model;
}

size_t LoadedModel::PrefixThatFits(size_t index, const std::vector<QueuedRequest>& batch) const {
  const memory::Device device = instances_[index].device;
  const int64_t room = memory_.admission->RoomAlone(device);
  if (room < 0) return batch.size();
  auto samples_of = [](const QueuedRequest& queued) {
    return queued.null_request ? int64_t{0} : static_cast<int64_t>(queued.batch_size);
  };
  int64_t sum = 0;
  for (const auto& queued : batch) sum += samples_of(queued);
  // A size whose peak was seen runs whole when that fits. A size not seen yet has only a
  // figure scaled up from smaller batches, which can miss what a larger one makes besides (a
  // joined batch's outputs of 1 MiB and more come from the pool: twice the scaled figure for
  // the echo test model), so it runs whole only when twice that fits; it is learned then.
  const int64_t seen_whole = memory_.ledger->LearnedExecutionPeak(owner_.id(), device, sum);
  const int64_t scaled_whole = memory_.ledger->PredictExecutionPeak(owner_.id(), device, sum);
  if (scaled_whole == memory::Ledger::kUnknownPeak) return batch.size();  // runs alone, unsplit
  if (seen_whole != memory::Ledger::kUnknownPeak ? seen_whole <= room
                                                 : 2 * scaled_whole <= room) {
    return batch.size();
  }
  // Split into the largest prefix whose size was seen and fits: a split that passes the budget
  // would fail the very requests it was for.
  int64_t prefix = sum;  // samples in the first k requests
  for (size_t k = batch.size() - 1; k > 1; --k) {
    prefix -= samples_of(batch[k]);
    const int64_t seen = memory_.ledger->LearnedExecutionPeak(owner_.id(), device, prefix);
    if (seen != memory::Ledger::kUnknownPeak && seen <= room) return k;
  }
  return 1;  // one request at a time; one that cannot fit alone fails alone
}

void LoadedModel::RunBatch(size_t index, std::vector<QueuedRequest> batch) {
  // A batch predicted to make more than the budget (or the free memory) could ever leave it is
  // split, on the instance's thread (where waiting is allowed), into executions run one after
  // the other, each of a size that fits. Not for sequences, whose batch slots are the
  // sequences' own.
  if (batch.size() <= 1 || memory_.admission == nullptr || config_->has_sequence_batching() ||
      !scheduler_->OnWorkerThread()) {
    RunExecution(index, std::move(batch));
    return;
  }
  bool counted = false;
  while (!batch.empty()) {
    const size_t fits = batch.size() > 1 ? PrefixThatFits(index, batch) : batch.size();
    if (fits == batch.size()) {
      RunExecution(index, std::move(batch));
      return;
    }
    if (!counted) {
      memory_.admission->CountSplit(instances_[index].device);
      spdlog::debug("model '{}' version {}: a batch of {} request(s) could never fit the memory "
                    "it may use whole; running {} at a time",
                    config_->name(), version_, batch.size(), fits);
      counted = true;
    }
    std::vector<QueuedRequest> part(std::make_move_iterator(batch.begin()),
                                    std::make_move_iterator(batch.begin() + fits));
    batch.erase(batch.begin(), batch.begin() + fits);
    RunExecution(index, std::move(part));
  }
}

void LoadedModel::RunExecution(size_t index, std::vector<QueuedRequest> batch) {
  // Each outcome holds this version (InferOutcome::version_hold), so that an unload waits for
  // the outputs of its requests instead of closing their owners under them. Null while the
  // version is being destroyed (its last holder let go with requests still queued).
  std::shared_ptr<const void> hold;
  if (reaper_ != nullptr) hold = weak_from_this().lock();
  if (hold != nullptr) {
    for (auto& queued : batch) {
      queued.done = [hold, done = std::move(queued.done)](Result<InferOutcome> outcome) mutable {
        if (outcome.ok()) outcome->version_hold = std::move(hold);
        hold.reset();  // only the outcome may keep the version, not this callback
        done(std::move(outcome));
      };
    }
    hold.reset();  // else this instance thread may hold the last reference once they ran
  }
  Instance& instance = instances_[index];
  auto fail_batch = [&](const Status& error) {
    for (auto& queued : batch) {
      if (!queued.null_request) {
        stats_.RecordFailure(static_cast<uint64_t>(
                                 std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     SchedulerClock::now() - queued.arrival)
                                     .count()),
                             FailureReason::kRejected);
      }
      queued.done(error);
    }
  };
  // A sleeping version wakes here, before anything of the execution is measured: the wait is
  // the requests' queue time.
  auto awake = sleep_->Enter();
  if (!awake.ok()) {
    fail_batch(awake.status());
    return;
  }
  int64_t samples = 0;  // the batch size an execution's peak is learned for
  for (const auto& queued : batch) {
    if (!queued.null_request) samples += static_cast<int64_t>(queued.batch_size);
  }
  auto run = [&] {
    if (request_lists_) {
      executor_.RunRequests(*instance.backend, instance.owner.id(), decoupled_, std::move(batch));
    } else {
      executor_.Run(*instance.backend, instance.owner.id(), std::move(batch));
    }
  };
  // One execution at a time per instance, so its count needs no lock, and the rise of the
  // instance's memory over its mark is this execution's (marked before admission, which reads
  // what it has made since).
  memory_.ledger->MarkPeaks(instance.owner.id());
  // On a device with a budget the execution waits until what it is predicted to make fits
  // (memory/admission.h), at most until its earliest request's deadline.
  memory::Admission::Ticket admitted;
  if (memory_.admission != nullptr) {
    const int64_t predicted =
        memory_.ledger->PredictExecutionPeak(owner_.id(), instance.device, samples);
    if (!scheduler_->OnWorkerThread()) {
      // Inline, on the caller's thread, which must not wait: admitted now, or handed to the
      // instance threads to wait there (queued as they came; their queue time goes on).
      auto now = memory_.admission->TryAdmit(instance.device, predicted, instance.owner.id());
      if (!now) {
        for (auto& queued : batch) {
          auto refused = scheduler_->SubmitOrReturn(std::move(queued), /*allow_inline=*/false);
          if (refused) scheduler_->Submit(std::move(*refused));
        }
        return;
      }
      admitted = std::move(*now);
    } else {
      auto deadline = SchedulerClock::now() + memory_.admission_wait;
      for (const auto& queued : batch) deadline = std::min(deadline, queued.deadline);
      auto ticket = memory_.admission->Admit(
          instance.device, predicted, instance.owner.id(), deadline,
          fmt::format("model '{}' version {}", config_->name(), version_));
      if (!ticket.ok()) {
        fail_batch(ticket.status());
        return;
      }
      admitted = std::move(ticket).value();
    }
  }
  if (memory::NativeMemoryMeter::WantsExecution(instance.native)) {
    instance.native.MeasureExecution(run);
  } else {
    run();
  }
  memory_.ledger->LearnExecutionPeaks(instance.owner.id(), owner_.id(), samples, instance.device);
}

std::optional<QueuedRequest> LoadedModel::Admit(std::shared_ptr<const InferRequest> request,
                                                InferCallback done) {
  QueuedRequest queued;
  queued.arrival = SchedulerClock::now();
  // GPU inputs (from a BLS call) go to host for a backend that reads only host memory, and a
  // BYTES tensor always: validation splits its elements on the host.
  Status valid = Status::Ok();
  if (NeedsMoveToHost(request->inputs, /*bytes_only=*/gpu_inputs_)) {
    auto staged = std::make_shared<InferRequest>(*request);
    valid = MoveToHost(&staged->inputs, /*bytes_only=*/gpu_inputs_);
    if (valid.ok()) request = std::move(staged);
  }
  if (valid.ok()) valid = ValidateInferRequest(*config_, *request);
  if (!valid.ok()) {
    stats_.RecordFailure(
        static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                  SchedulerClock::now() - queued.arrival)
                                  .count()),
        FailureReason::kOther);
    done(std::move(valid));
    return std::nullopt;
  }
  queued.batch_size = config_->max_batch_size() > 0 ? RequestBatchSize(*request) : 1;
  queued.request = std::move(request);
  queued.done = std::move(done);
  return queued;
}

void LoadedModel::InferAsync(std::shared_ptr<const InferRequest> request, InferCallback done) {
  auto queued = Admit(std::move(request), std::move(done));
  if (!queued) return;
  if (sleep_->state() == SleepGate::State::kAwake) {
    scheduler_->Submit(std::move(*queued));
    return;
  }
  // Not inline: the wake must not hold the caller's thread.
  auto refused = scheduler_->SubmitOrReturn(std::move(*queued), /*allow_inline=*/false);
  if (refused) scheduler_->Submit(std::move(*refused));
}

bool LoadedModel::UsesDevice(memory::Device device) const {
  for (const Instance& instance : instances_) {
    if (instance.device == device) return true;
  }
  return false;
}

bool LoadedModel::TryInferAsync(const std::shared_ptr<const InferRequest>& request,
                                InferCallback* done, bool allow_inline) {
  auto queued = Admit(request, std::move(*done));
  if (!queued) return true;
  allow_inline = allow_inline && sleep_->state() == SleepGate::State::kAwake;
  auto refused = scheduler_->SubmitOrReturn(std::move(*queued), allow_inline);
  if (!refused) return true;
  *done = std::move(refused->done);
  return false;
}

Result<InferOutcome> LoadedModel::Infer(const InferRequest& request) {
  // Shared with the callback, which may still be returning from set_value when get() does.
  auto promise = std::make_shared<std::promise<Result<InferOutcome>>>();
  auto future = promise->get_future();
  // Not owned: `request` outlives the call, which returns only once the request is answered.
  std::shared_ptr<const InferRequest> borrowed(std::shared_ptr<const InferRequest>(), &request);
  InferAsync(std::move(borrowed),
             [promise](Result<InferOutcome> outcome) { promise->set_value(std::move(outcome)); });
  return future.get();
}

Status LoadedModel::CheckReady() const {
  auto answer = std::make_shared<std::promise<Status>>();
  auto future = answer->get_future();
  CheckReadyAsync([answer](Status status) { answer->set_value(std::move(status)); });
  return future.get();
}

Status LoadedModel::Available() const {
  for (const Instance& instance : instances_) {
    Status available = instance.backend->Available();
    if (!available.ok()) return available;
  }
  return Status::Ok();
}

void LoadedModel::CheckReadyAsync(std::function<void(Status)> done) const {
  auto where = [this] { return fmt::format("model '{}' version {} is not ready", name(), version_); };
  if (Status available = Available(); !available.ok()) return done(available.WithContext(where()));
  if (readiness_ == nullptr) return done(Status::Ok());
  readiness_->CheckAsync([where = where(), done = std::move(done)](Status ready) {
    if (!ready.ok()) {
      ready = ready.WithContext(where);
      spdlog::info("{}", ready.message());
    }
    done(std::move(ready));
  });
}

void LoadedModel::Shutdown() {
  if (scheduler_ != nullptr) scheduler_->Shutdown();
}

}  // namespace vramd::runtime
