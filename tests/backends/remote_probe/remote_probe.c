/* remote_probe: a test backend for out-of-process hosting (src/backends/remote/), in plain C over
 * the request-list interface (execute_requests / respond).
 *
 * INPUT0 (INT32, [-1]) comes back as OUTPUT0; OUTPUT1 (INT64, [2]) is the process id serving the
 * request and the number of instances this process created so far. A request whose first
 * element is PROBE_HANG (9999) never returns: its execute creates the file $PROBE_HANG_MARKER and
 * waits forever (for a test to kill the process under it, or for vramd's call timeout to). One whose first element is PROBE_FAIL (7777) makes execute_requests fail.
 * One whose first element is PROBE_SILENT (5555) is never answered: execute_requests returns
 * without responding (a request the backend lost).
 * instance_ready answers not ready when the config's parameters name "probe_not_ready".
 * GPU allocate (1 KiB, freed at once) is tried at model_create when the config's parameters name
 * "try_gpu_allocate", and its error becomes model_create's.
 * auto_complete_config keeps the config as it is: hosted, it runs in a process of its own that
 * makes no model, which must still exit cleanly. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vramd/backend.h"

#define PROBE_HANG 9999
#define PROBE_FAIL 7777
#define PROBE_SILENT 5555

typedef struct ProbeModel {
  const VramdServerApi* server;
  int not_ready;
} ProbeModel;

static int g_instances = 0;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_never = PTHREAD_COND_INITIALIZER;

static void set_error(VramdError* error, const char* message) {
  snprintf(error->message, VRAMD_ERROR_MESSAGE_SIZE, "%s", message);
}

static VramdCode model_create(const VramdModelInfo* info, void** model, VramdError* error) {
  ProbeModel* m = (ProbeModel*)calloc(1, sizeof(ProbeModel));
  if (m == NULL) return VRAMD_RESOURCE_EXHAUSTED;
  m->server = info->server;
  if (strstr(info->config_json, "try_gpu_allocate") != NULL) {
    void* p = NULL;
    VramdCode code = m->server->allocate(m->server->server, info->owner, VRAMD_DEVICE_GPU, 0, 1024,
                                         NULL, &p, error);
    if (code != VRAMD_OK) {
      free(m);
      return code;
    }
    m->server->log(m->server->server, VRAMD_LOG_INFO, "remote_probe: GPU allocate succeeded");
    m->server->free(m->server->server, VRAMD_DEVICE_GPU, 0, p);
  }
  m->not_ready = strstr(info->config_json, "probe_not_ready") != NULL;
  m->server->log(m->server->server, VRAMD_LOG_INFO, "remote_probe model created");
  *model = m;
  return VRAMD_OK;
}

static void model_destroy(void* model) { free(model); }

static VramdCode instance_create(void* model, const VramdInstanceInfo* info, void** instance,
                                 VramdError* error) {
  (void)info;
  (void)error;
  pthread_mutex_lock(&g_mu);
  ++g_instances;
  pthread_mutex_unlock(&g_mu);
  *instance = model;
  return VRAMD_OK;
}

static void instance_destroy(void* instance) { (void)instance; }

static VramdCode execute(void* instance, const VramdRequest* request, const VramdOutputs* outputs,
                         VramdError* error) {
  (void)instance;
  (void)request;
  (void)outputs;
  set_error(error, "remote_probe takes request lists only");
  return VRAMD_UNSUPPORTED;
}

static VramdCode execute_requests(void* instance, VramdRequest* const* requests, size_t count,
                                  VramdError* error) {
  const VramdServerApi* s = ((ProbeModel*)instance)->server;
  for (size_t i = 0; i < count; ++i) {
    const VramdRequest* r = requests[i];
    if (r->input_count < 1) {
      set_error(error, "remote_probe needs INPUT0");
      return VRAMD_INVALID_ARGUMENT;
    }
    const VramdTensor* in = &r->inputs[0];
    const int32_t first = in->byte_size >= 4 ? ((const int32_t*)in->data)[0] : 0;
    if (first == PROBE_HANG) {
      /* Tells a test that the request is inside execute: $PROBE_HANG_MARKER is created. */
      const char* marker = getenv("PROBE_HANG_MARKER");
      if (marker != NULL) {
        FILE* f = fopen(marker, "w");
        if (f != NULL) fclose(f);
      }
      pthread_mutex_lock(&g_mu);
      for (;;) pthread_cond_wait(&g_never, &g_mu);
    }
    if (first == PROBE_SILENT) continue;
    if (first == PROBE_FAIL) {
      set_error(error, "remote_probe: asked to fail");
      return VRAMD_INVALID_ARGUMENT;
    }
    VramdResponse* response = NULL;
    VramdCode code = s->response_create(s->server, r->responder, &response, error);
    if (code != VRAMD_OK) return code;
    void* data = NULL;
    code = s->response_add_output(s->server, response, "OUTPUT0", in->datatype, in->shape, in->rank,
                                  in->byte_size, VRAMD_DEVICE_CPU, -1, &data, error);
    if (code == VRAMD_OK && in->byte_size > 0) memcpy(data, in->data, in->byte_size);
    const int64_t shape[1] = {2};
    if (code == VRAMD_OK) {
      code = s->response_add_output(s->server, response, "OUTPUT1", VRAMD_TYPE_INT64, shape, 1, 16,
                                    VRAMD_DEVICE_CPU, -1, &data, error);
    }
    if (code != VRAMD_OK) {
      s->response_delete(s->server, response);
      return code;
    }
    pthread_mutex_lock(&g_mu);
    const int64_t values[2] = {(int64_t)getpid(), (int64_t)g_instances};
    pthread_mutex_unlock(&g_mu);
    memcpy(data, values, sizeof values);
    code = s->respond(s->server, r->responder, response, VRAMD_OK, NULL, VRAMD_RESPONSE_FLAG_FINAL,
                      error);
    if (code != VRAMD_OK) return code;
  }
  return VRAMD_OK;
}

static VramdCode instance_ready(void* instance, VramdError* error) {
  if (!((ProbeModel*)instance)->not_ready) return VRAMD_OK;
  set_error(error, "remote_probe: asked to be not ready");
  return VRAMD_UNAVAILABLE;
}

static VramdCode auto_complete_config(const VramdModelInfo* info,
                                      void (*complete)(void*, const char*, size_t), void* context,
                                      VramdError* error) {
  (void)info;
  (void)complete;
  (void)context;
  (void)error;
  return VRAMD_OK;
}

static const VramdBackendApi kApi = {
    sizeof(VramdBackendApi), VRAMD_BACKEND_ABI_VERSION, "remote_probe", 0,
    model_create, model_destroy, instance_create, instance_destroy, execute,
    1, /* execute_on_instance_threads */
    execute_requests, instance_ready, auto_complete_config,
};

__attribute__((visibility("default"))) const VramdBackendApi* vramd_backend_get_api(
    uint32_t server_abi_version) {
  (void)server_abi_version;
  return &kApi;
}
