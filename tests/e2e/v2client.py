"""A small KServe v2 HTTP client for the end-to-end tests (standard library + numpy only).

It speaks JSON and Triton's binary tensor data extension in both directions:
  - a request body is a JSON header optionally followed by raw tensor bytes; the header
    `Inference-Header-Content-Length` gives the JSON's length;
  - BYTES elements are serialized as a 4-byte little-endian length followed by the bytes;
  - BF16 travels as the upper 16 bits of an IEEE float32 (numpy has no bfloat16, so BF16
    tensors are float32 arrays here whose values are exactly representable in bfloat16).

Connections are http.client keep-alive connections; `V2Client` counts reconnects so that tests
can tell whether the server kept the connection open.
"""

import http.client
import json
import socket
import struct
import time

import numpy as np

HEADER_LENGTH = "Inference-Header-Content-Length"

# Wire name -> numpy dtype of the element as it travels (little-endian). BF16 is carried as
# uint16 bit patterns; BYTES has no fixed-size dtype.
WIRE_DTYPES = {
    "BOOL": np.dtype("bool"),
    "UINT8": np.dtype("<u1"),
    "UINT16": np.dtype("<u2"),
    "UINT32": np.dtype("<u4"),
    "UINT64": np.dtype("<u8"),
    "INT8": np.dtype("<i1"),
    "INT16": np.dtype("<i2"),
    "INT32": np.dtype("<i4"),
    "INT64": np.dtype("<i8"),
    "FP16": np.dtype("<f2"),
    "FP32": np.dtype("<f4"),
    "FP64": np.dtype("<f8"),
    "BF16": np.dtype("<u2"),
}
ALL_DATATYPES = list(WIRE_DTYPES) + ["BYTES"]

# The numpy dtype a test uses to hold values of each wire type.
HOST_DTYPES = dict(WIRE_DTYPES)
HOST_DTYPES["BF16"] = np.dtype("float32")


# ----------------------------------------------------------------------------------------------
# Tensor (de)serialization


def bf16_to_float32(bits):
    bits = np.asarray(bits, dtype="<u2")
    return (bits.astype("<u4") << 16).view("<f4")


def float32_to_bf16(values):
    """Truncates float32 values to bfloat16 bit patterns (exact for representable values)."""
    values = np.ascontiguousarray(values, dtype="<f4")
    return (values.view("<u4") >> 16).astype("<u2")


def serialize_bytes(elements):
    out = bytearray()
    for e in elements:
        if isinstance(e, str):
            e = e.encode("utf-8")
        out += struct.pack("<I", len(e))
        out += e
    return bytes(out)


def deserialize_bytes(data):
    elements = []
    pos = 0
    while pos < len(data):
        if pos + 4 > len(data):
            raise ValueError("truncated BYTES length prefix at offset %d" % pos)
        (n,) = struct.unpack_from("<I", data, pos)
        pos += 4
        if pos + n > len(data):
            raise ValueError("truncated BYTES element at offset %d" % pos)
        elements.append(bytes(data[pos : pos + n]))
        pos += n
    return elements


def tensor_to_raw(datatype, data):
    """Binary-extension bytes of a tensor given as numpy array (or list of bytes for BYTES)."""
    if datatype == "BYTES":
        return serialize_bytes(list(np.asarray(data, dtype=object).reshape(-1)))
    if datatype == "BF16":
        return float32_to_bf16(np.asarray(data, dtype=np.float32).reshape(-1)).tobytes()
    return np.ascontiguousarray(np.asarray(data), dtype=WIRE_DTYPES[datatype]).tobytes()


def raw_to_tensor(datatype, shape, raw):
    """numpy array (object array of bytes for BYTES) from binary-extension bytes."""
    if datatype == "BYTES":
        elements = deserialize_bytes(raw)
        arr = np.empty(len(elements), dtype=object)
        arr[:] = elements
        return arr.reshape(shape)
    dt = WIRE_DTYPES[datatype]
    if len(raw) % dt.itemsize:
        raise ValueError("%d bytes is not a whole number of %s elements" % (len(raw), datatype))
    arr = np.frombuffer(raw, dtype=dt)
    if datatype == "BF16":
        arr = bf16_to_float32(arr)
    return arr.reshape(shape)


