/* vramd backend C ABI, version 1.
 *
 * A backend is a shared library, <backend-directory>/<name>/libvramd_<name>.so, that exports one
 * function, vramd_backend_get_api(), returning a table of the backend's entry points. vramd
 * loads the library the first time a model's config asks for backend <name> (platform
 * "pytorch_libtorch" asks for "pytorch"), checks the table's ABI version, and calls:
 *
 *   model_create      once per model version: read files, load weights (charged to the version)
 *   instance_create   once per instance of the instance_group: streams, workspaces
 *   execute           one call per batch (the runtime has already joined the batch's requests
 *                     along dimension 0 when the config has max_batch_size > 0)
 *   instance_destroy  before model_destroy, for every instance
 *   model_destroy     once, after every instance is gone
 *
 * Errors are values: every entry point that can fail returns a VramdCode and, on failure, writes
 * a message into the VramdError it was given. A backend must never let a C++ exception cross
 * this boundary (catch everything in each entry point) and must never abort the process: vramd
 * turns a failed model_create into a failed load of that model only, and a failed execute into
 * an error response for the requests of that batch.
 *
 * Memory: device and host memory a backend keeps should come from VramdServerApi::allocate, so
 * vramd's ledger knows who holds it; what an owner still holds when it closes is reported as a
 * leak naming it. The owners: VramdModelInfo::owner (the version), VramdInstanceInfo::owner
 * (the instance), VramdRequest::owner (the request being executed: its scratch memory).
 *
 * Load timing: VramdServerApi::record_load_phase (appended within version 1; check struct_size)
 * adds a phase's seconds and bytes to the load in progress, while model_create or
 * instance_create runs.
 *
 * Moving a charge: VramdServerApi::recharge (appended within version 1; check struct_size)
 * moves a live allocation to another owner.
 *
 * Execution thread: VramdBackendApi::execute_on_instance_threads (appended within version 1;
 * vramd reads it only when the table's struct_size covers it) asks vramd to run every execute
 * on the instance's own thread, for frameworks that keep state per thread.
 *
 * Request lists (appended within version 1): a table whose execute_requests is set receives the
 * scheduler's requests unjoined and answers each through VramdServerApi::respond, once or, for
 * a decoupled model (model_transaction_policy { decoupled: true }), several times, also after
 * the call returned. VramdRequest then also carries the request's parameters, requested output
 * names, flags and correlation id; VramdServerApi adds copies between memory kinds, calls into
 * other models (infer_async; appended later, their cancellation: infer_cancel), model control
 * and custom metrics.
 *
 * GPU tensors (appended within version 1): a backend that sets accepts_gpu_inputs receives
 * inputs where they are (VramdRequest::input_memory says; otherwise vramd moves them to host
 * first), and may add a response's outputs in GPU memory (response_add_output, or
 * VramdOutputs::add_on_device, with a GPU kind; VramdRequest::preferred_output_memory says where the request's consumer takes them, and vramd
 * moves to host what a consumer cannot take). A BLS call whose caller keeps its inputs
 * (VramdInferCall::inputs_outlive_call) is read in place, with no copy.
 *
 * Sleeping models (appended within version 1): VramdBackendApi::model_sleep and model_wake
 * give a model's device memory back while it is idle and bring it back on demand.
 *
 * Readiness and auto-complete (appended within version 1): VramdBackendApi::instance_ready
 * answers whether an instance can serve (the model ready endpoint), and
 * VramdBackendApi::auto_complete_config completes a config before it is validated.
 *
 * vramd's own backends (identity, add_sub, mlp) are linked into the server but implement this
 * same ABI and are reached through the same table; only how the table is found differs.
 *
 * Threads: model_create, model_destroy and instance_create / instance_destroy may run on any
 * thread; one instance's execute calls never overlap (an instance is one thread's at a time);
 * different instances execute concurrently. Unless the table sets execute_on_instance_threads,
 * an execute may run on the thread that received the request (an idle instance serves it there,
 * saving two thread hand-offs), so one instance's calls may come from different threads.
 * VramdServerApi functions are safe from any thread.
 *
 * Versioning: VRAMD_BACKEND_ABI_VERSION changes whenever any struct or signature here changes
 * incompatibly. vramd refuses a library whose table says another version, naming both. Structs
 * start with their own size so that fields may be appended compatibly within a version.
 */
