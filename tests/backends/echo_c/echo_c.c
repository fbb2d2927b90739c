/* echo_c: a test backend in plain C over vramd's backend ABI (include/vramd/backend.h), and the
 * example docs/backends.md points at.
 *
 * For each input INPUT<i> it returns OUTPUT<i> with the same type, shape and bytes. Memory goes
 * through the server so the ledger sees it: a 4 KiB workspace per instance (charged to the
 * instance) and a scratch copy per request (charged to the request, freed before returning).
 * Failures, for tests, from model config parameters (string values):
 *   fail_create  = "<message>"  model_create fails with that message;
 *   fail_execute = "true"       every execute fails;
 * and growth, for tests of memory quotas:
 *   keep_bytes = "<n>"          each execute allocates n bytes charged to its request and keeps
 *                               them until the instance is destroyed (a model that keeps what
 *                               its requests made: each is that request's leak);
 *   execute_delay_us = "<n>"    each execute holds its scratch copies that long (a model
 *                               whose executions overlap, for tests of memory admission);
 *   echo_request = "true"       each execute also returns REQUEST (UINT8 [n]): a line of text
 *                               with the request's fields as the backend sees them (id, flags,
 *                               correlation ids, timeout, requested outputs, parameters);
 * and an input whose first byte is ECHO_FAIL_BYTE (0xEE) fails that execute.
 * Built with -DECHO_WRONG_ABI it claims another ABI version, with -DECHO_NULL_TABLE its entry
 * point returns NULL, with -DECHO_SMALL_TABLE its table ends before execute, and with
 * -DECHO_NO_ENTRY it exports no entry point: vramd must refuse each, saying why. With
 * -DECHO_INSTANCE_THREADS it sets execute_on_instance_threads; with -DECHO_OLDER_TABLE its
 * struct_size ends before that field, as a library built before it was appended, while the
 * memory past it says 1: vramd must load it and not read the field. ECHO_BACKEND_NAME sets the
 * name the table reports (the library's directory name). */
/* nanosleep */
#define _POSIX_C_SOURCE 200809L
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vramd/backend.h"

#ifndef ECHO_BACKEND_NAME
#define ECHO_BACKEND_NAME "echo_c"
#endif
#ifdef ECHO_WRONG_ABI
#define ECHO_ABI_VERSION (VRAMD_BACKEND_ABI_VERSION + 41u)
#else
#define ECHO_ABI_VERSION VRAMD_BACKEND_ABI_VERSION
#endif

#define ECHO_WORKSPACE_BYTES 4096
#define ECHO_FAIL_BYTE 0xEE
#define ECHO_MAX_NAME 64

typedef struct EchoModel {
  const VramdServerApi* server; /* valid until model_destroy returns */
  int fail_execute;
  size_t keep_bytes; /* 0: keeps nothing */
  long execute_delay_us;
  int echo_request;
} EchoModel;

typedef struct EchoInstance {
  EchoModel* model;
  void* workspace;
  void** kept; /* keep_bytes blocks, freed with the instance */
  size_t kept_count;
  size_t kept_capacity;
} EchoInstance;

static void set_error(VramdError* error, const char* message) {
  snprintf(error->message, VRAMD_ERROR_MESSAGE_SIZE, "%s", message);
}

/* The string value of model parameter `key` in the config JSON, copied into `out`; 0 if absent.
 * The JSON is vramd's own compact form: "parameters":{"key":{"string_value":"..."}}. A real
 * backend would use a JSON parser; this search is enough for test parameters without quotes. */
static int find_parameter(const char* json, const char* key, char* out, size_t out_size) {
  char needle[128];
  const char* params = strstr(json, "\"parameters\":{");
  if (params == NULL) return 0;
  snprintf(needle, sizeof needle, "\"%s\":{\"string_value\":\"", key);
  const char* at = strstr(params, needle);
  if (at == NULL) return 0;
  at += strlen(needle);
  const char* end = strchr(at, '"');
  if (end == NULL) return 0;
  size_t n = (size_t)(end - at);
  if (n >= out_size) n = out_size - 1;
  memcpy(out, at, n);
  out[n] = '\0';
  return 1;
}