def tensor_to_json_data(datatype, data):
    """Flat JSON list for the `data` field."""
    flat = np.asarray(data, dtype=object if datatype == "BYTES" else None).reshape(-1)
    if datatype == "BYTES":
        return [e.decode("utf-8") if isinstance(e, bytes) else e for e in flat]
    if datatype in ("FP16", "BF16", "FP32", "FP64"):
        return [float(v) for v in flat]
    if datatype == "BOOL":
        return [bool(v) for v in flat]
    return [int(v) for v in flat]


def json_data_to_tensor(datatype, shape, data):
    def flatten(x):
        if isinstance(x, list):
            for y in x:
                yield from flatten(y)
        else:
            yield x

    flat = list(flatten(data))
    if datatype == "BYTES":
        # Non-UTF-8 bytes come back escaped one code point per byte (\u00XX); valid UTF-8
        # comes back as text. Either way the caller compares with json_bytes_equal.
        arr = np.empty(len(flat), dtype=object)
        arr[:] = flat
        return arr.reshape(shape)
    return np.array(flat, dtype=HOST_DTYPES[datatype]).reshape(shape)


def json_bytes_equal(json_str, original):
    """True if a BYTES element returned as a JSON string stands for `original` bytes."""
    try:
        if original.decode("utf-8") == json_str:
            return True
    except UnicodeDecodeError:
        pass
    try:
        return json_str.encode("latin-1") == original
    except UnicodeEncodeError:
        return False


# ----------------------------------------------------------------------------------------------
# Request building


class Input:
    """One request input. `data`: numpy array, or a list of bytes/str for BYTES.

    `binary`: send in the binary extension. `shape` defaults to the data's shape.
    `json_data`: send this literal value as "data" instead of the converted data (for malformed
    requests). `extra`: merged into the input's JSON object last.
    """

    def __init__(self, name, datatype, data=None, shape=None, binary=False, json_data=None,
                 parameters=None, extra=None, raw=None):
        self.name = name
        self.datatype = datatype
        self.data = data
        if shape is None and data is not None:
            shape = list(np.asarray(data, dtype=object if datatype == "BYTES" else None).shape)
        self.shape = shape
        self.binary = binary
        self.json_data = json_data
        self.parameters = parameters
        self.extra = extra
        self.raw = raw  # explicit binary bytes, overrides data when binary

    def to_json(self):
        obj = {"name": self.name, "shape": list(self.shape) if self.shape is not None else None,
               "datatype": self.datatype}
        params = dict(self.parameters or {})
        if self.binary:
            params.setdefault("binary_data_size", len(self.binary_bytes()))
        elif self.json_data is not None:
            obj["data"] = self.json_data
        elif self.data is not None:
            obj["data"] = tensor_to_json_data(self.datatype, self.data)
        if params:
            obj["parameters"] = params
        if self.extra:
            obj.update(self.extra)
        if obj["shape"] is None:
            del obj["shape"]
        return obj

    def binary_bytes(self):
        if self.raw is not None:
            return self.raw
        return tensor_to_raw(self.datatype, self.data)


def build_infer_body(inputs, outputs=None, binary_data_output=None, request_id=None,
                     parameters=None, extra=None):
    """Returns (body, headers). `outputs`: list of names, or of (name, binary) pairs, or dicts."""
    req = {}
    if request_id is not None:
        req["id"] = request_id
    if parameters is not None:
        req["parameters"] = parameters
    if binary_data_output is not None:
        req.setdefault("parameters", {})["binary_data_output"] = binary_data_output
    req["inputs"] = [i.to_json() for i in inputs]
    if outputs is not None:
        outs = []
        for o in outputs:
            if isinstance(o, dict):
                outs.append(o)
            elif isinstance(o, tuple):
                outs.append({"name": o[0], "parameters": {"binary_data": o[1]}})
            else:
                outs.append({"name": o})
        req["outputs"] = outs
    if extra:
        req.update(extra)
    header = json.dumps(req).encode("utf-8")
    binary = b"".join(i.binary_bytes() for i in inputs if i.binary)
    if not binary:
        return header, {"Content-Type": "application/json"}
    return header + binary, {
        "Content-Type": "application/octet-stream",
        HEADER_LENGTH: str(len(header)),
    }


