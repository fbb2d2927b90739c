// Model warmup: the `model_warmup` samples of a config.pbtxt, run against a loaded version before
// it is published as READY (Triton: "the model is not shown READY until warmup completes").
//
// Semantics, following Triton's core (backend_model_instance.cc, GenerateWarmupData / WarmUp)
// where it is defined, and saying so where vramd chooses:
//  - A sample with batch_size 0 (the proto default, i.e. unset) is skipped, as Triton skips it:
//    no data is read or checked, nothing runs.
//  - `dims` exclude the batch dimension and must all be >= 0 (no -1: Triton rejects a
//    variable-size dimension in a warmup sample). The sample's inputs describe ONE batch
//    element; batch_size duplicates it:
//      max_batch_size > 0: one request whose every input is [batch_size, dims...], the element
//        repeated batch_size times, so the backend sees one execution of batch_size (Triton
//        sends batch_size requests of batch 1 in one execution; the backend sees the same
//        batch). batch_size > max_batch_size is an error.
//      max_batch_size == 0: batch_size requests, each [dims...] (Triton's proto says batch_size
//        must then be 1; Triton itself sends batch_size requests, and so does vramd).
//  - count: the sample's requests run count times, one after another; 0 (unset) means once.
//  - Data per input (exactly one of the oneof must be set; `zero_data: false` still counts as
//    set and means zero data, as Triton reads the oneof's case, not the value):
//      zero_data: all bytes 0; for TYPE_STRING every element is an empty string (a 4-byte zero
//        length, our BYTES serialization, core/tensor.h).
//      random_data: values from a fixed-seed generator (the same values on every load, so a
//        warmup failure reproduces): BOOL 0 or 1; integer types uniform over all their bits
//        (Triton fills random bytes); FP16/BF16/FP32/FP64 uniform in [0, 1) (random bytes
//        would make NaNs and infinities, which some models reject). TYPE_STRING falls back to
//        zero_data, as Triton's proto documents.
//      input_data_file: a file under <model_dir>/warmup/ holding one batch element's raw bytes,
//        little-endian, row-major. The config may come from a load request, so the path follows
//        model_file.h's rule: relative, no "..", a regular file inside the folder once symlinks
//        resolve (never a FIFO or a device), TYPE_STRING data at most kMaxWarmupTensorBytes.
//        For fixed-size types the file must hold at least elements x type size bytes; a longer
//        file is accepted and only its first bytes are used, as Triton does. For TYPE_STRING
//        the whole file is the data: 4-byte little-endian length + bytes per element, and it
//        must hold exactly the elements of `dims`.
//  - Validation (before anything runs): every sample input is a model input with the same
//    data_type; every non-optional model input is in the sample (optional ones may be left
//    out); then each built request passes the same ValidateInferRequest (request_validator.h)
//    that Infer applies, so dims that do not fit the config's come back here as an error.
//    A single input's data may not exceed kMaxWarmupTensorBytes, so a typo in dims cannot
//    exhaust host memory.
//
// Statistics: warmup runs through LoadedModel::Infer, so statistics() counts its requests and
// executions. Triton counts them too (its warmup requests report statistics like any other),
// so this matches; one difference: a sample of batch_size N is one request here, N in Triton.
//
// Instances: Triton warms every instance; vramd's requests go through the scheduler, which runs
// each on whichever instance is free, so with several instances not every one is guaranteed to
// see a warmup execution (LoadedModel offers no per-instance entry point).
//
// Thread safety: free functions; BuildWarmupRequests is pure apart from reading files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <vector>

#include "config/model_config.pb.h"
#include "core/infer_request.h"
#include "core/status.h"
#include "runtime/loaded_model.h"

namespace vramd::runtime {

// The correlation ID of a sequence model's warmup requests (each one a sequence of its own,
// START and END): integer, or string for a model whose CORRID control is TYPE_STRING. Warmup
// runs before the version takes requests, so no client's sequence can share it.
inline constexpr uint64_t kWarmupCorrelationId = 1ull << 63;
inline constexpr const char* kWarmupCorrelationString = "vramd-warmup";

// Largest data one warmup input may have (after batch duplication).
inline constexpr size_t kMaxWarmupTensorBytes = size_t{1} << 30;

// The requests one iteration of `sample` runs against a model with `config` (validated and
// normalized), reading input_data_file from `model_dir`/warmup/. Empty for a batch_size 0
// sample (skipped). Errors are InvalidArgument, "model '<name>': warmup sample '<sample>':
// input '<input>': <what is wrong>" (a missing or short file names the file and the expected
// and actual byte sizes), except Internal when a file cannot be examined or read (I/O error).
Result<std::vector<InferRequest>> BuildWarmupRequests(const config::ModelConfig& config,
                                                      const config::ModelWarmup& sample,
                                                      const std::filesystem::path& model_dir);

// How many times a sample's requests run: count, or 1 when count is 0.
inline uint32_t WarmupIterations(const config::ModelWarmup& sample) {
  return sample.count() == 0 ? 1 : sample.count();
}

// Builds (and discards) every sample's requests: the checks RunModelWarmup makes before it runs
// anything, for a caller that wants them before loading the backend.
Status ValidateModelWarmup(const config::ModelConfig& config,
                           const std::filesystem::path& model_dir);

// Runs every model_warmup sample of `model`'s config WarmupIterations times against `model`,
// blocking, samples in config order. Every sample is built and checked first, so a bad sample
// fails before anything runs, with BuildWarmupRequests' error. A request that fails stops the
// warmup: the error is the one Infer returned (its code and message as is, which name the model
// and version), prefixed "warmup sample '<sample>'" (and the iteration when count > 1).
// OK at once when the config has no samples.
// REQUIRES: not called from an instance thread (Infer's requirement).
Status RunModelWarmup(LoadedModel& model, const std::filesystem::path& model_dir);

}  // namespace vramd::runtime
