// The built-in "mlp" backend: a stack of dense layers with ReLU between them, with real weights
// read from a safetensors file. It is the model with weights that tests, examples, reload
// checks and benchmarks use without a framework; scripts/make_mlp_model.py writes such models.
// Implemented over the backend C ABI (include/vramd/backend.h, abi/backend_kit.h) and linked
// into the server; the runtime reaches it through AbiBackend like any backend library. Memory
// comes only from VramdServerApi::allocate, charged to the owners named below.
//
// Config contract (model_create fails with an InvalidArgument naming the field otherwise; details
// in mlp_plan.h):
//   - max_batch_size >= 1: the first dimension of the input and output is the batch;
//   - one input, TYPE_FP32, dims [K]; one output, TYPE_FP32, dims [N];
//   - weights in <version>/model.safetensors, or <version>/<default_model_filename>:
//     "layers.{i}.weight" [out_i, in_i] and "layers.{i}.bias" [out_i], i = 0..n-1, all F32 or
//     all F16, chaining K -> out_0 -> ... -> out_{n-1} = N (a mismatch names the tensor);
//   - optional parameters { key: "cublas_workspace_mib" value { string_value: "4" } }: cuBLAS's
//     workspace per GPU instance (default 4 MiB).
// output = L_{n-1}(relu(...relu(L_0(input)))), L_i(v) = v W_i^T + b_i, in FP32 on the CPU (FP16
// weights are widened at load) and as mlp_cuda.h describes on a GPU.
//
// Weights are loaded once per device and shared read-only by that device's instances:
//   - model_create reads and checks the file. When an instance group is KIND_CPU or KIND_AUTO (or
//     there is none), it packs the FP32 host copy all CPU instances share. When one is
//     KIND_GPU, it keeps a packed host image in the file's dtype for the first GPU upload, in
//     pinned host memory (VRAMD_DEVICE_CUDA_HOST) so the upload runs at the DMA rate; in ordinary
//     host memory where pinned memory is unavailable (slower, not an error).
//   - The first instance on GPU d uploads that image (or copies from a GPU that has the
//     weights) under the version's owner, and creates the model's cuBLAS handle for d (shared:
//     mlp_cuda.h says why); later instances on d reuse both. The host image is dropped after
//     the first upload (the server's trim after the load then unpins it).
//   - Each instance owns only its workspace: on the CPU its activations; on a GPU its stream,
//     its cuBLAS workspace and its activations.
// So the ledger shows, under the version, one copy of the weights per device whatever the
// instance count, and under each instance only its workspace.
//
// Load timing, through VramdServerApi::record_load_phase, in the phases of core/load_timing.h:
// "file_read" (reading the safetensors file; bytes: its size), "host_stage" (allocating and
// packing the host images above; bytes: their sizes), "h2d" (the first upload's copy alone, in
// the first GPU instance's instance_create; bytes: the weights), and "d2d" for a later GPU's
// peer copy (bytes: the weights).
//
// Thread safety: the backend is stateless; a model's instance_create serializes on the model's
// own mutex (held while a device's weights are uploaded, never on the request path); an
// instance is used by one thread at a time.
#pragma once

#include "vramd/backend.h"

namespace vramd::backends {

// The backend's table (include/vramd/backend.h), linked into the server. supports_gpu is set
// when the server is built with CUDA.
const VramdBackendApi* MlpBackendApi();

}  // namespace vramd::backends