# ----------------------------------------------------------------------------------------------
# Responses


class Response:
    def __init__(self, status, reason, headers, body):
        self.status = status
        self.reason = reason
        self.headers = headers  # list of (name, value)
        self.body = body

    def header(self, name, default=None):
        for k, v in self.headers:
            if k.lower() == name.lower():
                return v
        return default

    def json(self):
        return json.loads(self.body.decode("utf-8"))

    def error_message(self):
        """The "error" string of an error body; raises AssertionError if the body is not one."""
        try:
            obj = self.json()
        except Exception as e:  # noqa: BLE001
            raise AssertionError("error body is not JSON (%s): %r" % (e, self.body[:300]))
        assert isinstance(obj, dict) and isinstance(obj.get("error"), str), (
            "error body has no string 'error': %r" % (obj,))
        return obj["error"]

    def __repr__(self):
        return "<Response %d %r>" % (self.status, self.body[:300])


class InferResult:
    """A decoded infer response: `json` (the JSON part) and `outputs` {name: numpy array}."""

    def __init__(self, response):
        self.response = response
        body = response.body
        hl = response.header(HEADER_LENGTH)
        if hl is not None:
            n = int(hl)
            header, binary = body[:n], body[n:]
        else:
            header, binary = body, b""
        self.json = json.loads(header.decode("utf-8"))
        self.binary_outputs = set()
        self.outputs = {}
        self.output_json = {}
        pos = 0
        for out in self.json.get("outputs", []):
            name = out["name"]
            self.output_json[name] = out
            params = out.get("parameters") or {}
            if "binary_data_size" in params:
                size = params["binary_data_size"]
                raw = binary[pos : pos + size]
                if len(raw) != size:
                    raise AssertionError("binary output %s: %d bytes announced, %d present"
                                         % (name, size, len(raw)))
                pos += size
                self.binary_outputs.add(name)
                self.outputs[name] = raw_to_tensor(out["datatype"], out["shape"], raw)
            else:
                self.outputs[name] = json_data_to_tensor(out["datatype"], out["shape"],
                                                         out["data"])
        if pos != len(binary):
            raise AssertionError("%d binary bytes follow the JSON but outputs use %d"
                                 % (len(binary), pos))


# ----------------------------------------------------------------------------------------------
# Client


class V2Client:
    def __init__(self, host, port, timeout=30.0):
        self.host = host
        self.port = port
        self.timeout = timeout
        self.conn = None
        self.connects = 0

    def _connect(self):
        self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        self.conn.connect()
        self.conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.connects += 1

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def local_port(self):
        """The client-side port of the current connection (None when closed)."""
        if self.conn is None or self.conn.sock is None:
            return None
        return self.conn.sock.getsockname()[1]

    def request(self, method, path, body=None, headers=None, chunked=False):
        """Sends one request on the keep-alive connection; reconnects once if the server had
        closed it while idle. Returns a Response with the whole body read."""
        headers = dict(headers or {})
        for attempt in (0, 1):
            if self.conn is None or self.conn.sock is None:
                self._connect()
            try:
                if chunked:
                    self.conn.request(method, path, body=body, headers=headers,
                                      encode_chunked=True)
                else:
                    self.conn.request(method, path, body=body, headers=headers)
                r = self.conn.getresponse()
                data = r.read()
                resp = Response(r.status, r.reason, r.getheaders(), data)
                if r.will_close:
                    self.close()
                return resp
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self.close()
                if attempt == 1:
                    raise
        raise AssertionError("unreachable")

    def get(self, path, headers=None):
        return self.request("GET", path, headers=headers)

    def post(self, path, body=b"", headers=None):
        return self.request("POST", path, body=body, headers=headers)

    @staticmethod
    def model_path(model, version=None, suffix=""):
        p = "/v2/models/" + model
        if version is not None:
            p += "/versions/" + str(version)
        return p + suffix

    def infer_raw(self, model, inputs, version=None, headers=None, **kw):
        body, hdrs = build_infer_body(inputs, **kw)
        hdrs.update(headers or {})
        return self.post(self.model_path(model, version, "/infer"), body, hdrs)

    def infer(self, model, inputs, version=None, **kw):
        """Infers and decodes; raises AssertionError (with the server's answer) unless 200."""
        r = self.infer_raw(model, inputs, version=version, **kw)
        assert r.status == 200, "infer %s: HTTP %d %r" % (model, r.status, r.body[:500])
        return InferResult(r)


