#include "backends/remote/stub.h"

#include <spdlog/spdlog.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <atomic>
#include <cstring>
#include <exception>
#include <functional>
#include <utility>

#include "backends/abi/abi_bridge.h"
#include "backends/abi/abi_responses.h"
#include "backends/remote/host_process.h"
#include "backends/remote/peer.h"
#include "backends/remote/worker.h"
#include "core/infer_request.h"
#include "memory/cuda_devices.h"
#include "memory/cuda_ipc.h"
#include "memory/hosted_processes.h"

namespace vramd::backends::remote {
namespace {

std::atomic<uint64_t> g_total_restarts{0};

constexpr std::chrono::milliseconds kFirstBackoff{100};
constexpr std::chrono::milliseconds kLastBackoff{5000};

// GPU inputs copied into vramd's pool for a call, where CUDA IPC cannot export them where they
// are (memory a framework mapped itself, as torch's expandable segments, is no cudaMalloc
// allocation); freed once the host's call returned, its mappings closed.
class StagedInputs {
 public:
  explicit StagedInputs(const VramdServerApi* server) : server_(server) {}
  ~StagedInputs() {
    for (const auto& [device, ptr] : staged_) server_->free(server_->server, VRAMD_DEVICE_GPU, device, ptr);
  }
  StagedInputs(const StagedInputs&) = delete;
  StagedInputs& operator=(const StagedInputs&) = delete;

  // Points each GPU input of `view` that cannot be exported at a copy in vramd's pool (a
  // device-to-device copy, charged to the request's owner when it has one).
  Status MakeExportable(VramdRequest* view, std::vector<VramdTensor>* inputs) {
    for (size_t i = 0; i < inputs->size(); ++i) {
      VramdTensor& t = (*inputs)[i];
      const VramdMemory& m = view->input_memory[i];
      if (m.kind != VRAMD_DEVICE_GPU || t.byte_size == 0) continue;
      if (memory::ExportDeviceMemory(m.device_id, t.data).ok()) continue;
      VramdError error{};
      void* copy = nullptr;
      VramdCode code = server_->allocate(server_->server, view->owner, VRAMD_DEVICE_GPU, m.device_id,
                                         t.byte_size, nullptr, &copy, &error);
      if (code != VRAMD_OK) return abi::FromVramd(code, error, fmt::format("input '{}'", t.name));
      staged_.emplace_back(m.device_id, copy);
      code = server_->copy(server_->server, VRAMD_DEVICE_GPU, m.device_id, copy, VRAMD_DEVICE_GPU,
                           m.device_id, t.data, t.byte_size, nullptr, &error);
      if (code != VRAMD_OK) return abi::FromVramd(code, error, fmt::format("input '{}'", t.name));
      t.data = copy;
    }
    return Status::Ok();
  }

 private:
  const VramdServerApi* const server_;
  std::vector<std::pair<int32_t, void*>> staged_;
};

VramdCode CallCode(VramdError* error, const Status& s) {
  abi::SetError(error, s.message());
  return abi::ToVramdCode(s.code());
}

// The library entry point a call runs in the host, for the messages that say it hung.
const char* EntryPoint(MessageType type) {
  switch (type) {
    case MessageType::kModelCreate: return "model_create";
    case MessageType::kInstanceCreate: return "instance_create";
    case MessageType::kInstanceDestroy: return "instance_destroy";
    case MessageType::kModelDestroy: return "model_destroy";
    case MessageType::kExecute: return "execute";
    case MessageType::kExecuteRequests: return "execute_requests";
    case MessageType::kInstanceReady: return "instance_ready";
    case MessageType::kAutoCompleteConfig: return "auto_complete_config";
    default: return "a call";
  }
}

void Answer(Responder& responder, const Status& error) {
  // A request not completed gets the error; one that had its one response needs the flag.
  if (!responder.Respond(std::optional<Result<BackendResponse>>(error), true).ok()) {
    static_cast<void>(responder.Respond(std::nullopt, true));
  }
}

}  // namespace

// One host process and its conversation. Its reader thread performs the host's calls on the
// server table; when the conversation ends it reaps the process, answers every request the
// process had not completed, releases its metric handles and tells the stub. A call that runs
// past the call timeout ends the conversation (the reader then kills the process); a watchdog
// thread ends the requests the host went silent on once their calls returned (stub.h).
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  using ClosedCallback = std::function<void(const Connection*)>;

  static Result<std::shared_ptr<Connection>> Open(const StubOptions& options, ClosedCallback on_closed) {
    VRAMD_ASSIGN_OR_RETURN(auto pair, Channel::SocketPair());
    SpawnOptions spawn;
    spawn.executable = options.host_executable;
    spawn.arguments = {options.library.string(), options.label};
    spawn.environment = options.environment;
    VRAMD_ASSIGN_OR_RETURN(HostProcess process, HostProcess::Spawn(spawn, pair.second));
    pair.second.Reset();  // the child's end is the child's alone: its exit ends our stream
    auto connection = std::shared_ptr<Connection>(
        new Connection(options, std::move(process), std::move(pair.first), std::move(on_closed)));
    connection->peer_->Start();
    return connection;
  }

  ~Connection() {
    if (watchdog_.joinable()) {
      watchdog_.request_stop();
      watchdog_.join();
    }
    peer_->Stop();
    slow_.reset();  // its calls may still answer (into a closed socket) through peer_
  }

  pid_t pid() const { return pid_; }
  bool dead() const { return dead_.load(); }
  // Why the conversation ended, once it has (the stub hears of the end a little before).
  Status WaitClosed() const { return peer_->WaitClosed(); }

  // A call whose reply starts with a status; that status is the result's when it fails. One
  // that does not return within the call timeout fails with why the process was killed.
  Result<Frame> CallStatus(MessageType type, std::string_view payload) EXCLUDES(mu_) {
    VRAMD_ASSIGN_OR_RETURN(Frame frame, Call(type, payload));
    WireReader r(frame.data(), frame.size(), MessageTypeName(static_cast<uint32_t>(type)) + " reply");
    Status status = DecodeStatus(r);
    if (!status.ok()) return status;
    return frame;
  }

  // Ends the conversation (the host exits at end of stream) and reaps the process. Returns how
  // it ended when that was not with status 0 ("exited with status 23"): a host that leaks
  // under a sanitizer, or whose library's destructors fail, says so there.
  std::optional<std::string> Close() {
    peer_->Stop();  // joins the reader, which reaped the process (OnClosed)
    if (process_.exited_cleanly()) return std::nullopt;
    return process_.Reap(std::chrono::milliseconds(0));
  }

