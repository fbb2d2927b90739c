"""Triton's access flags (docs/security.md): gRPC over TLS (--grpc-use-ssl, and with
--grpc-use-ssl-mutual a client certificate its CAs signed), and restricted APIs
(--http-restricted-api: 403 without the header; --grpc-restricted-protocol: UNAVAILABLE without
the triton-grpc-protocol-<key> metadata). A setting that cannot work stops the start, naming
the flag. The certificates are made here with the openssl command.
"""

import json
import re
import shutil
import subprocess
import urllib.request

import numpy as np
import pytest

from e2e_helpers import FIXTURE_REPO, VRAMD_BIN, grpc_modules

MODEL = "identity_fp32"
BASE = ["--model-control-mode", "explicit", "--load-model", MODEL]


def openssl(*args, cwd):
    subprocess.run(["openssl"] + list(args), cwd=cwd, check=True, capture_output=True,
                   stdin=subprocess.DEVNULL)


def make_ca(d, name):
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-keyout", name + ".key", "-out", name + ".crt", "-days", "2",
            "-subj", "/CN=vramd test " + name, cwd=d)


def make_signed(d, name, ca, san=None):
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", name + ".key", "-out", name + ".csr", "-subj", "/CN=" + name, cwd=d)
    args = ["x509", "-req", "-in", name + ".csr", "-CA", ca + ".crt", "-CAkey", ca + ".key",
            "-CAcreateserial", "-out", name + ".crt", "-days", "2"]
    if san:
        (d / (name + ".ext")).write_text("subjectAltName=" + san + "\n")
        args += ["-extfile", name + ".ext"]
    openssl(*args, cwd=d)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    """A CA, a server certificate for localhost and 127.0.0.1, a client certificate it signed,
    and a client certificate of another CA."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed (scripts/install-deps.sh installs it)")
    d = tmp_path_factory.mktemp("certs")
    make_ca(d, "ca")
    make_ca(d, "other_ca")
    make_signed(d, "server", "ca", san="DNS:localhost,IP:127.0.0.1")
    make_signed(d, "client", "ca")
    make_signed(d, "stranger", "other_ca")
    return d


@pytest.fixture
def start(start_server):
    def _start(args, name):
        return start_server([FIXTURE_REPO], BASE + args, name=name, ready_models=[MODEL])
    return _start


def stop(s):
    s.assert_clean_exit(s.stop())


def infer_request(pb, values):
    x = np.asarray(values, dtype=np.float32)
    r = pb.ModelInferRequest(model_name=MODEL)
    r.inputs.add(name="INPUT0", datatype="FP32", shape=list(x.shape))
    r.raw_input_contents.append(x.tobytes())
    return r


def infer_values(pb, out):
    return np.frombuffer(out.raw_output_contents[0], dtype=np.float32).tolist()


def tls_channel(grpc, certs, port, client=None):
    key = chain = None
    if client is not None:
        key = (certs / (client + ".key")).read_bytes()
        chain = (certs / (client + ".crt")).read_bytes()
    creds = grpc.ssl_channel_credentials(root_certificates=(certs / "ca.crt").read_bytes(),
                                         private_key=key, certificate_chain=chain)
    return grpc.secure_channel("localhost:%d" % port, creds)


def test_grpc_over_tls(start, certs):
    grpc, pb, pb_grpc = grpc_modules()
    s = start(["--grpc-use-ssl=true", "--grpc-server-cert", str(certs / "server.crt"),
                         "--grpc-server-key", str(certs / "server.key")], "tls")
    try:
        port = s.grpc_port()
        assert "gRPC serves TLS" in s.log()
        with tls_channel(grpc, certs, port) as ch:
            stub = pb_grpc.GRPCInferenceServiceStub(ch)
            assert stub.ServerLive(pb.ServerLiveRequest(), timeout=30).live
            out = stub.ModelInfer(infer_request(pb, [1.5, -2.0]), timeout=30)
            assert infer_values(pb, out) == [1.5, -2.0]
        # A client speaking plaintext gets no answer: the handshake fails.
        with grpc.insecure_channel("127.0.0.1:%d" % port) as ch:
            with pytest.raises(grpc.RpcError) as e:
                pb_grpc.GRPCInferenceServiceStub(ch).ServerLive(pb.ServerLiveRequest(), timeout=10)
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE
        # HTTP is untouched (Triton has no TLS on HTTP either).
        assert s.client().get("/v2/health/ready").status == 200
    finally:
        stop(s)


def test_mutual_tls_requires_a_client_certificate_of_the_root(start, certs):
    grpc, pb, pb_grpc = grpc_modules()
    # --grpc-use-ssl-mutual alone turns TLS on, as in Triton.
    s = start(["--grpc-use-ssl-mutual=true",
                         "--grpc-server-cert", str(certs / "server.crt"),
                         "--grpc-server-key", str(certs / "server.key"),
                         "--grpc-root-cert", str(certs / "ca.crt")], "mutual")
    try:
        port = s.grpc_port()
        assert "requires client certificates" in s.log()
        with tls_channel(grpc, certs, port, client="client") as ch:
            out = pb_grpc.GRPCInferenceServiceStub(ch).ModelInfer(infer_request(pb, [7.0]),
                                                                   timeout=30)
            assert infer_values(pb, out) == [7.0]
        for client in (None, "stranger"):
            with tls_channel(grpc, certs, port, client=client) as ch:
                with pytest.raises(grpc.RpcError) as e:
                    pb_grpc.GRPCInferenceServiceStub(ch).ServerLive(pb.ServerLiveRequest(),
                                                                     timeout=10)
                assert e.value.code() == grpc.StatusCode.UNAVAILABLE, (client, e.value)
    finally:
        stop(s)


def run_until_exit(args, timeout=60):
    return subprocess.run([str(VRAMD_BIN), "serve", "--model-repository", str(FIXTURE_REPO),
                           "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0"] + args,
                          capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def assert_start_stopped(args, *texts):
    """vramd given `args` exits 1 before listening, its error saying each of `texts`."""
    p = run_until_exit(args)
    assert p.returncode == 1, p.stderr[-2000:]
    for text in texts:
        assert text in p.stderr, (text, p.stderr[-2000:])
    assert "listening" not in p.stderr


@pytest.mark.parametrize("case, text", [
    ("no_key", "--grpc-server-key is not given"),
    ("missing_cert", "--grpc-server-cert: cannot read"),
    ("garbage_cert", "holds no PEM certificate"),
    ("key_of_another", "is not the key of the certificate"),
    ("mutual_without_root", "--grpc-use-ssl-mutual needs --grpc-root-cert"),
    ("garbage_root", "--grpc-root-cert: "),
])
def test_tls_settings_that_cannot_work_stop_the_start(tmp_path, certs, case, text):
    cert, key = str(certs / "server.crt"), str(certs / "server.key")
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n")
    args = {
        "no_key": ["--grpc-use-ssl=true", "--grpc-server-cert", cert],
        "missing_cert": ["--grpc-use-ssl=true", "--grpc-server-cert", str(tmp_path / "none.crt"),
                         "--grpc-server-key", key],
        "garbage_cert": ["--grpc-use-ssl=true", "--grpc-server-cert", str(garbage),
                         "--grpc-server-key", key],
        "key_of_another": ["--grpc-use-ssl=true", "--grpc-server-cert", cert,
                           "--grpc-server-key", str(certs / "client.key")],
        "mutual_without_root": ["--grpc-use-ssl-mutual=true", "--grpc-server-cert", cert,
                                "--grpc-server-key", key],
        "garbage_root": ["--grpc-use-ssl-mutual=true", "--grpc-server-cert", cert,
                         "--grpc-server-key", key, "--grpc-root-cert", str(garbage)],
    }[case]
    assert_start_stopped(args, text)


def test_tls_files_without_use_ssl_are_warned_about(start, certs):
    grpc, pb, pb_grpc = grpc_modules()
    s = start(["--grpc-server-cert", str(certs / "server.crt")], "no_ssl")
    try:
        assert "--grpc-server-cert ignored: --grpc-use-ssl is not true" in s.log()
        with grpc.insecure_channel("127.0.0.1:%d" % s.grpc_port()) as ch:
            assert pb_grpc.GRPCInferenceServiceStub(ch).ServerLive(pb.ServerLiveRequest(),
                                                                   timeout=30).live
    finally:
        stop(s)


HTTP_RESTRICTION = ["--http-restricted-api=model-repository,inference:Admin-Key=s3cret",
                    "--http-restricted-api=statistics:stats-key=x=y"]


def test_http_restricted_api(start):
    grpc, pb, pb_grpc = grpc_modules()
    s = start(HTTP_RESTRICTION, "http_restricted")
    try:
        c = s.client()
        body = json.dumps({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [2],
                                       "data": [1.0, 2.0]}]}).encode()
        infer = "/v2/models/%s/infer" % MODEL
        expected = "This API is restricted, expecting header 'admin-key'"
        for headers in ({}, {"Admin-Key": "wrong"}, {"Admin-Key": "S3CRET"}):
            r = c.post(infer, body, headers)
            assert r.status == 403, (headers, r)
            assert r.json() == {"error": expected}
        # Header names compare without case; the value exactly.
        r = c.post(infer, body, {"ADMIN-KEY": "s3cret"})
        assert r.status == 200, r
        assert r.json()["outputs"][0]["data"] == [1.0, 2.0]
        # The restriction comes first, before the method is looked at, as in Triton.
        assert c.get(infer).status == 403
        assert c.get(infer, {"admin-key": "s3cret"}).status == 405
        # model-repository: the index, and vramd's own lifecycle endpoints with it.
        assert c.post("/v2/repository/index", b"").status == 403
        assert c.post("/v2/repository/index", b"", {"admin-key": "s3cret"}).status == 200
        assert c.get("/v2/repository/models/%s/lifecycle" % MODEL).status == 403
        # statistics: a value may hold '='; /v2/memory is vramd's, in statistics.
        for path in ("/v2/models/stats", "/v2/models/%s/stats" % MODEL, "/v2/memory"):
            r = c.get(path)
            assert r.status == 403 and "'stats-key'" in r.json()["error"], (path, r)
            assert c.get(path, {"stats-key": "x=y"}).status == 200, path
        # Open categories stay open; an unknown path is still 404.
        for path in ("/v2/health/ready", "/v2/models/%s/ready" % MODEL, "/v2",
                     "/v2/models/%s" % MODEL, "/v2/models/%s/config" % MODEL):
            assert c.get(path).status == 200, path
        assert c.get("/v2/nothing").status == 404
        # The metrics port is never restricted (as in Triton).
        port = int(re.search(r"metrics listening on [^\s]+:(\d+)", s.log()).group(1))
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as m:
            assert m.status == 200
        # gRPC has restrictions of its own, none here.
        with grpc.insecure_channel("127.0.0.1:%d" % s.grpc_port()) as ch:
            out = pb_grpc.GRPCInferenceServiceStub(ch).ModelInfer(infer_request(pb, [3.0]),
                                                                   timeout=30)
            assert infer_values(pb, out) == [3.0]
        # vramctl sends the key with --header.
        vramctl = [str(VRAMD_BIN.parent / "vramctl"), "lifecycle", MODEL,
                   "--url", "http://127.0.0.1:%d" % s.port]
        p = subprocess.run(vramctl, capture_output=True, text=True, timeout=30)
        assert p.returncode == 1 and "This API is restricted" in p.stderr, p.stderr
        p = subprocess.run(vramctl + ["--header", "Admin-Key:  s3cret "], capture_output=True,
                           text=True, timeout=30)
        assert p.returncode == 0 and MODEL in p.stdout, p.stderr
        p = subprocess.run(vramctl + ["--header", "no colon"], capture_output=True, text=True,
                           timeout=30)
        assert p.returncode == 2 and "--header 'no colon' is not NAME: VALUE" in p.stderr
        assert "HTTP restricted APIs: inference (header 'admin-key')" in s.log()
        assert "s3cret" not in s.log()
    finally:
        stop(s)


GRPC_RESTRICTION = ["--grpc-restricted-protocol=inference:infer-key=v1",
                    "--grpc-restricted-protocol=health,model-repository:admin-key=a"]


def test_grpc_restricted_protocol(start):
    grpc, pb, pb_grpc = grpc_modules()
    s = start(GRPC_RESTRICTION, "grpc_restricted")
    infer_md = [("triton-grpc-protocol-infer-key", "v1")]
    admin_md = [("triton-grpc-protocol-admin-key", "a")]
    try:
        with grpc.insecure_channel("127.0.0.1:%d" % s.grpc_port()) as ch:
            stub = pb_grpc.GRPCInferenceServiceStub(ch)
            for md in (None, [("triton-grpc-protocol-infer-key", "v2")], [("infer-key", "v1")]):
                with pytest.raises(grpc.RpcError) as e:
                    stub.ModelInfer(infer_request(pb, [1.0]), metadata=md, timeout=30)
                assert e.value.code() == grpc.StatusCode.UNAVAILABLE, md
                assert e.value.details() == ("This protocol is restricted, expecting header "
                                             "'triton-grpc-protocol-infer-key'")
            out = stub.ModelInfer(infer_request(pb, [1.0, 2.0]), metadata=infer_md, timeout=30)
            assert infer_values(pb, out) == [1.0, 2.0]

            # A stream is refused before any request of it is read.
            responses = stub.ModelStreamInfer(iter([infer_request(pb, [4.0])]), timeout=30)
            with pytest.raises(grpc.RpcError) as e:
                list(responses)
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE
            assert "triton-grpc-protocol-infer-key" in e.value.details()
            got = list(stub.ModelStreamInfer(iter([infer_request(pb, [4.0])]),
                                             metadata=infer_md, timeout=30))
            assert [infer_values(pb, r.infer_response) for r in got] == [[4.0]]

            # health: the KServe RPCs and grpc.health.v1.
            with pytest.raises(grpc.RpcError) as e:
                stub.ServerLive(pb.ServerLiveRequest(), timeout=30)
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE
            assert "'triton-grpc-protocol-admin-key'" in e.value.details()
            assert stub.ServerLive(pb.ServerLiveRequest(), metadata=admin_md, timeout=30).live
            check = ch.unary_unary("/grpc.health.v1.Health/Check",
                                   request_serializer=lambda _: b"",
                                   response_deserializer=lambda b: b)
            with pytest.raises(grpc.RpcError) as e:
                check(None, timeout=10)
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE
            assert check(None, metadata=admin_md, timeout=10) == b"\x08\x01"

            # model-repository; metadata stays open.
            with pytest.raises(grpc.RpcError) as e:
                stub.RepositoryIndex(pb.RepositoryIndexRequest(), timeout=30)
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE
            index = stub.RepositoryIndex(pb.RepositoryIndexRequest(), metadata=admin_md,
                                         timeout=30)
            assert MODEL in [m.name for m in index.models]
            assert stub.ServerMetadata(pb.ServerMetadataRequest(), timeout=30).name == "vramd"
        # HTTP has restrictions of its own, none here.
        r = s.client().post("/v2/models/%s/infer" % MODEL, json.dumps(
            {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1], "data": [5.0]}]}
        ).encode())
        assert r.status == 200, r
    finally:
        stop(s)


@pytest.mark.parametrize("flag, text", [
    ("--http-restricted-api=model-reposit:k=v", "unknown category 'model-reposit'"),
    ("--grpc-restricted-protocol=health:k", "no '=' between the key and the value"),
    ("--grpc-restricted-protocol=health=k", "no ':' after the categories"),
    ("--http-restricted-api=health:k=", "the header value is empty"),
    ("--http-restricted-api=health,,trace:k=v", "a category is empty"),
])
def test_restrictions_that_cannot_work_stop_the_start(flag, text):
    assert_start_stopped([flag], text, flag.split("=")[0])


def test_a_category_restricted_twice_stops_the_start(start):
    assert_start_stopped(["--http-restricted-api=health:a=1",
                          "--http-restricted-api=metadata,health:b=2"],
                         "category 'health' is restricted twice")
    # HTTP's and gRPC's restrictions are apart: the same category once in each is fine.
    s = start(["--http-restricted-api=trace:a=1",
                         "--grpc-restricted-protocol=trace:b=2"], "both")
    try:
        assert "HTTP restricted APIs: trace (header 'a')" in s.log()
        assert "gRPC restricted protocols: trace (header 'triton-grpc-protocol-b')" in s.log()
    finally:
        stop(s)
