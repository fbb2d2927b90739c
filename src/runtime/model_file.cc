#include "runtime/model_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <iterator>
#include <system_error>
#include <utility>

namespace vramd::runtime {
namespace {

namespace fs = std::filesystem;

std::string_view TypeName(fs::file_type type) {
  switch (type) {
    case fs::file_type::directory: return "a directory";
    case fs::file_type::fifo: return "a FIFO";
    case fs::file_type::character: return "a character device";
    case fs::file_type::block: return "a block device";
    case fs::file_type::socket: return "a socket";
    default: return "not a file";
  }
}

// True when `inner` is `outer` or below it; both canonical.
bool Contains(const fs::path& outer, const fs::path& inner) {
  auto [o, i] = std::mismatch(outer.begin(), outer.end(), inner.begin(), inner.end());
  // A trailing separator shows up as one empty last component of `outer`.
  return o == outer.end() || (std::next(o) == outer.end() && o->empty());
}

std::string ErrnoText() { return std::error_code(errno, std::generic_category()).message(); }

// Closes its descriptor.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

Result<ModelFile> ResolveModelFile(const fs::path& folder, std::string_view relative,
                                   const ModelFileRule& rule) {
  auto refuse = [&](std::string_view why) {
    return Status::InvalidArgument(fmt::format("{} '{}' {}", rule.field, relative, why));
  };
  if (relative.empty()) return Status::InvalidArgument(fmt::format("{} is empty", rule.field));
  const fs::path p(relative);
  if (p.is_absolute() || p.has_root_name() || p.has_root_directory()) {
    return refuse(fmt::format("must be a path relative to {}", rule.folder));
  }
  for (const auto& part : p) {
    if (part == "..") return refuse(fmt::format("must not leave {} (\"..\")", rule.folder));
  }

  const fs::path path = folder / p;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);  // follows symlinks; opens nothing
  if (ec && st.type() != fs::file_type::not_found) {
    return Status::Internal(fmt::format("{} '{}': cannot stat '{}': {}", rule.field, relative,
                                        path.string(), ec.message()));
  }
  if (!fs::exists(st)) return refuse(fmt::format("not found: no file '{}'", path.string()));

  const fs::path real_folder = fs::weakly_canonical(folder, ec);
  fs::path real = ec ? fs::path() : fs::weakly_canonical(path, ec);
  if (ec) {
    return Status::Internal(fmt::format("{} '{}': cannot resolve '{}': {}", rule.field, relative,
                                        path.string(), ec.message()));
  }
  if (!Contains(real_folder, real)) {
    return refuse(fmt::format("resolves to '{}', outside {} '{}'", real.string(), rule.folder,
                              real_folder.string()));
  }
  if (!fs::is_regular_file(st)) {
    return refuse(fmt::format("is {}, not a regular file ('{}')", TypeName(st.type()),
                              path.string()));
  }
  const uintmax_t size = fs::file_size(real, ec);
  if (ec) {
    return Status::Internal(fmt::format("{} '{}': cannot size '{}': {}", rule.field, relative,
                                        real.string(), ec.message()));
  }
  if (size > rule.max_bytes) {
    return refuse(fmt::format("has {} bytes, over the limit of {} bytes ('{}')", size,
                              rule.max_bytes, real.string()));
  }
  return ModelFile{std::move(real), size};
}

Result<std::string> ReadModelFile(const ModelFile& file, size_t n, const ModelFileRule& rule) {
  auto unreadable = [&](std::string_view why) {
    return Status::Internal(
        fmt::format("{}: cannot read '{}': {}", rule.field, file.path.string(), why));
  };
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
  const Fd fd(::open(file.path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (fd.get() < 0) return unreadable(ErrnoText());
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return unreadable(ErrnoText());
  if (!S_ISREG(st.st_mode)) return unreadable("it is no longer a regular file");
  if (static_cast<uintmax_t>(st.st_size) < n) {
    return unreadable(fmt::format("it has {} bytes now, {} expected", st.st_size, n));
  }
  std::string data(n, '\0');
  size_t done = 0;
  while (done < n) {
    const ssize_t got = ::read(fd.get(), data.data() + done, n - done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return unreadable(ErrnoText());
    if (got == 0) return unreadable(fmt::format("it ended after {} of {} bytes", done, n));
    done += static_cast<size_t>(got);
  }
  return data;
}

}  // namespace vramd::runtime