  // `request` names the request in the error of a request the host goes silent on.
  uint64_t AddResponder(std::shared_ptr<Responder> responder, std::string request) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    const uint64_t id = next_id_++;
    responders_[id] = Owed{std::move(responder), std::move(request), kNever};
    return id;
  }
  void DropResponder(uint64_t id) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    responders_.erase(id);
  }
  // The call that carried these requests returned: from now on each owes its next response
  // within the call timeout.
  void Owe(std::span<const uint64_t> ids) EXCLUDES(mu_) {
    if (!watchdog_.joinable()) return;  // no timeout
    MutexLock lock(mu_);
    const auto deadline = std::chrono::steady_clock::now() + options_.call_timeout;
    for (uint64_t id : ids) {
      if (auto it = responders_.find(id); it != responders_.end()) it->second.deadline = deadline;
    }
    ++owed_changes_;
    owed_changed_.notify_one();
  }

 private:
  // What a request owes: a response by `deadline` (kNever while its call runs).
  struct Owed {
    std::shared_ptr<Responder> responder;
    std::string request;
    std::chrono::steady_clock::time_point deadline;
  };
  static constexpr std::chrono::steady_clock::time_point kNever = std::chrono::steady_clock::time_point::max();

  Connection(const StubOptions& options, HostProcess process, UniqueFd socket, ClosedCallback on_closed)
      : options_(options), pid_(process.pid()), process_(std::move(process)), on_closed_(std::move(on_closed)) {
    peer_ = std::make_unique<Peer>(
        std::move(socket), [this](Frame f) { return OnFrame(std::move(f)); },
        [this](const Status& s) { return OnClosed(s); });
    if (options_.call_timeout.count() > 0) {
      watchdog_ = std::jthread([this](std::stop_token stop) { Watch(stop); });
    }
    MutexLock lock(mu_);
    hosted_ = memory::HostedProcesses::Global().Add(
        memory::HostedProcess{static_cast<uint32_t>(pid_), options_.model.owner, options_.label});
  }

  const VramdServerApi* server() const { return options_.server; }

  Result<Frame> Call(MessageType type, std::string_view payload) EXCLUDES(mu_) {
    if (options_.call_timeout.count() <= 0) return peer_->Call(type, payload);
    VRAMD_ASSIGN_OR_RETURN(
        std::optional<Frame> frame,
        peer_->CallUntil(type, payload, std::chrono::steady_clock::now() + options_.call_timeout));
    if (frame.has_value()) return std::move(*frame);
    {
      MutexLock lock(mu_);
      if (!hang_.has_value()) {  // the first call to time out names the hang
        hang_ = fmt::format(
            "hung: {} did not return within {} ms (VRAMD_STUB_CALL_TIMEOUT_MS), so it was "
            "killed (SIGKILL)", EntryPoint(type), options_.call_timeout.count());
      }
    }
    // The reader kills the process at the end of stream this makes, and fails every call and
    // request with the hang: waiting for that makes this call's error the same as theirs, and
    // the stub restarting by the time it returns.
    peer_->Shutdown();
    return peer_->WaitClosed();
  }

  // The watchdog: ends each request whose deadline passed (Owe, OnRespond).
  void Watch(std::stop_token stop) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    while (!stop.stop_requested()) {
      const auto now = std::chrono::steady_clock::now();
      auto next = kNever;
      std::vector<Owed> late;
      for (auto it = responders_.begin(); it != responders_.end();) {
        if (it->second.deadline <= now) {
          late.push_back(std::move(it->second));
          it = responders_.erase(it);
        } else {
          next = std::min(next, it->second.deadline);
          ++it;
        }
      }
      if (!late.empty()) {
        lock.Unlock();
        for (Owed& owed : late) {
          const Status error = Status::Unavailable(fmt::format(
              "stub for {} (pid {}) sent no response to request '{}' for {} ms after its "
              "execute_requests returned; vramd ended the request (VRAMD_STUB_CALL_TIMEOUT_MS)",
              options_.label, pid_, owed.request, options_.call_timeout.count()));
          spdlog::warn("{}", error.message());
          Answer(*owed.responder, error);
        }
        lock.Lock();
        continue;
      }
      const uint64_t seen = owed_changes_;
      const auto changed = [this, seen]() REQUIRES(mu_) { return owed_changes_ != seen; };
      if (next == kNever) {
        lock.Wait(owed_changed_, stop, changed);
      } else {
        lock.WaitUntil(owed_changed_, stop, next, changed);
      }
    }
  }

  Status Reply(uint64_t id, const Status& status) {
    WireWriter w;
    EncodeStatus(w, status);
    return peer_->Reply(id, w.buffer());
  }

  Status OnClosed(const Status& receive) EXCLUDES(mu_) {
    dead_.store(true);
    std::optional<std::string> hang;
    {
      MutexLock lock(mu_);
      hang = hang_;
    }
    if (hang.has_value()) {
      spdlog::error("stub for {} (pid {}) {}", options_.label, pid_, *hang);
      process_.Kill();
    } else if (!receive.ok()) {
      spdlog::error("stub for {} (pid {}) sent a bad frame, killing it: {}", options_.label, pid_,
                    receive.message());
      process_.Kill();
    }
    const std::string ended = process_.Reap(options_.exit_grace);
    {
      MutexLock lock(mu_);
      hosted_.reset();  // reaped: the pid may be another process's from now on
    }
    const Status reason = Status::Unavailable(
        fmt::format("stub for {} (pid {}) {}", options_.label, pid_, hang.value_or(ended)));
    std::map<uint64_t, Owed> responders;
    std::map<uint64_t, void*> families, metrics;
    std::map<uint64_t, DeviceMemory> device_memory;
    std::map<uint64_t, VramdInferResult*> held_results;
    {
      MutexLock lock(mu_);
      responders.swap(responders_);
      families.swap(families_);
      metrics.swap(metrics_);
      device_memory.swap(device_memory_);
      held_results.swap(held_results_);
    }
    // The process is reaped, its mappings gone with its context: its GPU memory can go back
    // (memory a call of another model still reads goes when that call ends).
    uint64_t held = 0;
    for (const auto& [id, m] : device_memory) held += m.size;
    if (!device_memory.empty()) {
      spdlog::info("stub for {} (pid {}) held {} GPU allocation(s) of vramd's ({} bytes) when it "
                   "ended; freed", options_.label, pid_, device_memory.size(), held);
    }
    device_memory.clear();
    // Results of calls into other models it had not let go of.
    for (auto& [id, result] : held_results) server()->infer_result_release(server()->server, result);
    // The stub first: a client that got its error then finds the model restarting (not ready).
    on_closed_(this);
    for (auto& [id, owed] : responders) Answer(*owed.responder, reason);
    for (auto& [id, metric] : metrics) server()->metric_release(server()->server, metric);
    for (auto& [id, family] : families) server()->metric_family_release(server()->server, family);
    return reason;
  }

  Status OnFrame(Frame f) EXCLUDES(mu_) {
    const std::string what = MessageTypeName(static_cast<uint32_t>(f.type));
    WireReader r(f.data(), f.size(), what);
    switch (f.type) {
      case MessageType::kLog: {
        const uint32_t level = r.U32("level");
        const std::string message(r.Str("message"));
        VRAMD_RETURN_IF_ERROR(r.Finish());
        server()->log(server()->server, static_cast<VramdLogLevel>(std::min<uint32_t>(level, VRAMD_LOG_VERBOSE)),
                      message.c_str());
        return Status::Ok();
      }
      case MessageType::kRecordLoadPhase: {
        const std::string phase(r.Str("phase"));
        const double seconds = r.F64("seconds");
        const uint64_t bytes = r.U64("bytes");
        VRAMD_RETURN_IF_ERROR(r.Finish());
        server()->record_load_phase(server()->server, phase.c_str(), seconds, bytes);
        return Status::Ok();
      }
      case MessageType::kRespond: return OnRespond(f.id, r);
      case MessageType::kIsCancelled: {
        const uint64_t id = r.U64("responder");
        VRAMD_RETURN_IF_ERROR(r.Finish());
        std::shared_ptr<Responder> responder;
        {
          MutexLock lock(mu_);
          if (auto it = responders_.find(id); it != responders_.end()) responder = it->second.responder;
        }
        WireWriter w;
        EncodeStatus(w, Status::Ok());
        w.I32(responder != nullptr && responder->IsCancelled() ? 1 : 0);
        return peer_->Reply(f.id, w.buffer());
      }
      case MessageType::kInferAsync: return OnInferAsync(f.id, r);
      case MessageType::kDeviceAllocate: {
        const uint64_t owner = r.U64("owner");
        const int32_t device = r.I32("device");
        const uint64_t size = r.U64("size");
        VRAMD_RETURN_IF_ERROR(r.Finish());
        return OnDeviceAllocate(f.id, owner, device, size);
      }
      case MessageType::kDeviceFree: {
        const uint64_t id = r.U64("id");
        VRAMD_RETURN_IF_ERROR(r.Finish());
        DeviceMemory memory;  // freed here, or by the last call still reading it
        {
          MutexLock lock(mu_);
          // An unknown id (a double free) is the host's bug and harmless here.
          if (auto it = device_memory_.find(id); it != device_memory_.end()) {
            memory = std::move(it->second);
            device_memory_.erase(it);
          }
        }
        return Status::Ok();
      }
      case MessageType::kInferResultRelease: {
        const uint64_t id = r.U64("id");
        VRAMD_RETURN_IF_ERROR(r.Finish());
        VramdInferResult* result = nullptr;
        {
          MutexLock lock(mu_);
          // An unknown id (a double release) is the host's bug and harmless here.
          if (auto it = held_results_.find(id); it != held_results_.end()) {
            result = it->second;
            held_results_.erase(it);
          }
        }
        if (result != nullptr) server()->infer_result_release(server()->server, result);
        return Status::Ok();
      }
      case MessageType::kInferCancel: {
        const uint64_t id = r.U64("id");
        VRAMD_RETURN_IF_ERROR(r.Finish());
        MutexLock lock(mu_);  // held: the final result, which ends the context, waits for it
        auto it = infer_calls_.find(id);
        // An unknown id: the call already ended; a cancel then does nothing, as in-process.
        if (it != infer_calls_.end() && it->second->cancel_token != nullptr) {
          server()->infer_cancel(server()->server, it->second->cancel_token);
        }
        return Status::Ok();
      }
      case MessageType::kLoadModel:
      case MessageType::kUnloadModel: {
        // Blocking (a load runs to its end): on a thread of its own, so that the reader goes on.
        slow_->Post([this, f = std::move(f)] {
          WireReader q(f.data(), f.size(), MessageTypeName(static_cast<uint32_t>(f.type)));
          const std::string model(q.Str("model"));
          VramdError error{};
          VramdCode code;
          if (f.type == MessageType::kLoadModel) {
            const std::string config(q.Str("config_json"));
            const uint64_t count = q.U64("file_count");
            std::vector<std::pair<std::string, std::string>> files;
            for (uint64_t i = 0; i < count && q.status().ok(); ++i) {
              std::string path(q.Str("file_path"));
              files.emplace_back(std::move(path), std::string(q.Str("file_bytes")));
            }
            std::vector<VramdModelFile> table;
            for (const auto& [path, bytes] : files) table.push_back({path.c_str(), bytes.data(), bytes.size()});
            if (!q.Finish().ok()) {
              code = CallCode(&error, q.status());
            } else if (files.empty()) {
              code = server()->load_model(server()->server, model.c_str(), config.c_str(), &error);
            } else if (server()->struct_size <= offsetof(VramdServerApi, load_model_files)) {
              code = CallCode(&error, Status::Unsupported("this server loads no model files"));
            } else {
              code = server()->load_model_files(server()->server, model.c_str(), config.c_str(),
                                                table.data(), table.size(), &error);
            }
          } else {
            const int32_t dependents = q.I32("unload_dependents");
            code = q.Finish().ok() ? server()->unload_model(server()->server, model.c_str(), dependents, &error)
                                   : CallCode(&error, q.status());
          }
          static_cast<void>(Reply(f.id, abi::FromVramd(code, error, "")));
        });
        return Status::Ok();
      }
      case MessageType::kIsModelReady: {
        const std::string model(r.Str("model"));
        const int64_t version = r.I64("version");
        VRAMD_RETURN_IF_ERROR(r.Finish());
        WireWriter w;
        EncodeStatus(w, Status::Ok());
        w.I32(server()->is_model_ready(server()->server, model.c_str(), version));
        return peer_->Reply(f.id, w.buffer());
      }
      case MessageType::kMetricFamilyCreate: {
        const std::string name(r.Str("name"));
        const std::string description(r.Str("description"));
        const int32_t kind = r.I32("kind");
        VRAMD_RETURN_IF_ERROR(r.Finish());
        VramdError error{};
        void* family = nullptr;
        const VramdCode code = server()->metric_family_create(server()->server, name.c_str(),
                                                              description.c_str(), kind, &family, &error);
        if (code != VRAMD_OK) return Reply(f.id, abi::FromVramd(code, error, ""));
        uint64_t id;
        {
          MutexLock lock(mu_);
          id = next_id_++;
          families_[id] = family;
        }
        WireWriter w;
        EncodeStatus(w, Status::Ok());
        w.U64(id);
        return peer_->Reply(f.id, w.buffer());
      }
      case MessageType::kMetricCreate: {
        const uint64_t family_id = r.U64("family");
        const std::string labels(r.Str("labels_json"));
        const uint32_t n = r.Count("buckets", 8);
        std::vector<double> buckets;
        for (uint32_t i = 0; i < n && r.ok(); ++i) buckets.push_back(r.F64("bucket"));
        VRAMD_RETURN_IF_ERROR(r.Finish());
        void* family = nullptr;
        {
          MutexLock lock(mu_);
          if (auto it = families_.find(family_id); it != families_.end()) family = it->second;
        }
        if (family == nullptr) return Reply(f.id, Status::InvalidArgument("metric_create: not a metric family handle"));
        VramdError error{};
        void* metric = nullptr;
        const VramdCode code = server()->metric_create(server()->server, family, labels.c_str(),
                                                       buckets.data(), buckets.size(), &metric, &error);
        if (code != VRAMD_OK) return Reply(f.id, abi::FromVramd(code, error, ""));
        uint64_t id;
        {
          MutexLock lock(mu_);
          id = next_id_++;
          metrics_[id] = metric;
        }
        WireWriter w;
        EncodeStatus(w, Status::Ok());
        w.U64(id);
        return peer_->Reply(f.id, w.buffer());
      }
      case MessageType::kMetricFamilyRelease:
      case MessageType::kMetricRelease: {
        const uint64_t id = r.U64("handle");
        VRAMD_RETURN_IF_ERROR(r.Finish());
        void* handle = nullptr;
        {
          MutexLock lock(mu_);
          auto& map = f.type == MessageType::kMetricRelease ? metrics_ : families_;
          if (auto it = map.find(id); it != map.end()) {
            handle = it->second;
            map.erase(it);
          }
        }
        if (handle == nullptr) return Status::Ok();  // a double release: the backend's bug, harmless here
        if (f.type == MessageType::kMetricRelease) {
          server()->metric_release(server()->server, handle);
        } else {
          server()->metric_family_release(server()->server, handle);
        }
        return Status::Ok();
      }
      case MessageType::kMetricUpdate:
      case MessageType::kMetricValue: {
        const uint64_t id = r.U64("metric");
        int32_t op = 0;
        double value = 0;
        if (f.type == MessageType::kMetricUpdate) {
          op = r.I32("op");
          value = r.F64("value");
        }
        VRAMD_RETURN_IF_ERROR(r.Finish());
        void* metric = nullptr;
        {
          MutexLock lock(mu_);
          if (auto it = metrics_.find(id); it != metrics_.end()) metric = it->second;
        }
        if (metric == nullptr) return Reply(f.id, Status::InvalidArgument("not a metric handle"));
        VramdError error{};
        if (f.type == MessageType::kMetricUpdate) {
          const VramdCode code = server()->metric_update(server()->server, metric, op, value, &error);
          return Reply(f.id, abi::FromVramd(code, error, ""));
        }
        const VramdCode code = server()->metric_value(server()->server, metric, &value, &error);
        if (code != VRAMD_OK) return Reply(f.id, abi::FromVramd(code, error, ""));
        WireWriter w;
        EncodeStatus(w, Status::Ok());
        w.F64(value);
        return peer_->Reply(f.id, w.buffer());
      }
      default:
        return Status::InvalidArgument(fmt::format("the host sent a {} frame, which only vramd sends", what));
    }
  }

  // GPU memory for the host from the server's pools, in the ledger under `owner`, exported by
  // CUDA IPC; kept here until the host's DeviceFree, or freed when the process is gone.
  Status OnDeviceAllocate(uint64_t call, uint64_t owner, int32_t device, uint64_t size) EXCLUDES(mu_) {
    if (device < 0) return Reply(call, Status::InvalidArgument(fmt::format("allocate: GPU {} is no device", device)));
    VramdError error{};
    void* ptr = nullptr;
    const VramdCode code = server()->allocate(server()->server, owner, VRAMD_DEVICE_GPU, device,
                                              static_cast<size_t>(size), nullptr, &ptr, &error);
    if (code != VRAMD_OK) return Reply(call, abi::FromVramd(code, error, ""));
    auto exported = memory::ExportDeviceMemory(device, ptr);
    if (!exported.ok()) {
      server()->free(server()->server, VRAMD_DEVICE_GPU, device, ptr);
      return Reply(call, exported.status().WithContext("exporting it to the host"));
    }
    const VramdServerApi* api = server();
    std::shared_ptr<void> held(ptr, [api, device](void* p) { api->free(api->server, VRAMD_DEVICE_GPU, device, p); });
    uint64_t id;
    {
      MutexLock lock(mu_);
      id = next_id_++;
      device_memory_[id] = DeviceMemory{ptr, device, size, std::move(held)};
    }
    WireWriter w;
    EncodeStatus(w, Status::Ok());
    w.U64(id);
    w.Str(std::string_view(reinterpret_cast<const char*>(exported->handle.data()), exported->handle.size()));
    w.U64(exported->offset);
    return peer_->Reply(call, w.buffer());
  }

  // A DeviceAllocate's memory: freed when the last holder lets go (the host's DeviceFree, its
  // end, or a response or call of another model that still uses it).
  struct DeviceMemory {
    void* ptr = nullptr;
    int32_t device = 0;
    uint64_t size = 0;
    std::shared_ptr<void> held;  // null: none (not an allocation of the host's)
  };

  // The memory of the GPU outputs the host handed over (DeviceAllocate memory it filled and let
  // go of, its mapping closed), taken out of the host's allocations at once, whatever becomes of
  // the response: each is freed when its holder goes (with a refused response, at once).
  std::vector<DeviceMemory> TakeHandedOver(const std::vector<WireTensor>& outputs) EXCLUDES(mu_) {
    std::vector<DeviceMemory> taken(outputs.size());
    MutexLock lock(mu_);
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (outputs[i].gpu < 0) continue;
      auto it = device_memory_.find(outputs[i].device_allocation);
      if (it == device_memory_.end()) continue;
      taken[i] = std::move(it->second);
      device_memory_.erase(it);
    }
    return taken;
  }

  // The response's tensor over handed-over memory, checked as response_add_output checks.
  static Result<Tensor> AdoptGpuOutput(const WireTensor& t, DeviceMemory taken,
                                       const std::vector<Tensor>& outputs) {
    if (taken.held == nullptr) {
      return Status::InvalidArgument(fmt::format(
          "response_add_output '{}': GPU memory {} is not the host's", t.name, t.device_allocation));
    }
    if (taken.device != t.gpu || taken.size < t.byte_size) {
      return Status::InvalidArgument(fmt::format(
          "response_add_output '{}': {} bytes on GPU {} do not fit its memory ({} bytes on GPU {})",
          t.name, t.byte_size, t.gpu, taken.size, taken.device));
    }
    VRAMD_ASSIGN_OR_RETURN(Tensor tensor, abi::NewOutput(outputs, 0, "response_add_output",
                                                         t.name.c_str(), t.datatype, t.shape.data(),
                                                         t.shape.size(), t.byte_size));
    const auto* bytes = static_cast<const std::byte*>(taken.ptr);
    tensor.data = SharedBuffer::View(std::move(taken.held), bytes, t.byte_size);
    tensor.gpu = taken.device;
    return tensor;
  }

  Status OnRespond(uint64_t call, WireReader& r) EXCLUDES(mu_) {
    WireRespond m = DecodeRespond(r);
    VRAMD_RETURN_IF_ERROR(r.Finish());
    std::vector<DeviceMemory> handed_over = TakeHandedOver(m.outputs);
    const bool final = (m.flags & VRAMD_RESPONSE_FLAG_FINAL) != 0;
    std::shared_ptr<Responder> responder;
    {
      MutexLock lock(mu_);
      if (auto it = responders_.find(m.responder); it != responders_.end()) {
        responder = it->second.responder;
        // A response after the call returned: the next one is owed from now.
        if (!final && it->second.deadline != kNever) {
          it->second.deadline = std::chrono::steady_clock::now() + options_.call_timeout;
        }
      }
    }
    if (responder == nullptr) {
      return Reply(call, Status::InvalidArgument(
                             "respond: the request was already completed (its final response was sent)"));
    }
    std::optional<Result<BackendResponse>> payload;
    if (m.code != VRAMD_OK) {
      VramdError text{};
      abi::SetError(&text, m.message);
      payload = Result<BackendResponse>(abi::FromVramd(m.code, text, ""));
    } else if (m.has_response) {
      BackendResponse response;
      for (size_t i = 0; i < m.outputs.size(); ++i) {
        const WireTensor& t = m.outputs[i];
        if (t.gpu >= 0) {
          auto adopted = AdoptGpuOutput(t, std::move(handed_over[i]), response.outputs);
          if (!adopted.ok()) return Reply(call, adopted.status());
          response.outputs.push_back(std::move(adopted).value());
          continue;
        }
        auto added = abi::AppendHostOutput(&response.outputs, 0, "response_add_output", t.name.c_str(),
                                           t.datatype, t.shape.data(), t.shape.size(), t.byte_size);
        if (!added.ok()) return Reply(call, added.status());
        if (t.byte_size > 0) std::memcpy(*added, t.data, t.byte_size);
      }
      if (!m.parameters_json.empty()) {
        auto parameters = ParametersFromJson(m.parameters_json, "response parameters");
        if (!parameters.ok()) return Reply(call, parameters.status().WithContext("response_set_parameters"));
        response.parameters = std::move(parameters).value();
      }
      payload = Result<BackendResponse>(std::move(response));
    }
    Status sent = responder->Respond(std::move(payload), final);
    if (sent.ok() && final) DropResponder(m.responder);
    return Reply(call, sent);
  }

  // One infer_async call's way back to the host.
  struct InferContext {
    std::weak_ptr<Connection> connection;
    uint64_t id = 0;
    const VramdServerApi* server = nullptr;
    void* cancel_token = nullptr;  // infer_async's; released with the context
    bool gpu_outputs = false;      // the host takes GPU outputs where they are
    // The host's DeviceAllocate memory the call reads in place, kept until its final result
    // even if the host frees it or ends.
    std::vector<std::shared_ptr<void>> inputs_held;
  };

  // Ends a call's context after its final result: out of the connection's table (where
  // InferCancel finds it), its cancel token released.
  static void EndInferContext(InferContext* ctx) {
    if (auto connection = ctx->connection.lock()) {
      MutexLock lock(connection->mu_);
      connection->infer_calls_.erase(ctx->id);
    }
    if (ctx->cancel_token != nullptr) ctx->server->infer_cancel_release(ctx->server->server, ctx->cancel_token);
    delete ctx;
  }

  static void OnInferResult(void* context, VramdInferResult* result, int32_t final) {
    auto* ctx = static_cast<InferContext*>(context);
    const VramdServerApi* s = ctx->server;
    try {
      const char* message = nullptr;
      VramdCode code = s->infer_result_error(s->server, result, &message);
      std::string text = message != nullptr ? message : "";
      struct Output {
        VramdTensor tensor{};
        int32_t gpu = -1;  // exported to the host from there; -1: in the frame
        memory::IpcExport ipc;
      };
      std::vector<Output> outputs;
      std::vector<std::vector<std::byte>> copies;  // GPU outputs that cross in host memory
      if (code == VRAMD_OK) {
        const size_t n = s->infer_result_output_count(s->server, result);
        copies.reserve(n);
        for (size_t i = 0; i < n && code == VRAMD_OK; ++i) {
          Output out;
          VramdMemory m{VRAMD_DEVICE_CPU, -1};
          VramdError error{};
          code = s->infer_result_output(s->server, result, i, &out.tensor, &m, &error);
          if (code == VRAMD_OK && m.kind == VRAMD_DEVICE_GPU && out.tensor.byte_size > 0) {
            // Pool memory exports (a cudaMalloc segment); what does not is copied to host.
            auto exported = ctx->gpu_outputs ? memory::ExportDeviceMemory(m.device_id, out.tensor.data)
                                             : Result<memory::IpcExport>(Status::Unavailable("host memory asked for"));
            if (exported.ok()) {
              out.gpu = m.device_id;
              out.ipc = *exported;
            } else {
              copies.emplace_back(out.tensor.byte_size);
              code = s->copy(s->server, VRAMD_DEVICE_CPU, -1, copies.back().data(), m.kind, m.device_id,
                             out.tensor.data, out.tensor.byte_size, nullptr, &error);
              out.tensor.data = copies.back().data();
            }
          }
          if (code != VRAMD_OK) text = error.message;
          outputs.push_back(out);
        }
      }
      const bool exported = code == VRAMD_OK && std::any_of(outputs.begin(), outputs.end(),
                                                            [](const Output& o) { return o.gpu >= 0; });
      auto connection = ctx->connection.lock();
      // The host maps the exported outputs: the result (their memory) is kept until it lets go.
      uint64_t held = 0;
      if (exported && connection != nullptr) {
        MutexLock lock(connection->mu_);
        held = connection->next_id_++;
        connection->held_results_[held] = result;
      }
      WireWriter w;
      w.U64(ctx->id);
      w.U8(final != 0 ? 1 : 0);
      w.U32(static_cast<uint32_t>(code));
      w.Str(text);
      w.Str(s->infer_result_parameters(s->server, result));
      w.U32(code == VRAMD_OK ? static_cast<uint32_t>(outputs.size()) : 0);
      if (code == VRAMD_OK) {
        for (const Output& o : outputs) {
          const VramdTensor& t = o.tensor;
          if (o.gpu >= 0) {
            EncodeGpuTensor(w, t.name, t.datatype, t.shape, t.rank, t.byte_size, o.gpu, o.ipc, 0);
          } else {
            EncodeTensor(w, t.name, t.datatype, t.shape, t.rank, t.data, t.byte_size);
          }
        }
      }
      w.U64(held);
      if (held == 0) s->infer_result_release(s->server, result);
      result = nullptr;
      if (connection != nullptr) {
        static_cast<void>(connection->peer_->Notify(MessageType::kInferResult, w.buffer()));
      }
    } catch (const std::exception& e) {
      spdlog::error("stub: forwarding a result of infer_async: {}", e.what());
      if (result != nullptr) s->infer_result_release(s->server, result);
    }
    if (final != 0) EndInferContext(ctx);
  }

  // A call's GPU input the host sent by reference, where it is in this process: in memory vramd
  // gave the host (kept for the call by `ctx`) or in the host's own export, opened here.
  Result<const void*> LocateGpuInput(const WireTensor& t, InferContext* ctx,
                                     std::vector<std::unique_ptr<memory::ImportedMemory>>* mappings)
      EXCLUDES(mu_) {
    if (t.device_allocation == 0) {
      auto mapped = memory::ImportedMemory::Open(t.gpu, t.ipc.handle);
      if (!mapped.ok()) {
        return mapped.status().WithContext(
            fmt::format("input '{}': opening the host's GPU {} memory", t.name, t.gpu));
      }
      const void* data = (*mapped)->base() + t.ipc.offset;
      mappings->push_back(std::move(mapped).value());
      return data;
    }
    MutexLock lock(mu_);
    auto it = device_memory_.find(t.device_allocation);
    if (it == device_memory_.end()) {
      return Status::InvalidArgument(fmt::format(
          "input '{}': GPU memory {} is not the host's", t.name, t.device_allocation));
    }
    const DeviceMemory& m = it->second;
    if (m.device != t.gpu || t.ipc.offset > m.size || t.byte_size > m.size - t.ipc.offset) {
      return Status::InvalidArgument(fmt::format(
          "input '{}': {} bytes at offset {} on GPU {} are not within its memory ({} bytes on GPU {})",
          t.name, t.byte_size, t.ipc.offset, t.gpu, m.size, m.device));
    }
    ctx->inputs_held.push_back(m.held);
    return static_cast<const std::byte*>(m.ptr) + t.ipc.offset;
  }

  Status OnInferAsync(uint64_t call, WireReader& r) {
    WireInferCall c = DecodeInferCall(r);
    VRAMD_RETURN_IF_ERROR(r.Finish());
    auto ctx = std::make_unique<InferContext>();
    ctx->connection = weak_from_this();
    ctx->id = c.context;
    ctx->server = server();
    ctx->gpu_outputs = c.preferred_kind == VRAMD_DEVICE_GPU;
    std::vector<VramdTensor> inputs;
    std::vector<VramdMemory> memory;
    // The host's own exports, opened for the call: vramd copies what they hold before
    // infer_async returns (inputs_outlive_call is not set), and they close before the reply.
    std::vector<std::unique_ptr<memory::ImportedMemory>> mappings;
    for (const WireTensor& t : c.inputs) {
      const void* data = t.data;
      if (t.gpu >= 0) {
        auto located = LocateGpuInput(t, ctx.get(), &mappings);
        if (!located.ok()) return Reply(call, located.status().WithContext("infer_async"));
        data = *located;
      }
      inputs.push_back(VramdTensor{t.name.c_str(), t.datatype, t.shape.data(), t.shape.size(), data, t.byte_size});
      memory.push_back(t.gpu >= 0 ? VramdMemory{VRAMD_DEVICE_GPU, t.gpu} : VramdMemory{VRAMD_DEVICE_CPU, -1});
    }
    std::vector<const char*> outputs;
    for (const std::string& s : c.requested_outputs) outputs.push_back(s.c_str());
    VramdInferCall v{};
    v.struct_size = sizeof v;
    v.model = c.model.c_str();
    v.version = c.version;
    v.id = c.id ? c.id->c_str() : nullptr;
    v.inputs = inputs.data();
    v.input_memory = memory.data();
    v.input_count = inputs.size();
    v.requested_outputs = outputs.data();
    v.requested_output_count = outputs.size();
    v.parameters_json = c.parameters_json ? c.parameters_json->c_str() : nullptr;
    v.flags = c.flags;
    v.correlation_id = c.correlation_id;
    v.correlation_id_string = c.correlation_id_string ? c.correlation_id_string->c_str() : nullptr;
    v.timeout_us = c.timeout_us;
    v.preferred_output_memory = ctx->gpu_outputs ? VramdMemory{VRAMD_DEVICE_GPU, c.preferred_device}
                                                 : VramdMemory{VRAMD_DEVICE_CPU, -1};
    v.decoupled = c.decoupled;
    v.parent_owner = c.parent_owner;
    v.traceparent = c.traceparent ? c.traceparent->c_str() : nullptr;
    // Inputs in the frame go with the frame, when this returns: vramd copies them.
    const bool all_kept = std::all_of(c.inputs.begin(), c.inputs.end(), [](const WireTensor& t) {
      return t.gpu >= 0 && t.device_allocation != 0;
    });
    v.inputs_outlive_call = c.inputs_outlive_call && all_kept ? 1 : 0;
    InferContext* context = ctx.release();  // ended by the final result (EndInferContext)
    v.cancel_token = &context->cancel_token;
    {
      // In the table before the call may run (its final result may come before infer_async
      // returns, and takes it out).
      MutexLock lock(mu_);
      infer_calls_[c.context] = context;
    }
    VramdError error{};
    const VramdCode code = server()->infer_async(server()->server, &v, &OnInferResult, context, &error);
    if (code != VRAMD_OK) EndInferContext(context);  // refused: no result comes
    for (const auto& mapping : mappings) static_cast<void>(memory::SynchronizeDevice(mapping->ordinal()));
    mappings.clear();
    return Reply(call, abi::FromVramd(code, error, ""));
  }

  const StubOptions& options_;  // the stub's, which outlives its connections
  const pid_t pid_;
  std::atomic<bool> dead_{false};
  HostProcess process_;  // reaped by the reader when the conversation ends
  const ClosedCallback on_closed_;
  std::unique_ptr<Worker> slow_ = std::make_unique<Worker>();  // model control calls, which block

  Mutex mu_;
  uint64_t next_id_ GUARDED_BY(mu_) = 1;
  std::map<uint64_t, Owed> responders_ GUARDED_BY(mu_);
  std::map<uint64_t, void*> families_ GUARDED_BY(mu_);
  std::map<uint64_t, void*> metrics_ GUARDED_BY(mu_);
  std::map<uint64_t, DeviceMemory> device_memory_ GUARDED_BY(mu_);  // DeviceAllocate's, by id
  // infer_async calls not yet at their final result, by the host's id for them (InferCancel).
  std::map<uint64_t, InferContext*> infer_calls_ GUARDED_BY(mu_);
  // infer_async results whose GPU outputs the host maps, kept until its InferResultRelease.
  std::map<uint64_t, VramdInferResult*> held_results_ GUARDED_BY(mu_);
  // In the memory report's list of hosts (NVML per PID) while the process lives.
  std::unique_ptr<memory::HostedProcesses::Registration> hosted_ GUARDED_BY(mu_);
  std::optional<std::string> hang_ GUARDED_BY(mu_);  // set when a call ran past its timeout
  std::condition_variable_any owed_changed_;          // a deadline moved earlier; with mu_
  uint64_t owed_changes_ GUARDED_BY(mu_) = 0;

  std::unique_ptr<Peer> peer_;  // its reader stops before the rest goes
  std::jthread watchdog_;  // Watch, when there is a call timeout; stopped first
};

