"""What the GPU checks in tests/device share: PASS/FAIL lines that collect the failures (a check
exits 1 when `failures` is not empty), HTTP calls that answer (status, body) whatever the
status, and the server's copy counters. Imported by the checks, which run as scripts from the
repository root (`python3 tests/device/<check>.py`), so this folder is on sys.path."""
import json
import re
import urllib.error
import urllib.request

failures = []


def check(ok, what):
    print(("PASS " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)
    return ok


def http(method, url, doc=None, raw=None, timeout=600):
    """`doc` is sent as JSON, `raw` as it is. The timeout is a ceiling: a wake or a load of a
    large model on the GPU takes seconds."""
    data = raw if raw is not None else (json.dumps(doc).encode() if doc is not None else None)
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def copied(metrics_url):
    """vramd_copy_bytes_total by direction, {"h2d": n, "d2h": n, "d2d": n}; None for a counter
    the server does not show, so that a check of "nothing copied" cannot pass without it."""
    with urllib.request.urlopen(metrics_url, timeout=10) as r:
        text = r.read().decode()
    got = {}
    for d in ("h2d", "d2h", "d2d"):
        m = re.search(r'^vramd_copy_bytes_total\{direction="%s"\} (\d+)' % d, text, re.M)
        got[d] = int(m.group(1)) if m else None
    return got
