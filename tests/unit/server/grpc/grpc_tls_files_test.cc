// GrpcServer::LoadTls: the TLS flags' files are read and checked before the server starts,
// and each way they cannot work is named. The PEM texts are made here with OpenSSL.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "server/grpc/grpc_server.h"

namespace vramd::grpc_server {
namespace {

using ::testing::HasSubstr;

struct Pem {
  std::string key;
  std::string cert;
};

using Bio = std::unique_ptr<BIO, decltype(&BIO_free)>;

Bio MemoryBio() { return Bio(BIO_new(BIO_s_mem()), &BIO_free); }

std::string Text(BIO* bio) {
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  return std::string(data, static_cast<size_t>(n));
}

// A self-signed P-256 certificate and its key.
Pem SelfSigned(const char* name) {
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(EVP_EC_gen("P-256"), &EVP_PKEY_free);
  std::unique_ptr<X509, decltype(&X509_free)> cert(X509_new(), &X509_free);
  X509_set_version(cert.get(), 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), 1);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), 0);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), 3600);
  X509_NAME* subject = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(name), -1, -1, 0);
  X509_set_issuer_name(cert.get(), subject);
  X509_set_pubkey(cert.get(), key.get());
  X509_sign(cert.get(), key.get(), EVP_sha256());
  Pem pem;
  Bio key_pem = MemoryBio();
  PEM_write_bio_PrivateKey(key_pem.get(), key.get(), nullptr, nullptr, 0, nullptr, nullptr);
  pem.key = Text(key_pem.get());
  Bio cert_pem = MemoryBio();
  PEM_write_bio_X509(cert_pem.get(), cert.get());
  pem.cert = Text(cert_pem.get());
  return pem;
}

class GrpcTlsFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("vramd_tls_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
            "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& text) {
    const auto path = dir_ / name;
    std::ofstream(path) << text;
    return path.string();
  }

  std::filesystem::path dir_;
};

TEST_F(GrpcTlsFilesTest, ReadsAMatchingCertificateAndKey) {
  const Pem server = SelfSigned("localhost");
  const Pem ca = SelfSigned("ca");
  auto tls = GrpcServer::LoadTls({Write("s.crt", server.cert), Write("s.key", server.key),
                                  Write("ca.crt", ca.cert), /*mutual=*/true});
  ASSERT_TRUE(tls.ok()) << tls.status().ToString();
  EXPECT_EQ(tls->server_cert, server.cert);
  EXPECT_EQ(tls->server_key, server.key);
  EXPECT_EQ(tls->root_certs, ca.cert);
  EXPECT_TRUE(tls->mutual);
  // Without mutual TLS the root certificate is optional.
  auto plain = GrpcServer::LoadTls({Write("s.crt", server.cert), Write("s.key", server.key), "",
                                    false});
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_TRUE(plain->root_certs.empty());
  EXPECT_FALSE(plain->mutual);
}

TEST_F(GrpcTlsFilesTest, NamesEachWayTheFilesCannotWork) {
  const Pem server = SelfSigned("localhost");
  const Pem other = SelfSigned("other");
  const std::string cert = Write("s.crt", server.cert);
  const std::string key = Write("s.key", server.key);
  const std::string junk = Write("junk.pem", "not a certificate\n");
  struct Case {
    GrpcServer::TlsFiles files;
    const char* why;
  };
  const Case cases[] = {
      {{"", key, "", false}, "--grpc-server-cert is not given"},
      {{cert, "", "", false}, "--grpc-server-key is not given"},
      {{(dir_ / "absent.crt").string(), key, "", false}, "--grpc-server-cert: cannot read"},
      {{junk, key, "", false}, "--grpc-server-cert: '"},
      {{cert, junk, "", false}, "holds no PEM private key"},
      {{cert, Write("o.key", other.key), "", false}, "is not the key of the certificate"},
      {{cert, key, "", true}, "--grpc-use-ssl-mutual needs --grpc-root-cert"},
      {{cert, key, junk, true}, "--grpc-root-cert: '"},
  };
  for (const Case& c : cases) {
    auto tls = GrpcServer::LoadTls(c.files);
    ASSERT_FALSE(tls.ok()) << c.why;
    EXPECT_EQ(tls.status().code(), StatusCode::kInvalidArgument) << c.why;
    EXPECT_THAT(std::string(tls.status().message()), HasSubstr(c.why));
  }
}

}  // namespace
}  // namespace vramd::grpc_server