// ---- Stub ----

Stub::Stub(StubOptions options) : options_(std::move(options)) {
  supervisor_ = std::thread([this] { Supervise(); });
}

Result<std::shared_ptr<Stub>> Stub::Start(StubOptions options) {
  std::shared_ptr<Stub> stub(new Stub(std::move(options)));
  MutexLock lock(stub->mu_);
  lock.Wait(stub->changed_, [&]() REQUIRES(stub->mu_) { return stub->started_; });
  if (!stub->start_status_.ok()) {
    Status failed = stub->start_status_;
    lock.Unlock();
    return failed;
  }
  return stub;
}

Stub::~Stub() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
    changed_.notify_all();
  }
  supervisor_.join();
}

uint64_t Stub::TotalRestarts() { return g_total_restarts.load(); }

pid_t Stub::pid() const {
  MutexLock lock(mu_);
  return connection_ != nullptr && !connection_dead_ ? connection_->pid() : -1;
}

uint64_t Stub::restarts() const {
  MutexLock lock(mu_);
  return restarts_;
}

void Stub::OnConnectionClosed(const Connection* connection) {
  MutexLock lock(mu_);
  if (connection_.get() == connection) {
    connection_dead_ = true;
    changed_.notify_all();
  }
}

Status Stub::Available() const { return Serving().status(); }

