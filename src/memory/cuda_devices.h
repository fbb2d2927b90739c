// Which CUDA devices this process can use. Built without CUDA, or on a machine without a GPU
// or driver, there are none, and everything else still works.
#pragma once

#include <string>

namespace vramd::memory {

// Number of CUDA devices visible to this process; 0 without CUDA, driver or GPU.
int CudaDeviceCount();

// A one-line description for the start-up log: the runtime version and devices, or why none.
std::string CudaDescription();

}  // namespace vramd::memory