static VramdCode model_create(const VramdModelInfo* info, void** model, VramdError* error) {
  char value[256];
  if (info->struct_size < sizeof(VramdModelInfo)) {
    set_error(error, "echo_c: VramdModelInfo is smaller than this backend was built for");
    return VRAMD_UNSUPPORTED;
  }
  if (find_parameter(info->config_json, "fail_create", value, sizeof value)) {
    char message[VRAMD_ERROR_MESSAGE_SIZE];
    snprintf(message, sizeof message, "echo_c cannot create model '%s': %s", info->name, value);
    set_error(error, message);
    return VRAMD_INVALID_ARGUMENT;
  }
  EchoModel* m = (EchoModel*)calloc(1, sizeof(EchoModel));
  if (m == NULL) {
    set_error(error, "echo_c: out of memory");
    return VRAMD_RESOURCE_EXHAUSTED;
  }
  m->server = info->server;
  m->fail_execute = find_parameter(info->config_json, "fail_execute", value, sizeof value) &&
                    strcmp(value, "true") == 0;
  m->echo_request = find_parameter(info->config_json, "echo_request", value, sizeof value) &&
                    strcmp(value, "true") == 0;
  if (find_parameter(info->config_json, "keep_bytes", value, sizeof value)) {
    m->keep_bytes = (size_t)strtoull(value, NULL, 10);
  }
  if (find_parameter(info->config_json, "execute_delay_us", value, sizeof value)) {
    m->execute_delay_us = strtol(value, NULL, 10);
  }
  info->server->log(info->server->server, VRAMD_LOG_INFO, "echo_c model created");
  *model = m;
  return VRAMD_OK;
}

static void model_destroy(void* model) { free(model); }

static VramdCode instance_create(void* model, const VramdInstanceInfo* info, void** instance,
                                 VramdError* error) {
  EchoModel* m = (EchoModel*)model;
  EchoInstance* inst = (EchoInstance*)calloc(1, sizeof(EchoInstance));
  if (inst == NULL) {
    set_error(error, "echo_c: out of memory");
    return VRAMD_RESOURCE_EXHAUSTED;
  }
  inst->model = m;
  VramdCode code = m->server->allocate(m->server->server, info->owner, VRAMD_DEVICE_CPU, -1,
                                       ECHO_WORKSPACE_BYTES, NULL, &inst->workspace, error);
  if (code != VRAMD_OK) {
    free(inst);
    return code;
  }
  memset(inst->workspace, 0, ECHO_WORKSPACE_BYTES);
  *instance = inst;
  return VRAMD_OK;
}

static void instance_destroy(void* instance) {
  EchoInstance* inst = (EchoInstance*)instance;
  const VramdServerApi* server = inst->model->server;
  for (size_t i = 0; i < inst->kept_count; ++i) {
    server->free(server->server, VRAMD_DEVICE_CPU, -1, inst->kept[i]);
  }
  free(inst->kept);
  server->free(server->server, VRAMD_DEVICE_CPU, -1, inst->workspace);
  free(inst);
}

/* REQUEST: the request's fields as this backend sees them, one line of text. */
static VramdCode add_request_echo(const VramdRequest* request, const VramdOutputs* outputs,
                                  VramdError* error) {
  char text[1024];
  int n = snprintf(text, sizeof text, "id=%s", request->id != NULL ? request->id : "(null)");
  if (request->struct_size > offsetof(VramdRequest, parameters_json)) {
    n += snprintf(text + n, sizeof text - (size_t)n,
                  " flags=%u correlation_id=%llu correlation_id_string=%s timeout_us=%llu "
                  "requested=%zu parameters=%.*s",
                  (unsigned)request->flags, (unsigned long long)request->correlation_id,
                  request->correlation_id_string != NULL ? request->correlation_id_string : "(null)",
                  (unsigned long long)request->timeout_us, request->requested_output_count,
                  request->parameters_json != NULL ? (int)request->parameters_json_size : 6,
                  request->parameters_json != NULL ? request->parameters_json : "(null)");
  }
  if (n < 0 || (size_t)n >= sizeof text) n = (int)strlen(text);
  const int64_t shape[1] = {n};
  void* data = NULL;
  VramdCode code = outputs->add(outputs->outputs, "REQUEST", VRAMD_TYPE_UINT8, shape, 1,
                                (size_t)n, &data, error);
  if (code == VRAMD_OK) memcpy(data, text, (size_t)n);
  return code;
}