Result<std::shared_ptr<Connection>> Stub::Serving() const {
  MutexLock lock(mu_);
  if (connection_ == nullptr || connection_dead_) {
    return Status::Unavailable(fmt::format("stub for {} is restarting", options_.label));
  }
  return connection_;
}

Result<std::optional<std::string>> Stub::AutoComplete(const StubOptions& options) {
  VRAMD_ASSIGN_OR_RETURN(auto connection, Connection::Open(options, [](const Connection*) {}));
  WireWriter model;
  EncodeModelInfo(model, options.model);
  auto reply = connection->CallStatus(MessageType::kAutoCompleteConfig, model.buffer());
  if (auto unclean = connection->Close(); unclean.has_value() && reply.ok()) {
    spdlog::warn("stub for {} (pid {}) {} after completing the config", options.label,
                 connection->pid(), *unclean);
  }
  if (!reply.ok()) {
    if (connection->dead() && reply.status().code() == StatusCode::kUnavailable) return reply.status();
    return reply.status().WithContext(fmt::format("backend '{}'", options.backend_name));
  }
  WireReader r(reply->data(), reply->size(), "AutoCompleteConfig reply");
  static_cast<void>(DecodeStatus(r));  // OK: CallStatus checked it
  const bool completed = r.U8("completed") != 0;
  std::string json(r.Str("config"));
  VRAMD_RETURN_IF_ERROR(r.Finish());
  if (!completed) return std::optional<std::string>();
  return std::optional<std::string>(std::move(json));
}

