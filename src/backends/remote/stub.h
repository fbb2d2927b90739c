// Stub: one backend host process (vramd_backend_host) serving one model for vramd, restarted
// when it dies. It runs model_create once per process, then instance_create for each instance
// it holds (remote/hosting.h puts all of a model's instances on one device into one stub, or
// one instance into each), and forwards execute / execute_requests. The host's calls back (log,
// respond, is_cancelled, infer_async and its results, model control, metrics) are performed on
// the server table it was given (abi::ServerApi's), and respond straight on the runtime's
// Responder.
//
// Faults (item 8 of issue 14): when the process exits or is killed (end of stream on its
// socket), or sends a frame that fails the checks (it is then killed), every call waiting on it
// fails and every request it had not completed is answered with an Unavailable error naming the
// model and how the process ended ("was killed by signal 9 (Killed)"). The stub then counts a
// restart (restarts(), logged as a warning) and starts a new process on its supervisor thread,
// re-running model_create and every instance_create, after a back-off that grows from 100 ms to
// 5 s while restarts keep failing. Until it serves again, execute fails at once with
// Unavailable "stub for model 'X' is restarting", and Available() and Ready() say the same (the
// model reads not ready).
//
// Hangs: every call into the process (model_create, instance_create, execute,
// execute_requests, instance_ready, the destroys) has StubOptions::call_timeout to return. A
// process that lets one run past it is hung: it is killed with SIGKILL and ends as a killed
// process does (above), except that what its requests and calls get says so: "stub for ...
// (pid N) hung: execute_requests did not return within T ms ..., so it was killed". A request
// whose execute_requests returned may still be answered later (a decoupled model streams its
// responses after the call); that is not a hung process, whose calls still return, but a
// request the host may have dropped: a request that gets no response for call_timeout after
// its call returned (or after its last response) is ended with an Unavailable error saying so,
// and the process is left alone. Without that, a lost request would wait forever.
//
// Nothing outlives the process: its tensors cross in memfd segments (channel.h), so there is no
// named shared memory to clean up, and the host's memory is not charged to vramd's ledger.
//
// Thread safety: every method is safe from any thread. The destructor runs model_destroy (when
// the process is up) and reaps the process; REQUIRES: every instance was removed.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "backends/backend.h"
#include "backends/remote/messages.h"
#include "core/mutex.h"
#include "core/status.h"
#include "vramd/backend.h"

namespace vramd::backends::remote {

class Connection;  // stub.cc: one process and its conversation

// Long enough for any call a client still waits for (HTTP clients and proxies give up after
// about 60 s by default) and for an instance_create that loads weights, short enough that a
// hung host is replaced within minutes instead of never (hosting.h: VRAMD_STUB_CALL_TIMEOUT_MS).
inline constexpr std::chrono::milliseconds kDefaultCallTimeout{300000};

struct StubOptions {
  std::filesystem::path host_executable;
  std::filesystem::path library;
  std::string backend_name;  // library errors are prefixed "backend '<name>': ", as AbiBackend's
  // Names the stub in messages: "model 'm' version 1 (GPU 0)".
  std::string label;
  // "NAME=value" entries for the host's environment (remote/execution_env.h).
  std::vector<std::string> environment;
  WireModelInfo model;
  // The server table the host's calls are performed on; outlives the stub.
  const VramdServerApi* server = nullptr;
  // How long a process gets to exit after model_destroy before it is killed.
  std::chrono::milliseconds exit_grace{5000};
  // How long a call into the process may take before the process counts as hung (above); 0 for
  // no limit (Triton's behaviour).
  std::chrono::milliseconds call_timeout = kDefaultCallTimeout;
};

class Stub {
 public:
  // Starts the process and runs model_create in it; its error is the model_create's (or why the
  // process could not start).
  static Result<std::shared_ptr<Stub>> Start(StubOptions options);
  ~Stub();
  Stub(const Stub&) = delete;
  Stub& operator=(const Stub&) = delete;

  // instance_create in the process; the slot names the instance in the calls below and is kept
  // across restarts (the instance is created again in a new process).
  Result<uint32_t> AddInstance(WireInstanceInfo info) EXCLUDES(mu_);
  void RemoveInstance(uint32_t slot) EXCLUDES(mu_);

  Status Execute(uint32_t slot, const InferRequest& request, std::vector<Tensor>* outputs)
      EXCLUDES(mu_);
  Status ExecuteRequests(uint32_t slot, std::span<const ListedRequest> requests) EXCLUDES(mu_);
  // The library's instance_ready for the instance in `slot` (OK when the library has none), or
  // why the stub cannot ask (restarting).
  Status Ready(uint32_t slot) EXCLUDES(mu_);
  // OK while a process serves; Unavailable "stub for ... is restarting" otherwise. Asks the
  // process nothing, so it never blocks.
  Status Available() const EXCLUDES(mu_);

  // The serving process's pid (-1 while restarting), and how many times it was restarted.
  pid_t pid() const EXCLUDES(mu_);
  uint64_t restarts() const EXCLUDES(mu_);
  const std::string& label() const { return options_.label; }

  // Restarts of every stub of this process, for the metrics endpoint and tests.
  static uint64_t TotalRestarts();

  // The library's auto_complete_config for options.model (its config_json), in a host process
  // started for this call alone and ended after it (with options' environment, so a model.py
  // that imports what only its EXECUTION_ENV_PATH has is completed as it will be served): the
  // completed config JSON, nullopt when the library kept the config. Its error is the
  // library's, or why the process could not start or ended; a call past options.call_timeout
  // kills the process, as any call.
  static Result<std::optional<std::string>> AutoComplete(const StubOptions& options);

 private:
  explicit Stub(StubOptions options);
  void Supervise() EXCLUDES(mu_);
  // A new process with model_create (and, on a restart, every instance) done; on the
  // supervisor thread only.
  Result<std::shared_ptr<Connection>> Launch(bool with_instances) EXCLUDES(mu_);
  void OnConnectionClosed(const Connection* connection) EXCLUDES(mu_);
  Result<std::shared_ptr<Connection>> Serving() const EXCLUDES(mu_);

  const StubOptions options_;

  mutable Mutex mu_;
  std::condition_variable changed_;
  std::shared_ptr<Connection> connection_ GUARDED_BY(mu_);  // null while restarting
  bool connection_dead_ GUARDED_BY(mu_) = false;
  bool stopping_ GUARDED_BY(mu_) = false;
  bool started_ GUARDED_BY(mu_) = false;  // the first Launch finished (start_status_ is set)
  Status start_status_ GUARDED_BY(mu_);
  uint64_t restarts_ GUARDED_BY(mu_) = 0;
  uint32_t next_slot_ GUARDED_BY(mu_) = 1;
  std::map<uint32_t, WireInstanceInfo> instances_ GUARDED_BY(mu_);

  std::thread supervisor_;  // last: starts once the state above exists
};

}  // namespace vramd::backends::remote
