// vramd_backend_host: hosts one model of a backend library out of vramd's process.
//
//   vramd_backend_host <library.so> <label>
//
// Started by vramd (remote/stub.h) with a SOCK_SEQPACKET socket as descriptor 3; not meant to be
// started by hand. See backend_host.h and docs/remote-backends.md.
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>

#include <cstdio>
#include <string>

#include "backends/remote/backend_host.h"
#include "core/crash_report.h"
#include "vramd/backend.h"

int main(int argc, char** argv) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // also set before exec; kept for a host started otherwise
  vramd::InstallCrashReport("vramd_backend_host");
  if (argc != 3 || ::fcntl(3, F_GETFD) < 0) {
    std::fprintf(stderr,
                 "vramd_backend_host: started by vramd only (usage: vramd_backend_host "
                 "<library.so> <label>, with the socket as descriptor 3)\n");
    return 2;
  }
  ::fcntl(3, F_SETFD, FD_CLOEXEC);
  // As vramd opens backend libraries (shared_library.h): unresolved symbols fail here.
  void* library = ::dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    std::fprintf(stderr, "vramd_backend_host: dlopen '%s': %s\n", argv[1], ::dlerror());
    return 3;
  }
  auto entry = reinterpret_cast<VramdBackendGetApiFn>(::dlsym(library, VRAMD_BACKEND_ENTRY_POINT));
  const VramdBackendApi* api = entry != nullptr ? entry(VRAMD_BACKEND_ABI_VERSION) : nullptr;
  if (api == nullptr || api->abi_version != VRAMD_BACKEND_ABI_VERSION) {
    std::fprintf(stderr, "vramd_backend_host: '%s' gives no table of ABI version %u\n", argv[1],
                 VRAMD_BACKEND_ABI_VERSION);
    return 4;
  }
  return vramd::backends::remote::RunBackendHost(vramd::backends::remote::UniqueFd(3), api,
                                                 argv[2]);
}