Result<std::shared_ptr<Connection>> Stub::Launch(bool with_instances) {
  VRAMD_ASSIGN_OR_RETURN(auto connection,
                         Connection::Open(options_, [this](const Connection* c) { OnConnectionClosed(c); }));
  const std::string backend = fmt::format("backend '{}'", options_.backend_name);
  WireWriter model;
  EncodeModelInfo(model, options_.model);
  auto created = connection->CallStatus(MessageType::kModelCreate, model.buffer());
  if (!created.ok()) {
    connection->Close();
    // A process that died says so (the reason names the stub); a model_create error is the library's.
    if (connection->dead() && created.status().code() == StatusCode::kUnavailable) return created.status();
    return created.status().WithContext(backend);
  }
  if (with_instances) {
    std::map<uint32_t, WireInstanceInfo> instances;
    {
      MutexLock lock(mu_);
      instances = instances_;
    }
    for (const auto& [slot, info] : instances) {
      WireWriter w;
      EncodeInstanceInfo(w, info);
      auto made = connection->CallStatus(MessageType::kInstanceCreate, w.buffer());
      if (!made.ok()) {
        connection->Close();
        return made.status().WithContext(fmt::format("{}: creating instance '{}' again", backend, info.name));
      }
    }
  }
  return connection;
}