#ifndef VRAMD_BACKEND_H_
#define VRAMD_BACKEND_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define VRAMD_BACKEND_ABI_VERSION 1u

/* The symbol every backend library exports. */
#define VRAMD_BACKEND_ENTRY_POINT "vramd_backend_get_api"

typedef enum VramdCode {
  VRAMD_OK = 0,
  VRAMD_INVALID_ARGUMENT = 1,  /* a config or request the backend cannot serve */
  VRAMD_NOT_FOUND = 2,         /* a model file or tensor that is missing */
  VRAMD_UNAVAILABLE = 3,       /* a device or resource not available now */
  VRAMD_UNSUPPORTED = 4,       /* a feature this backend does not have */
  VRAMD_RESOURCE_EXHAUSTED = 5,/* out of memory */
  VRAMD_INTERNAL = 6,          /* anything else, including a caught exception */
  /* Appended within version 1 (an older server names them as unknown codes): Triton's
   * TRITONSERVER_Error codes that had no VramdCode, for backends that relay a model's own
   * error code (the python backend's TritonError). */
  VRAMD_ALREADY_EXISTS = 7,
  VRAMD_CANCELLED = 8,
  VRAMD_UNKNOWN = 9
} VramdCode;

/* Where an entry point explains a failure: a NUL-terminated message, truncated to fit. */
#define VRAMD_ERROR_MESSAGE_SIZE 1024
typedef struct VramdError {
  char message[VRAMD_ERROR_MESSAGE_SIZE];
} VramdError;

/* Tensor element types; the values are vramd's (and the KServe wire names in comments). */
typedef enum VramdDataType {
  VRAMD_TYPE_INVALID = 0,
  VRAMD_TYPE_BOOL = 1,    /* BOOL */
  VRAMD_TYPE_UINT8 = 2,   /* UINT8 */
  VRAMD_TYPE_UINT16 = 3,  /* UINT16 */
  VRAMD_TYPE_UINT32 = 4,  /* UINT32 */
  VRAMD_TYPE_UINT64 = 5,  /* UINT64 */
  VRAMD_TYPE_INT8 = 6,    /* INT8 */
  VRAMD_TYPE_INT16 = 7,   /* INT16 */
  VRAMD_TYPE_INT32 = 8,   /* INT32 */
  VRAMD_TYPE_INT64 = 9,   /* INT64 */
  VRAMD_TYPE_FP16 = 10,   /* FP16 */
  VRAMD_TYPE_FP32 = 11,   /* FP32 */
  VRAMD_TYPE_FP64 = 12,   /* FP64 */
  VRAMD_TYPE_BYTES = 13,  /* BYTES: each element a 4-byte little-endian length, then the bytes */
  VRAMD_TYPE_BF16 = 14    /* BF16 */
} VramdDataType;

typedef enum VramdDeviceKind {
  VRAMD_DEVICE_CPU = 0,        /* ordinary host memory */
  VRAMD_DEVICE_GPU = 1,        /* device memory of CUDA device `device_id` */
  VRAMD_DEVICE_CUDA_HOST = 2   /* page-locked host memory, for fast copies to a GPU */
} VramdDeviceKind;

typedef enum VramdLogLevel {
  VRAMD_LOG_ERROR = 0,
  VRAMD_LOG_WARNING = 1,
  VRAMD_LOG_INFO = 2,
  VRAMD_LOG_VERBOSE = 3
} VramdLogLevel;

/* A ledger owner: who is charged for an allocation. */
typedef uint64_t VramdOwner;

/* Request flags (VramdRequest::flags), Triton's TRITONSERVER_RequestFlag values. */
#define VRAMD_REQUEST_FLAG_SEQUENCE_START 1u
#define VRAMD_REQUEST_FLAG_SEQUENCE_END 2u

/* Response flags (VramdServerApi::respond), Triton's TRITONSERVER_ResponseCompleteFlag. */
#define VRAMD_RESPONSE_FLAG_FINAL 1u

/* Opaque handles of the request-list interface (execute_requests, below):
 *   VramdResponder  how one request is answered; valid from execute_requests until the
 *                   respond call that carries VRAMD_RESPONSE_FLAG_FINAL returns;
 *   VramdResponse   one response being built; owned by the backend until respond takes it
 *                   (or response_delete drops it);
 *   VramdInferResult one response of a call into another model (infer_async), owned by the
 *                   backend until infer_result_release. */