static VramdCode execute(void* instance, const VramdRequest* request, const VramdOutputs* outputs,
                         VramdError* error) {
  EchoInstance* inst = (EchoInstance*)instance;
  const VramdServerApi* server = inst->model->server;
  if (inst->model->fail_execute) {
    set_error(error, "echo_c: execute failed because the model sets fail_execute");
    return VRAMD_INTERNAL;
  }
  if (inst->model->keep_bytes > 0) {
    if (inst->kept_count == inst->kept_capacity) {
      size_t capacity = inst->kept_capacity == 0 ? 16 : 2 * inst->kept_capacity;
      void** grown = (void**)realloc(inst->kept, capacity * sizeof(void*));
      if (grown == NULL) {
        set_error(error, "echo_c: out of memory");
        return VRAMD_RESOURCE_EXHAUSTED;
      }
      inst->kept = grown;
      inst->kept_capacity = capacity;
    }
    void* kept = NULL;
    /* The server's error (a quota's refusal names the model and the request) is passed on. */
    VramdCode code = server->allocate(server->server, request->owner, VRAMD_DEVICE_CPU, -1,
                                      inst->model->keep_bytes, NULL, &kept, error);
    if (code != VRAMD_OK) return code;
    memset(kept, 0x5A, inst->model->keep_bytes);
    inst->kept[inst->kept_count++] = kept;
  }
  for (size_t i = 0; i < request->input_count; ++i) {
    const VramdTensor* in = &request->inputs[i];
    if (in->byte_size > 0 && ((const unsigned char*)in->data)[0] == ECHO_FAIL_BYTE) {
      char message[VRAMD_ERROR_MESSAGE_SIZE];
      snprintf(message, sizeof message, "echo_c: input '%s' starts with the failure byte 0x%X",
               in->name, ECHO_FAIL_BYTE);
      set_error(error, message);
      return VRAMD_INVALID_ARGUMENT;
    }
    if (strncmp(in->name, "INPUT", 5) != 0 || strlen(in->name) + 2 > ECHO_MAX_NAME) continue;
    char out_name[ECHO_MAX_NAME];
    snprintf(out_name, sizeof out_name, "OUTPUT%s", in->name + 5);

    /* Scratch charged to the request: a staged copy of the input, as a real backend might
     * stage data for a device. Freed before returning, so the request leaves nothing. */
    void* scratch = NULL;
    VramdCode code = VRAMD_OK;
    if (in->byte_size > 0) {
      code = server->allocate(server->server, request->owner, VRAMD_DEVICE_CPU, -1, in->byte_size,
                              NULL, &scratch, error);
      if (code != VRAMD_OK) return code;
      memcpy(scratch, in->data, in->byte_size);
    }
    void* data = NULL;
    code = outputs->add(outputs->outputs, out_name, in->datatype, in->shape, in->rank,
                        in->byte_size, &data, error);
    if (code == VRAMD_OK && in->byte_size > 0) memcpy(data, scratch, in->byte_size);
    if (inst->model->execute_delay_us > 0) {
      struct timespec delay = {inst->model->execute_delay_us / 1000000,
                               (inst->model->execute_delay_us % 1000000) * 1000};
      nanosleep(&delay, NULL);
    }
    if (scratch != NULL) server->free(server->server, VRAMD_DEVICE_CPU, -1, scratch);
    if (code != VRAMD_OK) return code;
  }
  if (inst->model->echo_request) return add_request_echo(request, outputs, error);
  return VRAMD_OK;
}

static const VramdBackendApi kApi = {
#if defined(ECHO_SMALL_TABLE)
    offsetof(VramdBackendApi, execute),
#elif defined(ECHO_OLDER_TABLE)
    offsetof(VramdBackendApi, execute_on_instance_threads),
#else
    sizeof(VramdBackendApi),
#endif
    ECHO_ABI_VERSION,
    ECHO_BACKEND_NAME,
    0, /* CPU only */
    model_create,
    model_destroy,
    instance_create,
    instance_destroy,
    execute,
#if defined(ECHO_INSTANCE_THREADS) || defined(ECHO_OLDER_TABLE)
    1, /* execute_on_instance_threads (outside the table for ECHO_OLDER_TABLE) */
#else
    0, /* execute_on_instance_threads: no per-thread state */
#endif
};

#ifdef ECHO_NO_ENTRY
#define ECHO_ENTRY_VISIBILITY "hidden"
#else
#define ECHO_ENTRY_VISIBILITY "default"
#endif

__attribute__((visibility(ECHO_ENTRY_VISIBILITY))) const VramdBackendApi* vramd_backend_get_api(
    uint32_t server_abi_version) {
  (void)server_abi_version; /* the server checks kApi.abi_version and names both versions */
#ifdef ECHO_NULL_TABLE
  (void)kApi;
  return NULL;
#else
  return &kApi;
#endif
}
