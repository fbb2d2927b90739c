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
  VRAMD_INTERNAL = 6           /* anything else, including a caught exception */
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

/* What vramd offers a backend. Valid from model_create until model_destroy returns. */
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
  const void* data;  /* host memory */
  size_t byte_size;
} VramdTensor;

typedef struct VramdRequest {
  size_t struct_size;
  const char* id;
  const VramdTensor* inputs;  /* validated against the config: names, types and shapes */
  size_t input_count;
  VramdOwner owner;           /* the request's ledger owner, for scratch memory */
} VramdRequest;

/* Where execute puts its outputs: for each output the backend asks vramd for a host buffer of
 * `byte_size` bytes and fills it before execute returns. Every output of the model should be
 * produced; vramd drops those the client did not ask for. */
typedef struct VramdOutputs {
  size_t struct_size;
  void* outputs; /* pass back as the first argument */
  VramdCode (*add)(void* outputs, const char* name, VramdDataType datatype, const int64_t* shape,
                   size_t rank, size_t byte_size, void** data, VramdError* error);
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
} VramdBackendApi;

/* The entry point: `server_abi_version` is vramd's VRAMD_BACKEND_ABI_VERSION. Returns the table
 * (its abi_version is what the library was built with), or NULL if the library cannot work
 * with that server at all. */
typedef const VramdBackendApi* (*VramdBackendGetApiFn)(uint32_t server_abi_version);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* VRAMD_BACKEND_H_ */