typedef struct VramdResponder VramdResponder;
typedef struct VramdResponse VramdResponse;
typedef struct VramdInferResult VramdInferResult;
struct VramdTensor;
struct VramdInferCall;
typedef struct VramdMemory VramdMemory;

/* What vramd offers a backend. Valid from model_create until model_destroy returns. */
/* One file of a model loaded with its files (VramdServerApi::load_model_files). */
typedef struct VramdModelFile {
  const char* path; /* relative to the model's directory, NUL-terminated */
  const void* data;
  size_t size;
} VramdModelFile;

typedef struct VramdServerApi {
  size_t struct_size;
  uint32_t abi_version;
  void* server; /* pass back as the first argument */
  void (*log)(void* server, VramdLogLevel level, const char* message);
  /* `size` bytes on a device, charged to `owner`; aligned to at least 256 bytes. GPU memory is
   * stream-ordered on `stream` (a cudaStream_t, or NULL for the default stream). */
  VramdCode (*allocate)(void* server, VramdOwner owner, VramdDeviceKind kind, int32_t device_id,
                        size_t size, void* stream, void** out, VramdError* error);
  /* Frees what allocate returned (exactly once). */
  void (*free)(void* server, VramdDeviceKind kind, int32_t device_id, void* ptr);

  /* Appended within version 1: present when struct_size > offsetof(VramdServerApi,
   * record_load_phase) (a backend must check; older servers pass a shorter struct).
   * Adds `seconds` and `bytes` to phase `phase` of the load in progress: a phase recorded twice
   * accumulates. It counts only while model_create or instance_create runs (a device's first
   * instance may upload weights); at any other time it is ignored, as it is when the server
   * keeps no timing. vramd's phase names: "file_read" (bytes read), "host_stage" (host images
   * prepared for upload), "h2d" (host-to-device copies of weights), "d2d" (copies between
   * devices); a backend may add its own. */
  void (*record_load_phase)(void* server, const char* phase, double seconds, uint64_t bytes);

  /* Appended within version 1: present when struct_size > offsetof(VramdServerApi, recharge)
   * (a backend must check). Charges the live allocation `ptr` (from allocate, not yet freed)
   * to `owner` from now on instead of the owner it was made for: for memory that outlives its
   * owner by design, e.g. a framework's state kept in a model shared by instances, made while
   * one instance executed, which would otherwise be reported as that instance's leak when it
   * goes. VRAMD_NOT_FOUND when `ptr` is not a live allocation. */
  VramdCode (*recharge)(void* server, void* ptr, VramdOwner owner, VramdError* error);

  /* ---- Appended within version 1: the request-list interface (present when struct_size
   * covers `respond` and what follows; a backend that sets execute_requests must check, and
   * fail model_create naming the server as too old otherwise). ---- */

  /* Starts an empty response to the request `responder` answers. */
  VramdCode (*response_create)(void* server, VramdResponder* responder, VramdResponse** response,
                               VramdError* error);
  /* Adds output `name` to `response`: `byte_size` bytes of `kind` memory (device `device_id`
   * for a GPU) that the backend fills before it sends the response; *data receives them. A
   * fixed-size datatype's byte_size must equal its shape's; a name may be added once. GPU
   * memory (older servers refuse it with VRAMD_UNSUPPORTED) comes from vramd's pool of that
   * device, charged to the request, and is stream-ordered on the legacy default stream: a
   * backend that fills it on a stream of its own completes that work before it responds.
   * vramd copies it to host for a consumer that takes host memory (a client of a front end, a
   * BLS call that prefers the CPU, a decoupled model's streamed responses). */
  VramdCode (*response_add_output)(void* server, VramdResponse* response, const char* name,
                                   VramdDataType datatype, const int64_t* shape, size_t rank,
                                   size_t byte_size, VramdDeviceKind kind, int32_t device_id,
                                   void** data, VramdError* error);
  /* The response's parameters: a JSON object whose values are bool, integer, double or string
   * (Triton's response parameters); replaces any set before. */
  VramdCode (*response_set_parameters)(void* server, VramdResponse* response, const char* json,
                                       size_t json_size, VramdError* error);
  /* Drops a response that will not be sent. */
  void (*response_delete)(void* server, VramdResponse* response);
  /* Answers the request: with `response` (taken in every case; NULL: no response, only flags)
   * when `code` is VRAMD_OK, else with an error response of `code` and `message` (`response`,
   * if any, is dropped). With VRAMD_RESPONSE_FLAG_FINAL in `flags` the request is complete and
   * `responder` is gone when respond returns. Triton's rules, whose violations respond refuses
   * (VRAMD_INVALID_ARGUMENT, naming the rule; nothing is sent):
   *   - nothing after the final flag (the responder is gone: a use is the backend's bug);
   *   - a model that is not decoupled sends exactly one response, data or error, with or
   *     before the final flag; a final flag alone before any response is refused, as is a
   *     second response;
   *   - a decoupled model sends any number of responses, then the final flag (alone or with
   *     the last response); an error response does not end the request by itself.
   * Outputs the request did not ask for are dropped by vramd. Safe from any thread, also after
   * execute_requests returned (responses sent later). */
  VramdCode (*respond)(void* server, VramdResponder* responder, VramdResponse* response,
                       VramdCode code, const char* message, uint32_t flags, VramdError* error);
  /* Non-zero once the client gave up on the request (it disconnected, or cancelled it). */
  int32_t (*is_cancelled)(void* server, VramdResponder* responder);

  /* Copies `size` bytes between any two kinds of memory (host, pinned host, a GPU), ordered on
   * `stream` (a cudaStream_t, or NULL) and complete when it returns: so that a backend need not
   * link CUDA to move a framework's device tensor into a response. */
  VramdCode (*copy)(void* server, VramdDeviceKind dst_kind, int32_t dst_device, void* dst,
                    VramdDeviceKind src_kind, int32_t src_device, const void* src, size_t size,
                    void* stream, VramdError* error);

  /* Runs a request on another model this server serves (Triton's BLS), through the same
   * request path as a client's: the call's inputs are read before infer_async returns, and
   * `on_result` then receives each response (one for a model that is not decoupled; any number
   * for a decoupled one), the last with `final` non-zero, on a server thread, possibly before
   * infer_async returns. `result` carries the response's outputs, or its error; the backend
   * owns it until infer_result_release (it may keep it after on_result returns). A request
   * that cannot start (unknown model, invalid inputs) is answered through on_result, once,
   * final, with its error: infer_async itself fails only for a malformed call. */
  VramdCode (*infer_async)(void* server, const struct VramdInferCall* call,
                           void (*on_result)(void* context, VramdInferResult* result,
                                             int32_t final),
                           void* context, VramdError* error);
  /* A result's error: VRAMD_OK when it carries outputs; else its code, and *message (owned by
   * the result) the error's text. */
  VramdCode (*infer_result_error)(void* server, const VramdInferResult* result,
                                  const char** message);
  /* The result's outputs: count, and output `index` (memory owned by the result). */
  size_t (*infer_result_output_count)(void* server, const VramdInferResult* result);
  VramdCode (*infer_result_output)(void* server, const VramdInferResult* result, size_t index,
                                   struct VramdTensor* tensor, VramdMemory* memory,
                                   VramdError* error);
  /* The result's parameters as a JSON object ("{}" when none), owned by the result. */
  const char* (*infer_result_parameters)(void* server, const VramdInferResult* result);
  void (*infer_result_release)(void* server, VramdInferResult* result);

  /* Model control (Triton's explicit mode): load (with an optional config JSON override;
   * "" none) and unload a model of this server's repository, and ask whether a version is
   * ready (version 0: any). Blocking; not to be called from an execute that the loaded or
   * unloaded model itself may need. VRAMD_UNSUPPORTED when the server is not in explicit
   * mode, as Triton refuses. */
  VramdCode (*load_model)(void* server, const char* model, const char* config_json,
                          VramdError* error);
  VramdCode (*unload_model)(void* server, const char* model, int32_t unload_dependents,
                            VramdError* error);
  int32_t (*is_model_ready)(void* server, const char* model, int64_t version);

  /* A model's own metrics (Triton's custom metrics), exported on the metrics endpoint beside
   * vramd's. `kind`: 0 counter, 1 gauge, 2 histogram. A family is made once per name (the same
   * name again with the same kind and description returns the same family). `labels_json` is
   * a JSON object of string values; `buckets` (histograms only) ascending upper bounds. */
  VramdCode (*metric_family_create)(void* server, const char* name, const char* description,
                                    int32_t kind, void** family, VramdError* error);
  void (*metric_family_release)(void* server, void* family);
  VramdCode (*metric_create)(void* server, void* family, const char* labels_json,
                             const double* buckets, size_t bucket_count, void** metric,
                             VramdError* error);
  void (*metric_release)(void* server, void* metric);
  /* op: 0 increment (counter: value >= 0), 1 set (gauge), 2 observe (histogram). */
  VramdCode (*metric_update)(void* server, void* metric, int32_t op, double value,
                             VramdError* error);
  /* A counter's or gauge's value. */
  VramdCode (*metric_value)(void* server, void* metric, double* value, VramdError* error);

  /* Appended within version 1: present when struct_size > offsetof(VramdServerApi,
   * infer_cancel_release). Cancels the infer_async call whose VramdInferCall::cancel_token gave
   * `token`, as a client that gives up cancels its request: the called model's requests read as
   * cancelled (Triton's is_cancelled()), and it may end early; its results still come, ending
   * with the final one. Any number of times, also after the final result; a no-op then. */
  void (*infer_cancel)(void* server, void* token);
  /* Releases a cancel token, exactly once, before or after the call's final result. */
  void (*infer_cancel_release)(void* server, void* token);

  /* Appended within version 1: present when struct_size > offsetof(VramdServerApi,
   * load_model_files). load_model with the model's files (Triton's "file:<path>" load
   * parameters, pb_utils.load_model(files=)): the model loads from a directory of exactly
   * these files, whether or not the repository holds it, and `config_json` is required.
   * Each path is relative to the model's directory ("1/model.py"; no "file:" prefix, no
   * absolute path, no "." or ".." component). The bytes are copied before it returns. */
  VramdCode (*load_model_files)(void* server, const char* model, const char* config_json,
                                const VramdModelFile* files, size_t file_count,
                                VramdError* error);
} VramdServerApi;

