// The DLPack v0.8 C ABI (https://github.com/dmlc/dlpack, include/dlpack/dlpack.h), the part
// vramd's Python backend exchanges with numpy, torch and other producers: written here from the
// specification, not copied. Layout is what matters: every producer and consumer in the process
// reads these structs by offset.
//
//   DLTensor          data, device, ndim, dtype, shape, strides, byte_offset
//   DLManagedTensor   a DLTensor plus manager_ctx and the deleter the consumer calls when done
//
// PyCapsule protocol (Python array API): a producer hands out a capsule named "dltensor" whose
// pointer is a DLManagedTensor*. A consumer that takes ownership renames the capsule
// "used_dltensor" and later calls the deleter itself; the capsule's own destructor calls the
// deleter only while the name is still "dltensor" (nobody took it).
#ifndef VRAMD_BACKENDS_PYTHON_DLPACK_H_
#define VRAMD_BACKENDS_PYTHON_DLPACK_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DLPACK_VERSION 80
#define DLPACK_ABI_VERSION 1

typedef enum {
  kDLCPU = 1,
  kDLCUDA = 2,
  kDLCUDAHost = 3,  // page-locked host memory (cudaMallocHost)
  kDLOpenCL = 4,
  kDLVulkan = 7,
  kDLMetal = 8,
  kDLVPI = 9,
  kDLROCM = 10,
  kDLROCMHost = 11,
  kDLExtDev = 12,
  kDLCUDAManaged = 13,  // cudaMallocManaged
  kDLOneAPI = 14,
  kDLWebGPU = 15,
  kDLHexagon = 16,
} DLDeviceType;

typedef struct {
  DLDeviceType device_type;  // a C enum: 32 bits on every ABI vramd builds for
  int32_t device_id;
} DLDevice;

typedef enum {
  kDLInt = 0U,
  kDLUInt = 1U,
  kDLFloat = 2U,
  kDLOpaqueHandle = 3U,
  kDLBfloat = 4U,
  kDLComplex = 5U,
  kDLBool = 6U,
} DLDataTypeCode;

typedef struct {
  uint8_t code;    // a DLDataTypeCode
  uint8_t bits;    // bits of one lane: 8 for bool
  uint16_t lanes;  // 1 for scalar element types
} DLDataType;

typedef struct {
  void* data;  // the start of the allocation (device pointer for kDLCUDA); add byte_offset
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;    // ndim entries
  int64_t* strides;  // ndim entries, in elements; NULL means compact row-major (C order)
  uint64_t byte_offset;
} DLTensor;

typedef struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(struct DLManagedTensor* self);  // may be NULL
} DLManagedTensor;

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // VRAMD_BACKENDS_PYTHON_DLPACK_H_
