#include "memory/hosted_processes.h"

#include <utility>

namespace vramd::memory {

HostedProcesses::Registration::~Registration() { list_->Remove(key_); }

std::unique_ptr<HostedProcesses::Registration> HostedProcesses::Add(HostedProcess process) {
  MutexLock lock(mu_);
  const uint64_t key = next_key_++;
  processes_.emplace(key, std::move(process));
  return std::unique_ptr<Registration>(new Registration(this, key));
}

std::vector<HostedProcess> HostedProcesses::List() const {
  MutexLock lock(mu_);
  std::vector<HostedProcess> out;
  out.reserve(processes_.size());
  for (const auto& [key, process] : processes_) out.push_back(process);
  return out;
}

void HostedProcesses::Remove(uint64_t key) {
  MutexLock lock(mu_);
  processes_.erase(key);
}

HostedProcesses& HostedProcesses::Global() {
  static auto* list = new HostedProcesses;  // never destroyed: stubs may outlive main's locals
  return *list;
}

}  // namespace vramd::memory