typedef struct VramdModelInfo {
  size_t struct_size;
  const char* name;         /* the model's name */
  int64_t version;
  const char* model_dir;    /* <repository>/<model> */
  const char* version_dir;  /* <repository>/<model>/<version> */
  const char* config_json;  /* the model's config as JSON (as GET /v2/models/{m}/config) */
  size_t config_json_size;
  VramdOwner owner;         /* the version's ledger owner */
  const VramdServerApi* server;
} VramdModelInfo;

typedef struct VramdInstanceInfo {
  size_t struct_size;
  const char* name;  /* "<group>_<i>" or "<group>_<i>_gpu<d>", as Triton names instances */
  int32_t index;     /* across every group of the model */
  VramdDeviceKind kind;  /* CPU or GPU */
  int32_t device_id;     /* the CUDA ordinal for a GPU instance; -1 for CPU */
  VramdOwner owner;      /* the instance's ledger owner */
} VramdInstanceInfo;

/* A tensor vramd owns; valid for the duration of the call it is passed to. */
typedef struct VramdTensor {
  const char* name;
  VramdDataType datatype;
  const int64_t* shape;
  size_t rank;
  const void* data;  /* host memory, unless the request's input_memory says otherwise */
  size_t byte_size;
} VramdTensor;

/* Where a tensor's bytes are (VramdRequest::input_memory, VramdInferCall::input_memory): kept
 * beside VramdTensor, which has no struct_size to grow. */