void Stub::Supervise() {
  auto first = Launch(false);
  {
    MutexLock lock(mu_);
    started_ = true;
    start_status_ = first.ok() ? Status::Ok() : first.status();
    if (first.ok()) {
      // Moved, not copied: a copy kept here would keep the first process's descriptors and
      // threads until the stub goes, however long ago that process died.
      connection_ = std::move(*first);
      connection_dead_ = connection_->dead();
    }
    changed_.notify_all();
  }
  if (!first.ok()) return;
  std::chrono::milliseconds backoff = kFirstBackoff;
  while (true) {
    std::shared_ptr<Connection> dead;
    uint64_t restart;
    {
      MutexLock lock(mu_);
      lock.Wait(changed_, [this]() REQUIRES(mu_) { return stopping_ || connection_dead_; });
      if (stopping_) break;
      dead = std::move(connection_);
      connection_dead_ = false;
      restart = ++restarts_;
    }
    ++g_total_restarts;
    const Status reason = dead != nullptr ? dead->WaitClosed()
                                          : Status::Unavailable(fmt::format("stub for {} did not start", options_.label));
    dead.reset();  // joins its reader (ended already)
    spdlog::warn("{}; restarting it (restart {} of this stub, {} in all)", reason.message(), restart,
                 g_total_restarts.load());
    {
      MutexLock lock(mu_);
      const auto until = std::chrono::steady_clock::now() + backoff;
      lock.WaitUntil(changed_, until, [this]() REQUIRES(mu_) { return stopping_; });
      if (stopping_) break;
    }
    auto next = Launch(true);
    MutexLock lock(mu_);
    if (!next.ok()) {
      spdlog::error("stub for {} could not be restarted: {}", options_.label, next.status().message());
      backoff = std::min(backoff * 2, kLastBackoff);
      connection_dead_ = true;  // try again
      continue;
    }
    backoff = kFirstBackoff;
    connection_ = *next;
    connection_dead_ = (*next)->dead();
    if (!connection_dead_) spdlog::info("stub for {} serves again (pid {})", options_.label, (*next)->pid());
  }
  // Stopping: model_destroy in a live process, then its end of stream makes it exit.
  std::shared_ptr<Connection> last;
  {
    MutexLock lock(mu_);
    last = std::move(connection_);
  }
  if (last != nullptr) {
    // A process that died while serving was reported when it did (Restart).
    const bool serving = !last->dead();
    if (serving) {
      auto destroyed = last->CallStatus(MessageType::kModelDestroy, "");
      if (!destroyed.ok()) {
        spdlog::warn("stub for {}: model_destroy: {}", options_.label, destroyed.status().message());
      }
    }
    if (auto unclean = last->Close(); serving && unclean.has_value()) {
      spdlog::warn("stub for {} (pid {}) {} after its model was destroyed", options_.label,
                   last->pid(), *unclean);
    }
  }
}