# ----------------------------------------------------------------------------------------------
# Raw sockets, for requests http.client refuses to send


def raw_http(host, port, data, timeout=10.0, shutdown_write=False):
    """Sends raw bytes and reads one HTTP response. Returns Response, or None if the server
    closed the connection without answering. Tolerates the server closing early."""
    conn = RawConnection(host, port, timeout)
    try:
        conn.send(data)
        if shutdown_write:
            conn.sock.shutdown(socket.SHUT_WR)
        return conn.read_response()
    finally:
        conn.close()


class RawConnection:
    """A plain socket with a response reader that keeps unread bytes between responses."""

    def __init__(self, host, port, timeout=10.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.timeout = timeout
        self.buf = b""

    def close(self):
        self.sock.close()

    def send(self, data):
        """sendall, ignoring a reset or closed peer (the response, if any, is still read)."""
        try:
            self.sock.sendall(data)
            return True
        except (BrokenPipeError, ConnectionResetError):
            return False

    def _recv_more(self, deadline):
        if time.monotonic() > deadline:
            raise socket.timeout("no complete response within %.1fs" % self.timeout)
        self.sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = self.sock.recv(65536)
        except ConnectionResetError:
            chunk = b""
        self.buf += chunk
        return bool(chunk)

    def is_closed_by_peer(self, wait=5.0):
        """True if the peer closes (EOF/reset) within `wait` seconds with nothing more sent."""
        deadline = time.monotonic() + wait
        try:
            while True:
                if not self._recv_more(deadline):
                    return True
        except socket.timeout:
            return False

    def read_response(self, timeout=None, skip_interim=True):
        """One HTTP/1.1 response (Content-Length, chunked or close-delimited); None if the
        connection closed before any byte of it."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            while b"\r\n\r\n" not in self.buf:
                if not self._recv_more(deadline):
                    if not self.buf:
                        return None
                    raise AssertionError("connection closed inside response headers: %r"
                                         % self.buf)
            head, _, rest = self.buf.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            parts = lines[0].split(" ", 2)
            status = int(parts[1])
            reason = parts[2] if len(parts) > 2 else ""
            headers = []
            for line in lines[1:]:
                k, _, v = line.partition(":")
                headers.append((k.strip(), v.strip()))
            self.buf = rest
            if 100 <= status < 200 and skip_interim:
                continue
            break
        hdr = {k.lower(): v for k, v in headers}
        if 100 <= status < 200:
            return Response(status, reason, headers, b"")
        if "content-length" in hdr:
            n = int(hdr["content-length"])
            while len(self.buf) < n:
                if not self._recv_more(deadline):
                    raise AssertionError("connection closed inside response body")
            body, self.buf = self.buf[:n], self.buf[n:]
        elif "chunked" in hdr.get("transfer-encoding", "").lower():
            body = b""
            while True:
                while b"\r\n" not in self.buf:
                    if not self._recv_more(deadline):
                        raise AssertionError("connection closed inside chunked body")
                size_line, _, self.buf = self.buf.partition(b"\r\n")
                size = int(size_line.split(b";")[0], 16)
                while len(self.buf) < size + 2:
                    if not self._recv_more(deadline):
                        raise AssertionError("connection closed inside chunk")
                body += self.buf[:size]
                self.buf = self.buf[size + 2:]
                if size == 0:
                    break
        else:
            while self._recv_more(deadline):
                pass
            body, self.buf = self.buf, b""
        return Response(status, reason, headers, body)