struct VramdMemory {
  VramdDeviceKind kind;
  int32_t device_id; /* the CUDA ordinal for VRAMD_DEVICE_GPU; -1 otherwise */
};

typedef struct VramdRequest {
  size_t struct_size;
  const char* id;
  const VramdTensor* inputs;  /* validated against the config: names, types and shapes */
  size_t input_count;
  VramdOwner owner;           /* the request's ledger owner, for scratch memory */

  /* Appended within version 1: present when struct_size > offsetof(VramdRequest,
   * parameters_json) (a backend must check). */
  const char* parameters_json; /* the request's parameters, a JSON object ("{}" when none) */
  size_t parameters_json_size;
  /* The outputs the client asked for, by name; 0: every output of the model. */
  const char* const* requested_outputs;
  size_t requested_output_count;
  uint32_t flags;                     /* VRAMD_REQUEST_FLAG_* */
  uint64_t correlation_id;            /* the sequence id; 0: none (or a string id) */
  const char* correlation_id_string;  /* a string sequence id; NULL when it is an integer */
  uint64_t timeout_us;                /* the request's own timeout; 0: none */
  /* Per input, where its bytes are; NULL: every input in host memory. */
  const VramdMemory* input_memory;
  /* How this request is answered (VramdServerApi::respond); set for execute_requests only. */
  VramdResponder* responder;

  /* Appended within version 1: present when struct_size > offsetof(VramdRequest,
   * preferred_output_memory). Where the request's consumer takes outputs: VRAMD_DEVICE_CPU (a
   * client of a front end; the default when absent), or VRAMD_DEVICE_GPU with a device id (a
   * BLS call that asked for that GPU) or -1 (a BLS call that takes outputs on whatever GPU the
   * model leaves them, Triton's default). A hint: vramd moves an output to host when the
   * consumer needs it there, never to a GPU. */
  VramdMemory preferred_output_memory;

  /* Appended within version 1: present when struct_size > offsetof(VramdRequest, traceparent).
   * When the request is traced, the W3C traceparent of its trace ("00-<trace id>-<span id>-01");
   * a call the backend makes on its behalf that passes it on (VramdInferCall::traceparent) is
   * traced as its child (Triton's InferenceRequest(trace=request.trace())). NULL: not traced. */
  const char* traceparent;
} VramdRequest;