Result<uint32_t> Stub::AddInstance(WireInstanceInfo info) {
  uint32_t slot;
  {
    MutexLock lock(mu_);
    slot = next_slot_++;
    info.slot = slot;
  }
  VRAMD_ASSIGN_OR_RETURN(auto connection, Serving());
  {
    MutexLock lock(mu_);
    instances_[slot] = info;
  }
  WireWriter w;
  EncodeInstanceInfo(w, info);
  auto made = connection->CallStatus(MessageType::kInstanceCreate, w.buffer());
  if (!made.ok()) {
    MutexLock lock(mu_);
    instances_.erase(slot);
    if (connection->dead() && made.status().code() == StatusCode::kUnavailable) return made.status();
    return made.status().WithContext(fmt::format("backend '{}'", options_.backend_name));
  }
  return slot;
}

void Stub::RemoveInstance(uint32_t slot) {
  {
    MutexLock lock(mu_);
    instances_.erase(slot);
  }
  auto connection = Serving();
  if (!connection.ok()) return;  // a new process will not create it
  WireWriter w;
  w.U32(slot);
  static_cast<void>((*connection)->CallStatus(MessageType::kInstanceDestroy, w.buffer()));
}

Status Stub::Execute(uint32_t slot, const InferRequest& request, std::vector<Tensor>* outputs) {
  VRAMD_ASSIGN_OR_RETURN(auto connection, Serving());
  abi::RequestView view;
  abi::ViewRequest(request, &view);
  WireWriter w;
  w.U32(slot);
  VRAMD_RETURN_IF_ERROR(EncodeRequest(w, view.request, 0));
  auto reply = connection->CallStatus(MessageType::kExecute, w.buffer());
  if (!reply.ok()) {
    if (connection->dead() && reply.status().code() == StatusCode::kUnavailable) return reply.status();
    return reply.status().WithContext(fmt::format("backend '{}'", options_.backend_name));
  }
  WireReader r(reply->data(), reply->size(), "Execute reply");
  static_cast<void>(DecodeStatus(r));
  std::vector<WireTensor> tensors = DecodeTensors(r);
  VRAMD_RETURN_IF_ERROR(r.Finish().WithContext(options_.label));
  const size_t first = outputs->size();
  for (const WireTensor& t : tensors) {
    if (t.gpu >= 0) {  // outputs->add is host memory only
      outputs->resize(first);
      return Status::Internal(fmt::format("{}: output '{}' came on GPU {} from execute",
                                          options_.label, t.name, t.gpu));
    }
    auto added = abi::AppendHostOutput(outputs, first, "outputs->add", t.name.c_str(), t.datatype,
                                       t.shape.data(), t.shape.size(), t.byte_size);
    if (!added.ok()) {
      outputs->resize(first);
      return added.status().WithContext(fmt::format("backend '{}'", options_.backend_name));
    }
    if (t.byte_size > 0) std::memcpy(*added, t.data, t.byte_size);
  }
  return Status::Ok();
}

