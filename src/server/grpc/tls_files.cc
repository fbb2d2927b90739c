// GrpcServer::LoadTls: the flags' PEM files, read and checked with OpenSSL (gRPC's own TLS
// library here) before the server starts. gRPC itself only finds a bad certificate when it
// binds the port, and then says no more than that it could not listen.
#include <fmt/format.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <fstream>
#include <memory>
#include <sstream>

#include "server/grpc/grpc_server.h"

namespace vramd::grpc_server {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using Bio = std::unique_ptr<BIO, BioFree>;
using Certificate = std::unique_ptr<X509, X509Free>;
using Key = std::unique_ptr<EVP_PKEY, KeyFree>;

Result<std::string> ReadFile(std::string_view flag, const std::string& path) {
  if (path.empty()) return Status::InvalidArgument(fmt::format("{} is not given", flag));
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return Status::InvalidArgument(fmt::format("{}: cannot read '{}'", flag, path));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return Status::InvalidArgument(fmt::format("{}: cannot read '{}'", flag, path));
  return text.str();
}

// OpenSSL's default asks for an encrypted key's passphrase on the terminal, which would hold
// the server's start; the server has none to give.
int NoPassphrase(char*, int, int, void*) { return 0; }

Bio MemoryBio(const std::string& text) {
  return Bio(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

// The certificates of a PEM text, in order (none when it holds no PEM certificate).
std::vector<Certificate> Certificates(const std::string& pem) {
  std::vector<Certificate> out;
  Bio bio = MemoryBio(pem);
  while (bio != nullptr) {
    Certificate c(PEM_read_bio_X509(bio.get(), nullptr, &NoPassphrase, nullptr));
    if (c == nullptr) break;
    out.push_back(std::move(c));
  }
  ERR_clear_error();  // the end of the text reads as an error
  return out;
}

}  // namespace

Result<GrpcServer::Options::Tls> GrpcServer::LoadTls(const TlsFiles& files) {
  Options::Tls tls;
  tls.mutual = files.mutual;
  VRAMD_ASSIGN_OR_RETURN(tls.server_cert, ReadFile("--grpc-server-cert", files.server_cert));
  VRAMD_ASSIGN_OR_RETURN(tls.server_key, ReadFile("--grpc-server-key", files.server_key));
  const std::vector<Certificate> chain = Certificates(tls.server_cert);
  if (chain.empty()) {
    return Status::InvalidArgument(fmt::format(
        "--grpc-server-cert: '{}' holds no PEM certificate", files.server_cert));
  }
  Bio key_bio = MemoryBio(tls.server_key);
  Key key(key_bio ? PEM_read_bio_PrivateKey(key_bio.get(), nullptr, &NoPassphrase, nullptr) : nullptr);
  ERR_clear_error();
  if (key == nullptr) {
    return Status::InvalidArgument(fmt::format(
        "--grpc-server-key: '{}' holds no PEM private key (an encrypted key cannot be used)",
        files.server_key));
  }
  if (X509_check_private_key(chain.front().get(), key.get()) != 1) {
    ERR_clear_error();
    return Status::InvalidArgument(fmt::format(
        "--grpc-server-key: the key in '{}' is not the key of the certificate in '{}'",
        files.server_key, files.server_cert));
  }
  if (files.mutual && files.root_cert.empty()) {
    return Status::InvalidArgument(
        "--grpc-use-ssl-mutual needs --grpc-root-cert: the CA certificates that sign the "
        "clients' certificates");
  }
  if (!files.root_cert.empty()) {
    VRAMD_ASSIGN_OR_RETURN(tls.root_certs, ReadFile("--grpc-root-cert", files.root_cert));
    if (Certificates(tls.root_certs).empty()) {
      return Status::InvalidArgument(fmt::format(
          "--grpc-root-cert: '{}' holds no PEM certificate", files.root_cert));
    }
  }
  return tls;
}

}  // namespace vramd::grpc_server