/* A request a backend makes on another model (VramdServerApi::infer_async). */
typedef struct VramdInferCall {
  size_t struct_size;
  const char* model;
  int64_t version;           /* 0: the highest ready version */
  const char* id;            /* may be NULL */
  const VramdTensor* inputs;
  const VramdMemory* input_memory; /* NULL: host */
  size_t input_count;
  const char* const* requested_outputs; /* 0: every output */
  size_t requested_output_count;
  const char* parameters_json;  /* NULL or a JSON object */
  uint32_t flags;
  uint64_t correlation_id;
  const char* correlation_id_string;
  uint64_t timeout_us;
  /* Where the outputs should land: VRAMD_DEVICE_CPU (host) or a GPU. */
  VramdMemory preferred_output_memory;
  /* Non-zero: the caller takes several responses (a decoupled model); zero: calling a
   * decoupled model is an error, as Triton's exec() without decoupled=True. */
  int32_t decoupled;
  /* The request's ledger owner when it is run on behalf of a request of the caller: what the
   * called model charges to its request is a child of it. 0: none. */
  VramdOwner parent_owner;
  /* Appended within version 1 (a server reads it when struct_size covers it): when non-NULL,
   * an infer_async that returns VRAMD_OK stores here a token for infer_cancel (see there);
   * NULL is stored when it fails. */
  void** cancel_token;
  /* Appended within version 1 (read when struct_size covers it): non-zero promises that the
   * inputs' memory stays valid and unchanged until the call's final result has come, so vramd
   * reads it in place instead of copying it (host or GPU) before infer_async returns. Zero: vramd
   * copies host inputs to host and GPU inputs to its pool of that GPU (charged to parent_owner,
   * or the calling thread's owner when that is 0). Either way a GPU input is read as `copy`
   * reads it: after the work queued before on the legacy default stream, which the caller
   * orders after whatever produced it. */
  int32_t inputs_outlive_call;
  /* Appended within version 1 (read when struct_size covers it): the calling request's
   * VramdRequest::traceparent, to trace this call as its child; NULL: the call is not traced.
   * A malformed value is ignored. */
  const char* traceparent;
} VramdInferCall;

/* Where execute puts its outputs: for each output the backend asks vramd for a host buffer of
 * `byte_size` bytes and fills it before execute returns. Every output of the model should be
 * produced; vramd drops those the client did not ask for. */