Status Stub::ExecuteRequests(uint32_t slot, std::span<const ListedRequest> requests) {
  VRAMD_ASSIGN_OR_RETURN(auto connection, Serving());
  std::vector<uint64_t> ids;
  WireWriter w;
  w.U32(slot);
  w.U32(static_cast<uint32_t>(requests.size()));
  Status encoded;
  StagedInputs staged(options_.server);  // after the call: declared before its reply
  for (const ListedRequest& listed : requests) {
    ids.push_back(connection->AddResponder(listed.responder, listed.request->id));
    abi::RequestView view;
    abi::ViewRequest(*listed.request, &view);
    // A consumer that takes GPU outputs may get the host's: charged to the request, as an
    // in-process backend's (the owner opens only then).
    if (listed.request->output_gpu != kOnHost) view.request.owner = listed.OpenOwner();
    encoded = staged.MakeExportable(&view.request, &view.inputs);
    if (encoded.ok()) encoded = EncodeRequest(w, view.request, ids.back());
    if (!encoded.ok()) break;
  }
  if (!encoded.ok()) {
    // Handed back unsent: the runtime answers them with the error.
    for (uint64_t id : ids) connection->DropResponder(id);
    return encoded.WithContext(options_.label);
  }
  auto reply = connection->CallStatus(MessageType::kExecuteRequests, w.buffer());
  if (reply.ok()) {
    connection->Owe(ids);
    return Status::Ok();
  }
  // Handed back: the runtime answers what is not complete (a dead process's requests are
  // answered already, with how it ended).
  for (uint64_t id : ids) connection->DropResponder(id);
  if (connection->dead() && reply.status().code() == StatusCode::kUnavailable) return reply.status();
  return reply.status().WithContext(fmt::format("backend '{}'", options_.backend_name));
}

Status Stub::Ready(uint32_t slot) {
  VRAMD_ASSIGN_OR_RETURN(auto connection, Serving());
  WireWriter w;
  w.U32(slot);
  auto reply = connection->CallStatus(MessageType::kInstanceReady, w.buffer());
  if (reply.ok()) return Status::Ok();
  if (connection->dead() && reply.status().code() == StatusCode::kUnavailable) return reply.status();
  return reply.status().WithContext(fmt::format("backend '{}'", options_.backend_name));
}

}  // namespace vramd::backends::remote
