// Which CUDA devices this process can use. Built without CUDA, or on a machine without a GPU
// or driver, there are none, and everything else still works.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

#include "memory/device.h"

namespace vramd::memory {

// Number of CUDA devices visible to this process; 0 without CUDA, driver or GPU.
int CudaDeviceCount();

// Ok when this process sees CUDA device `ordinal`; Unavailable naming why otherwise (built
// without CUDA, no usable device, an ordinal past the devices seen).
Status CudaDeviceUsable(int ordinal);

// A one-line description for the start-up log: the runtime version and devices, or why none.
std::string CudaDescription();

// The PCI bus id of CUDA device `ordinal`, "dddd:bb:dd.f" as NVML's GetHandleByPciBusId takes
// it. Unavailable without CUDA or for a device that does not exist.
Result<std::string> CudaPciBusId(int ordinal);

// Makes sure the primary CUDA context of `ordinal` exists (cudaFree(nullptr) on that device),
// leaving the calling thread's current device as it was. The context costs device memory
// (hundreds of MiB on a large GPU) that no pool sees: the server makes it through
// DeviceContexts (memory/device_contexts.h), which measures it. Unavailable without CUDA or
// when the context cannot be made.
Status CudaInitContext(int ordinal);

// The calling thread's current CUDA device (cudaGetDevice): 0 until the thread sets another,
// and without CUDA.
int CudaCurrentDevice();

// Waits for all work on device `ordinal` (cudaDeviceSynchronize), leaving the current device
// as it was. Unavailable without CUDA; Internal naming the CUDA error.
Status SynchronizeDevice(int ordinal);

// Waits for the work queued on `stream` of device `ordinal` (null: the legacy default stream),
// leaving the current device as it was. Unavailable without CUDA; Internal naming the error.
Status SynchronizeStream(int ordinal, void* stream);

// Copies `size` bytes from `src` (on device `src_device`) to `dst` (on `dst_device`): any pair
// of host, pinned host and CUDA memory, ordered on `stream` (a cudaStream_t, or null) and
// complete when it returns. The ranges may overlap, as memmove's (a client may place an output
// over the input it came from, in host or in GPU memory; OverlapSafePieces says how one GPU's
// are copied); anything touching a GPU needs CUDA (Unavailable without it), and a CUDA failure
// is Internal naming the error.
Status CopyBytes(Device dst_device, void* dst, Device src_device, const void* src, size_t size,
                 void* stream);
// CopyBytes without the wait: a copy touching a GPU is queued on `stream` and may still run
// when it returns (the caller synchronizes the stream before it uses `dst` or reuses `src`; a
// pageable host buffer makes CUDA finish the copy first anyway). Host to host is done at once.
Status QueueCopy(Device dst_device, void* dst, Device src_device, const void* src, size_t size,
                 void* stream);

// CUDA leaves a copy between overlapping ranges undefined, so one within a GPU is split into
// pieces, each at the same offset in both ranges and overlapping neither itself nor a later
// piece's source: the pieces, in the order to queue them on one stream. One piece when the
// ranges do not overlap, none when dst == src; nullopt when more than `max_pieces` would be
// needed (ranges a few bytes apart), where the caller stages the copy through other memory.
struct CopyPiece {
  size_t offset = 0;
  size_t size = 0;
};
std::optional<std::vector<CopyPiece>> OverlapSafePieces(uintptr_t dst, uintptr_t src,
                                                        size_t size, size_t max_pieces);

// How a copy between two GPUs travels. kPeer: the GPUs reach each other's memory (NVLink or
// PCIe peer to peer), and the destination's access to the source is enabled the first time the
// pair is asked about; kStaged: they cannot, and the driver stages the copy through pinned host
// memory; kSame: one GPU. CopyBytes and QueueCopy ask before every copy between two GPUs; the
// answer is kept per pair and logged once. Unavailable without CUDA or for a GPU that does not
// exist.
enum class GpuRoute { kSame, kPeer, kStaged };
Result<GpuRoute> GpuToGpuRoute(int dst, int src);
const char* GpuRouteName(GpuRoute route);

// Bytes CopyBytes has moved across a GPU's boundary since the process started, by direction
// (pinned host memory counts as host): what a request path costs in transfers, e.g. none
// between host and device for a client's CUDA shared memory read and written by a GPU model.
// Host-to-host copies are not counted. Safe from any thread.
struct CopiedBytes {
  uint64_t host_to_device = 0;
  uint64_t device_to_host = 0;
  uint64_t device_to_device = 0;
};
CopiedBytes CopiedBytesTotal();

}  // namespace vramd::memory