typedef struct VramdOutputs {
  size_t struct_size;
  void* outputs; /* pass back as the first argument */
  VramdCode (*add)(void* outputs, const char* name, VramdDataType datatype, const int64_t* shape,
                   size_t rank, size_t byte_size, void** data, VramdError* error);
  /* Appended within version 1: present when struct_size > offsetof(VramdOutputs,
   * add_on_device) (a backend must check). As add, in `kind` memory (device `device_id` for a
   * GPU), which GPU memory is as response_add_output's: from vramd's pool of that device,
   * charged to the request, stream-ordered on the legacy default stream (a backend that fills
   * it on a stream of its own completes that work before execute returns). For a backend that
   * leaves outputs on a GPU where the request's preferred_output_memory is one (a client's
   * CUDA shared memory, a BLS caller on the GPU); vramd copies them to host for a consumer
   * that takes host memory. */
  VramdCode (*add_on_device)(void* outputs, const char* name, VramdDataType datatype,
                             const int64_t* shape, size_t rank, size_t byte_size,
                             VramdDeviceKind kind, int32_t device_id, void** data,
                             VramdError* error);
  /* Appended within version 1: present when struct_size > offsetof(VramdOutputs,
   * add_from_input) and non-NULL (a backend must check). Output `name` is the request's input
   * `input_index` (VramdRequest::inputs) as it is, datatype, shape, bytes and memory, with no
   * copy: vramd answers from the input's own memory and keeps it for as long as the answer
   * needs it (it copies only an input whose memory is lent for the call, a BLS caller's that
   * outlives only the call). For a backend that answers with an input unchanged; the backend
   * must not write that input afterwards. */
  VramdCode (*add_from_input)(void* outputs, const char* name, size_t input_index,
                              VramdError* error);
} VramdOutputs;

/* The backend's table. Lives as long as the library is loaded. */
typedef struct VramdBackendApi {
  size_t struct_size;
  uint32_t abi_version; /* VRAMD_BACKEND_ABI_VERSION the library was built with */
  const char* name;     /* the backend's name, as configs write it */
  int32_t supports_gpu; /* non-zero: KIND_GPU instances can be created */

  VramdCode (*model_create)(const VramdModelInfo* info, void** model, VramdError* error);
  void (*model_destroy)(void* model);
  VramdCode (*instance_create)(void* model, const VramdInstanceInfo* info, void** instance,
                               VramdError* error);
  void (*instance_destroy)(void* instance);
  VramdCode (*execute)(void* instance, const VramdRequest* request, const VramdOutputs* outputs,
                       VramdError* error);

  /* Appended within version 1: present when struct_size > offsetof(VramdBackendApi,
   * execute_on_instance_threads) (older libraries pass a shorter struct, and vramd then reads
   * it as 0).
   * Non-zero: vramd runs every execute on the instance's own thread, never inline on the thread
   * that received the request: for frameworks with per-thread state (handles, caches), which
   * would otherwise be built on every request thread that ever ran an execute. 0: an idle
   * instance may run a request on the receiving thread (in the default scheduling mode; dynamic
   * batching always uses the instance threads). */
  int32_t execute_on_instance_threads;

  /* Appended within version 1: present when struct_size > offsetof(VramdBackendApi,
   * execute_requests) (older libraries end before it; vramd then reads it as NULL).
   * Non-NULL: vramd calls it instead of execute, with the requests the scheduler formed as
   * they came (dynamic batching hands several, each with its own tensors: they are not joined
   * along dimension 0), as Triton's backends receive them. Each request's `responder` answers
   * it (VramdServerApi::respond), during the call or later from any thread, and every request
   * gets exactly one respond with VRAMD_RESPONSE_FLAG_FINAL. Returning an error instead hands
   * back every request not yet answered with its final flag: vramd answers them with that
   * error, and the backend must not use their responders again. The requests and their
   * tensors are valid until the call returns; a responder until its final respond. */
  VramdCode (*execute_requests)(void* instance, VramdRequest* const* requests, size_t count,
                                VramdError* error);

  /* Appended within version 1: present when struct_size > offsetof(VramdBackendApi,
   * instance_ready) (older libraries end before it; vramd then reads it as NULL, as it reads
   * auto_complete_config below).
   * Optional (NULL: every instance is ready once created). Whether one instance can serve
   * now, asked when a client asks whether the model is (GET /v2/models/{m}/ready), as
   * Triton's TRITONBACKEND_ModelInstanceReady: VRAMD_OK ready; any other code not ready,
   * `error` saying why (logged, not sent). A version is ready when every instance is. vramd
   * runs it on a thread of its own, never two calls for one instance at once, but possibly
   * while that instance executes on another thread. A call that has not returned within 5 s
   * counts as not ready (Triton's kUserModelReadinessTimeoutMs); vramd does not call that
   * instance again until it returns, and a later question waits for that same call. */
  VramdCode (*instance_ready)(void* instance, VramdError* error);

  /* Appended within version 1 (see instance_ready for when it is present). Optional.
   * Completes a model's config before vramd validates it, as Triton's backends auto-complete
   * (the python backend calls TritonPythonModel.auto_complete_config): `info` carries the
   * config as read from config.pbtxt, as JSON (possibly without inputs or outputs), its model
   * and version directories (the highest version the config selects; version 0 and "" when
   * none does), `owner` 0 and a `server` table that allocates nothing (allocate fails). The
   * backend passes the completed config JSON, in the same form, to `complete` (at most once;
   * not calling it keeps the config as it was) before returning VRAMD_OK. An error fails the
   * model's load with the message. Not called when vramd runs with
   * --disable-auto-complete-config. No model of this config is loaded while it runs. */
  VramdCode (*auto_complete_config)(const VramdModelInfo* info,
                                    void (*complete)(void* context, const char* config_json,
                                                     size_t size),
                                    void* context, VramdError* error);

  /* Appended within version 1: present when struct_size > offsetof(VramdBackendApi,
   * accepts_gpu_inputs) (older libraries end before it; vramd then reads it as 0).
   * Non-zero: execute_requests (or execute, whose VramdRequest then carries input_memory and
   * preferred_output_memory) receives inputs in GPU memory where they are (input_memory says
   * which); zero: vramd copies every GPU input to host memory before the call. */
  int32_t accepts_gpu_inputs;

  /* Appended within version 1: present when struct_size > offsetof(VramdBackendApi,
   * model_wake) (older libraries end before them; vramd then reads both as NULL). Optional,
   * both or neither: NULL means the backend's models cannot sleep (a sleep request is refused
   * naming the backend).
   * Sleeping models (vramd's POST /v2/repository/models/{m}/sleep, an idle time, memory
   * pressure): model_sleep gives the devices back what the model keeps there (its weights),
   * keeping its instances, streams, handles and compiled state. `level` 1: keep a copy in host
   * memory (allocate with VRAMD_DEVICE_CUDA_HOST, charged to the version's owner, so the copy
   * back runs at the DMA rate); 2: keep nothing and read it again from the model's files on
   * wake. vramd then returns its pools' cached memory to the driver. model_wake brings back
   * what model_sleep gave up, on the same devices, so that answers after it equal answers
   * before; the backend updates whatever its instances read the weights through (the memory
   * may come back at other addresses). vramd calls them on any thread, never while an execute
   * (or execute_requests) of the model's instances runs, and starts none until they return;
   * a backend whose execute_requests answers later must itself finish that work first. A
   * failed model_sleep must leave the model as it was (serving); a failed model_wake leaves it
   * asleep (vramd answers the requests that waited for it with the error, and tries again on
   * the next request). */
  VramdCode (*model_sleep)(void* model, int32_t level, VramdError* error);
  VramdCode (*model_wake)(void* model, VramdError* error);

  /* Appended within version 1: present when struct_size > offsetof(VramdBackendApi,
   * sleeps_in_place) (older libraries end before it; vramd then reads it as 0).
   * Non-zero, for a backend without model_sleep and model_wake: vramd may put its models to
   * sleep in place, at level 1 only. What a model keeps on a GPU must then come from
   * VramdServerApi::allocate, charged to the version or an instance owner (the python backend's
   * torch tensors are): asleep, each such allocation is copied to pinned host memory and its
   * device memory goes back to the driver while its addresses stay reserved; awake, memory is
   * mapped at the same addresses and the bytes copied back. The backend's pointers stay valid
   * and it does nothing, but it must not touch that memory outside an execute (vramd runs none
   * while the model sleeps). It needs vramd's VMM pool (--device-pool=vmm); without it the
   * model cannot sleep, and a sleep request says so. */
  int32_t sleeps_in_place;
} VramdBackendApi;

/* The entry point: `server_abi_version` is vramd's VRAMD_BACKEND_ABI_VERSION. Returns the table
 * (its abi_version is what the library was built with), or NULL if the library cannot work
 * with that server at all. */
typedef const VramdBackendApi* (*VramdBackendGetApiFn)(uint32_t server_abi_version);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* VRAMD_BACKEND_H_ */
