#!/usr/bin/env python3
"""Checks everything under deploy/ against schemas written for this project.

    scripts/validate_deploy.py [--deploy DIR] [--metrics-src DIR] [--quiet]

What is checked (docs/deployment.md, "The validator", says why each check exists):

- every YAML document under deploy/ (Deployment apps/v1, Service v1, PersistentVolumeClaim v1,
  Kustomization, KServe ServingRuntime and InferenceService) against a hand-written schema of
  the fields used: required fields, types, and the keys allowed at each level (an unknown key is
  an error naming its path, so a typo such as `portt` cannot pass silently), names and
  resource quantities in Kubernetes' formats, duplicate YAML keys;
- across documents: probes and Service targetPorts name container ports that exist, the
  Deployment's selector matches its template's labels and a Service's selector matches a
  Deployment, the Kustomization lists every manifest beside it, an InferenceService names a
  ServingRuntime that supports its model format and protocol;
- what vramd needs: containers run as non-root without privilege escalation, probes ask
  vramd's health endpoints on its HTTP port (liveness on /v2/health/live, never on readiness),
  the preStop drain and vramd's --exit-timeout-secs fit in terminationGracePeriodSeconds,
  GPU requests equal GPU limits, Prometheus annotations point at the metrics port;
- the Grafana dashboard JSON: the fields Grafana's dashboard schema requires, panel ids unique,
  panel types known, gridPos within 24 columns and not overlapping, every target's expr naming
  only metric families vramd exports (scanned from src/server/metrics/*.cc) and the datasource a
  defined template variable;
- the Dockerfile: Debian bookworm base images, at least two stages, a numeric non-root USER
  in the final stage, an ENTRYPOINT or CMD that runs vramd.

Python 3.11 standard library and python3-yaml (Debian) only. Exits 0 when everything passes,
1 with one line per error (file: path: message) otherwise, 2 on bad usage.
"""

import argparse
import json
import pathlib
import re
import sys

try:
    import yaml
except ImportError:  # pragma: no cover - the message is the point
    sys.stderr.write("validate_deploy.py needs PyYAML (Debian: apt install python3-yaml)\n")
    sys.exit(2)

ROOT = pathlib.Path(__file__).resolve().parent.parent

# Metric families not yet in src/server/metrics that the dashboard may already use, each with
# why. Remove an entry once the family is exported.
PENDING_METRICS = {
    "vramd_rollbacks_total": "automatic rollbacks by model and rule, being added to the server",
}

# ------------------------------------------------------------------------------------------------
# Errors


class Errors:
    def __init__(self):
        self.items = []

    def add(self, file, path, message):
        self.items.append((str(file), path, message))

    def lines(self):
        return ["%s: %s: %s" % (f, p, m) if p else "%s: %s" % (f, m) for f, p, m in self.items]


def join(path, key):
    if isinstance(key, int):
        return "%s[%d]" % (path, key)
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", str(key)):
        return "%s.%s" % (path, key) if path else str(key)
    return '%s["%s"]' % (path, key)


# ------------------------------------------------------------------------------------------------
# A small schema language: each node checks a value at a path and reports to Errors.


class Schema:
    def check(self, value, path, err):
        raise NotImplementedError


class Str(Schema):
    def __init__(self, pattern=None, what=None, max_len=None, non_empty=False):
        self.pattern = re.compile(pattern) if pattern else None
        self.what = what
        self.max_len = max_len
        self.non_empty = non_empty

    def check(self, value, path, err):
        if not isinstance(value, str):
            err(path, "must be a string, not %s" % type_name(value))
            return
        if self.non_empty and not value:
            err(path, "must not be empty")
        if self.max_len is not None and len(value) > self.max_len:
            err(path, "%r is longer than %d characters" % (value, self.max_len))
        if self.pattern and not self.pattern.fullmatch(value):
            err(path, "%r is not %s" % (value, self.what or "of the right form"))


class Int(Schema):
    def __init__(self, lo=None, hi=None):
        self.lo, self.hi = lo, hi

    def check(self, value, path, err):
        if isinstance(value, bool) or not isinstance(value, int):
            err(path, "must be an integer, not %s" % type_name(value))
            return
        if self.lo is not None and value < self.lo:
            err(path, "%d is below %d" % (value, self.lo))
        if self.hi is not None and value > self.hi:
            err(path, "%d is above %d" % (value, self.hi))


class Bool(Schema):
    def check(self, value, path, err):
        if not isinstance(value, bool):
            err(path, "must be a boolean, not %s" % type_name(value))


class Enum(Schema):
    def __init__(self, *values):
        self.values = values

    def check(self, value, path, err):
        if value not in self.values:
            err(path, "%r is not one of %s" % (value, ", ".join(map(str, self.values))))


class IntOrStr(Schema):
    def check(self, value, path, err):
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            err(path, "must be an integer or a string, not %s" % type_name(value))


QUANTITY_RE = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?\d+)?")
QUANTITY_SCALE = {"": 1, "n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9,
                  "T": 1e12, "P": 1e15, "E": 1e18, "Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30,
                  "Ti": 2 ** 40, "Pi": 2 ** 50, "Ei": 2 ** 60}


def parse_quantity(value):
    """A Kubernetes resource quantity as a float, or None when it is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if not isinstance(value, str):
        return None
    m = QUANTITY_RE.fullmatch(value)
    if not m:
        return None
    number, suffix = float(m.group(1)), m.group(3) or ""
    if suffix[:1] in ("e", "E"):
        return number * 10 ** int(suffix[1:])
    return number * QUANTITY_SCALE[suffix]


class Quantity(Schema):
    def check(self, value, path, err):
        if parse_quantity(value) is None:
            err(path, "%r is not a resource quantity (e.g. 500m, 2, 16Gi)" % (value,))


class Any(Schema):
    def check(self, value, path, err):
        pass


class ListOf(Schema):
    def __init__(self, item, min_items=0):
        self.item, self.min_items = item, min_items

    def check(self, value, path, err):
        if not isinstance(value, list):
            err(path, "must be a list, not %s" % type_name(value))
            return
        if len(value) < self.min_items:
            err(path, "needs at least %d item(s)" % self.min_items)
        for i, v in enumerate(value):
            self.item.check(v, join(path, i), err)


class MapOf(Schema):
    """A map with free keys (labels, annotations, resource names)."""

    def __init__(self, value, key=None):
        self.value, self.key = value, key

    def check(self, value, path, err):
        if not isinstance(value, dict):
            err(path, "must be a map, not %s" % type_name(value))
            return
        for k, v in value.items():
            if self.key is not None:
                self.key.check(k, join(path, k), err)
            self.value.check(v, join(path, k), err)


class Obj(Schema):
    """A map with known keys: `fields` name -> Schema, `required` names, `one_of` groups of
    which exactly one key must be present. Any other key is an error."""

    def __init__(self, fields, required=(), one_of=()):
        self.fields = fields
        self.required = tuple(required)
        self.one_of = tuple(one_of)

    def check(self, value, path, err):
        if not isinstance(value, dict):
            err(path, "must be a map, not %s" % type_name(value))
            return
        for k, v in value.items():
            schema = self.fields.get(k)
            if schema is None:
                err(join(path, k), "unknown field")
            else:
                schema.check(v, join(path, k), err)
        for k in self.required:
            if k not in value:
                err(join(path, k), "missing required field")
        for group in self.one_of:
            present = [k for k in group if k in value]
            if len(present) != 1:
                err(path, "needs exactly one of %s (has %s)"
                    % (", ".join(group), ", ".join(present) or "none"))


def type_name(value):
    if value is None:
        return "null"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            list: "a list", dict: "a map"}.get(type(value), type(value).__name__)


# ------------------------------------------------------------------------------------------------
# Kubernetes schemas (the subset of each kind's fields that manifests here may use; names as in
# the Kubernetes API reference).

DNS_LABEL = Str(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", "a DNS-1123 label (lowercase letters, digits, "
                "'-')", max_len=63)
DNS_SUBDOMAIN = Str(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*",
                    "a DNS-1123 subdomain", max_len=253)
PORT_NAME = Str(r"(?=.*[a-z])[a-z0-9]([a-z0-9]|-(?!-))*[a-z0-9]|[a-z]",
                "an IANA service name (lowercase letters, digits, single '-', a letter)",
                max_len=15)
LABEL_KEY = Str(r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?", "a label or annotation key")
LABEL_VALUE = Str(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?", "a label value", max_len=63)
PORT = Int(1, 65535)
NON_NEG = Int(0)
POSITIVE = Int(1)
STRINGS = ListOf(Str())

OBJECT_META = Obj({
    "name": DNS_SUBDOMAIN, "generateName": Str(), "namespace": DNS_LABEL,
    "labels": MapOf(LABEL_VALUE, key=LABEL_KEY),
    "annotations": MapOf(Str(), key=LABEL_KEY),
})
NAMED_META = Obj(OBJECT_META.fields, required=("name",))

LABEL_SELECTOR = Obj({
    "matchLabels": MapOf(LABEL_VALUE, key=LABEL_KEY),
    "matchExpressions": ListOf(Obj({"key": LABEL_KEY, "operator": Enum("In", "NotIn", "Exists",
                                                                      "DoesNotExist"),
                                    "values": STRINGS}, required=("key", "operator"))),
})

HTTP_GET = Obj({
    "path": Str(r"/.*", "an absolute path"), "port": IntOrStr(), "host": Str(),
    "scheme": Enum("HTTP", "HTTPS"),
    "httpHeaders": ListOf(Obj({"name": Str(), "value": Str()}, required=("name", "value"))),
}, required=("port",))
TCP_SOCKET = Obj({"port": IntOrStr(), "host": Str()}, required=("port",))
EXEC = Obj({"command": ListOf(Str(), min_items=1)}, required=("command",))
GRPC_ACTION = Obj({"port": PORT, "service": Str()}, required=("port",))

PROBE = Obj({
    "httpGet": HTTP_GET, "tcpSocket": TCP_SOCKET, "exec": EXEC, "grpc": GRPC_ACTION,
    "initialDelaySeconds": NON_NEG, "periodSeconds": POSITIVE, "timeoutSeconds": POSITIVE,
    "successThreshold": POSITIVE, "failureThreshold": POSITIVE,
    "terminationGracePeriodSeconds": POSITIVE,
}, one_of=(("httpGet", "tcpSocket", "exec", "grpc"),))

LIFECYCLE_HANDLER = Obj({
    "exec": EXEC, "httpGet": HTTP_GET, "tcpSocket": TCP_SOCKET,
    "sleep": Obj({"seconds": POSITIVE}, required=("seconds",)),
}, one_of=(("exec", "httpGet", "tcpSocket", "sleep"),))
LIFECYCLE = Obj({"postStart": LIFECYCLE_HANDLER, "preStop": LIFECYCLE_HANDLER})

CONTAINER_PORT = Obj({
    "containerPort": PORT, "name": PORT_NAME, "protocol": Enum("TCP", "UDP", "SCTP"),
    "hostPort": PORT, "hostIP": Str(),
}, required=("containerPort",))

ENV_VAR = Obj({
    "name": Str(r"[-._a-zA-Z][-._a-zA-Z0-9]*", "an environment variable name"),
    "value": Str(),
    "valueFrom": Obj({
        "fieldRef": Obj({"fieldPath": Str(), "apiVersion": Str()}, required=("fieldPath",)),
        "resourceFieldRef": Obj({"resource": Str(), "containerName": Str(),
                                 "divisor": Quantity()}, required=("resource",)),
        "configMapKeyRef": Obj({"name": Str(), "key": Str(), "optional": Bool()},
                               required=("key",)),
        "secretKeyRef": Obj({"name": Str(), "key": Str(), "optional": Bool()},
                            required=("key",)),
    }, one_of=(("fieldRef", "resourceFieldRef", "configMapKeyRef", "secretKeyRef"),)),
}, required=("name",))

RESOURCES = Obj({
    "limits": MapOf(Quantity()), "requests": MapOf(Quantity()),
    "claims": ListOf(Obj({"name": Str()}, required=("name",))),
})

CAPABILITIES = Obj({"add": STRINGS, "drop": STRINGS})
SECCOMP = Obj({"type": Enum("RuntimeDefault", "Localhost", "Unconfined"),
               "localhostProfile": Str()}, required=("type",))
SECURITY_CONTEXT = Obj({
    "runAsUser": NON_NEG, "runAsGroup": NON_NEG, "runAsNonRoot": Bool(),
    "allowPrivilegeEscalation": Bool(), "readOnlyRootFilesystem": Bool(), "privileged": Bool(),
    "capabilities": CAPABILITIES, "seccompProfile": SECCOMP,
    "procMount": Enum("Default", "Unmasked"),
})
POD_SECURITY_CONTEXT = Obj({
    "runAsUser": NON_NEG, "runAsGroup": NON_NEG, "runAsNonRoot": Bool(), "fsGroup": NON_NEG,
    "fsGroupChangePolicy": Enum("OnRootMismatch", "Always"),
    "supplementalGroups": ListOf(NON_NEG), "seccompProfile": SECCOMP,
    "sysctls": ListOf(Obj({"name": Str(), "value": Str()}, required=("name", "value"))),
})

VOLUME_MOUNT = Obj({
    "name": DNS_LABEL, "mountPath": Str(r"/.*", "an absolute path"), "readOnly": Bool(),
    "subPath": Str(), "subPathExpr": Str(),
    "mountPropagation": Enum("None", "HostToContainer", "Bidirectional"),
}, required=("name", "mountPath"))

CONTAINER_FIELDS = {
    "name": DNS_LABEL, "image": Str(non_empty=True),
    "imagePullPolicy": Enum("Always", "IfNotPresent", "Never"),
    "command": STRINGS, "args": STRINGS, "workingDir": Str(),
    "ports": ListOf(CONTAINER_PORT), "env": ListOf(ENV_VAR),
    "envFrom": ListOf(Obj({"prefix": Str(),
                           "configMapRef": Obj({"name": Str(), "optional": Bool()}),
                           "secretRef": Obj({"name": Str(), "optional": Bool()})})),
    "resources": RESOURCES, "volumeMounts": ListOf(VOLUME_MOUNT),
    "livenessProbe": PROBE, "readinessProbe": PROBE, "startupProbe": PROBE,
    "lifecycle": LIFECYCLE, "securityContext": SECURITY_CONTEXT,
    "terminationMessagePath": Str(),
    "terminationMessagePolicy": Enum("File", "FallbackToLogsOnError"),
    "stdin": Bool(), "tty": Bool(),
}
CONTAINER = Obj(CONTAINER_FIELDS, required=("name", "image"))

VOLUME = Obj({
    "name": DNS_LABEL,
    "persistentVolumeClaim": Obj({"claimName": DNS_SUBDOMAIN, "readOnly": Bool()},
                                 required=("claimName",)),
    "emptyDir": Obj({"medium": Enum("", "Memory"), "sizeLimit": Quantity()}),
    "configMap": Obj({"name": Str(), "defaultMode": NON_NEG, "optional": Bool(),
                      "items": ListOf(Obj({"key": Str(), "path": Str(), "mode": NON_NEG},
                                          required=("key", "path")))}),
    "secret": Obj({"secretName": Str(), "defaultMode": NON_NEG, "optional": Bool(),
                   "items": ListOf(Obj({"key": Str(), "path": Str(), "mode": NON_NEG},
                                       required=("key", "path")))}),
    "hostPath": Obj({"path": Str(), "type": Str()}, required=("path",)),
}, required=("name",), one_of=(("persistentVolumeClaim", "emptyDir", "configMap", "secret",
                                "hostPath"),))

TOLERATION = Obj({
    "key": Str(), "operator": Enum("Exists", "Equal"), "value": Str(),
    "effect": Enum("NoSchedule", "PreferNoSchedule", "NoExecute"),
    "tolerationSeconds": Int(),
})

POD_SPEC_FIELDS = {
    "containers": ListOf(CONTAINER, min_items=1), "initContainers": ListOf(CONTAINER),
    "volumes": ListOf(VOLUME), "restartPolicy": Enum("Always", "OnFailure", "Never"),
    "terminationGracePeriodSeconds": NON_NEG, "securityContext": POD_SECURITY_CONTEXT,
    "serviceAccountName": DNS_SUBDOMAIN, "automountServiceAccountToken": Bool(),
    "nodeSelector": MapOf(Str()), "tolerations": ListOf(TOLERATION), "affinity": Any(),
    "imagePullSecrets": ListOf(Obj({"name": Str()}, required=("name",))),
    "runtimeClassName": Str(), "priorityClassName": Str(), "enableServiceLinks": Bool(),
    "schedulerName": Str(), "dnsPolicy": Str(), "hostIPC": Bool(), "hostNetwork": Bool(),
    "hostPID": Bool(), "shareProcessNamespace": Bool(),
    "topologySpreadConstraints": ListOf(Any()),
}
POD_SPEC = Obj(POD_SPEC_FIELDS, required=("containers",))

DEPLOYMENT = Obj({
    "apiVersion": Enum("apps/v1"), "kind": Enum("Deployment"), "metadata": NAMED_META,
    "spec": Obj({
        "replicas": NON_NEG, "selector": LABEL_SELECTOR,
        "template": Obj({"metadata": OBJECT_META, "spec": POD_SPEC},
                        required=("metadata", "spec")),
        "strategy": Obj({"type": Enum("RollingUpdate", "Recreate"),
                         "rollingUpdate": Obj({"maxSurge": IntOrStr(),
                                               "maxUnavailable": IntOrStr()})}),
        "minReadySeconds": NON_NEG, "revisionHistoryLimit": NON_NEG,
        "progressDeadlineSeconds": POSITIVE, "paused": Bool(),
    }, required=("selector", "template")),
}, required=("apiVersion", "kind", "metadata", "spec"))

SERVICE = Obj({
    "apiVersion": Enum("v1"), "kind": Enum("Service"), "metadata": NAMED_META,
    "spec": Obj({
        "type": Enum("ClusterIP", "NodePort", "LoadBalancer", "ExternalName"),
        "selector": MapOf(LABEL_VALUE, key=LABEL_KEY),
        "ports": ListOf(Obj({
            "name": PORT_NAME, "port": PORT, "targetPort": IntOrStr(),
            "protocol": Enum("TCP", "UDP", "SCTP"), "appProtocol": Str(), "nodePort": PORT,
        }, required=("port",)), min_items=1),
        "clusterIP": Str(), "sessionAffinity": Enum("None", "ClientIP"),
        "publishNotReadyAddresses": Bool(), "internalTrafficPolicy": Enum("Cluster", "Local"),
        "externalTrafficPolicy": Enum("Cluster", "Local"),
        "ipFamilyPolicy": Enum("SingleStack", "PreferDualStack", "RequireDualStack"),
    }, required=("ports",)),
}, required=("apiVersion", "kind", "metadata", "spec"))

PVC = Obj({
    "apiVersion": Enum("v1"), "kind": Enum("PersistentVolumeClaim"), "metadata": NAMED_META,
    "spec": Obj({
        "accessModes": ListOf(Enum("ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany",
                                   "ReadWriteOncePod"), min_items=1),
        "resources": Obj({"requests": MapOf(Quantity()), "limits": MapOf(Quantity())},
                         required=("requests",)),
        "storageClassName": Str(), "volumeMode": Enum("Filesystem", "Block"),
        "volumeName": Str(), "selector": LABEL_SELECTOR, "dataSource": Any(),
    }, required=("accessModes", "resources")),
}, required=("apiVersion", "kind", "metadata", "spec"))

KUSTOMIZATION = Obj({
    "apiVersion": Enum("kustomize.config.k8s.io/v1beta1"), "kind": Enum("Kustomization"),
    "metadata": OBJECT_META, "resources": ListOf(Str(non_empty=True), min_items=1),
    "namespace": DNS_LABEL, "namePrefix": Str(), "nameSuffix": Str(),
    "labels": ListOf(Obj({"pairs": MapOf(LABEL_VALUE, key=LABEL_KEY),
                          "includeSelectors": Bool(), "includeTemplates": Bool()})),
    "commonAnnotations": MapOf(Str(), key=LABEL_KEY),
    "images": ListOf(Obj({"name": Str(), "newName": Str(), "newTag": Str(), "digest": Str()},
                         required=("name",))),
    "patches": ListOf(Any()),
}, required=("apiVersion", "kind", "resources"))

# KServe (serving.kserve.io): the ServingRuntime's containers are Kubernetes containers; its pod
# fields are the subset ServingRuntimePodSpec has.
RUNTIME_CONTAINER = Obj(CONTAINER_FIELDS, required=("name", "image"))
MODEL_FORMAT = Obj({"name": Str(non_empty=True), "version": Str(), "autoSelect": Bool(),
                    "priority": POSITIVE}, required=("name",))
PROTOCOLS = ("v1", "v2", "grpc-v1", "grpc-v2")
SERVING_RUNTIME = Obj({
    "apiVersion": Enum("serving.kserve.io/v1alpha1"),
    "kind": Enum("ServingRuntime", "ClusterServingRuntime"), "metadata": NAMED_META,
    "spec": Obj({
        "supportedModelFormats": ListOf(MODEL_FORMAT, min_items=1),
        "protocolVersions": ListOf(Enum(*PROTOCOLS), min_items=1),
        "containers": ListOf(RUNTIME_CONTAINER, min_items=1),
        "volumes": ListOf(VOLUME), "nodeSelector": MapOf(Str()),
        "tolerations": ListOf(TOLERATION), "affinity": Any(),
        "imagePullSecrets": ListOf(Obj({"name": Str()}, required=("name",))),
        "labels": MapOf(LABEL_VALUE, key=LABEL_KEY), "annotations": MapOf(Str(), key=LABEL_KEY),
        "multiModel": Bool(), "disabled": Bool(), "replicas": NON_NEG,
        "grpcEndpoint": Str(), "grpcDataEndpoint": Str(), "httpDataEndpoint": Str(),
        "builtInAdapter": Any(), "storageHelper": Obj({"disabled": Bool()}),
        "hostIPC": Bool(), "schedulerName": Str(),
    }, required=("supportedModelFormats", "containers")),
}, required=("apiVersion", "kind", "metadata", "spec"))

PREDICTOR_MODEL = Obj(dict(CONTAINER_FIELDS, **{
    "name": Str(), "image": Str(),
    "modelFormat": Obj({"name": Str(non_empty=True), "version": Str()}, required=("name",)),
    "runtime": DNS_SUBDOMAIN, "storageUri": Str(r"[a-z0-9+]+://.+", "a storage URI"),
    "protocolVersion": Enum(*PROTOCOLS), "runtimeVersion": Str(),
}), required=("modelFormat",))
INFERENCE_SERVICE = Obj({
    "apiVersion": Enum("serving.kserve.io/v1beta1"), "kind": Enum("InferenceService"),
    "metadata": NAMED_META,
    "spec": Obj({
        "predictor": Obj(dict(POD_SPEC_FIELDS, **{
            "containers": ListOf(CONTAINER), "model": PREDICTOR_MODEL,
            "minReplicas": NON_NEG, "maxReplicas": NON_NEG, "scaleTarget": POSITIVE,
            "scaleMetric": Enum("cpu", "memory", "concurrency", "rps"),
            "containerConcurrency": NON_NEG, "timeout": NON_NEG, "canaryTrafficPercent": NON_NEG,
            "deploymentStrategy": Any(), "labels": MapOf(LABEL_VALUE, key=LABEL_KEY),
            "annotations": MapOf(Str(), key=LABEL_KEY),
        })),
        "transformer": Any(), "explainer": Any(),
    }, required=("predictor",)),
}, required=("apiVersion", "kind", "metadata", "spec"))

KIND_SCHEMAS = {
    ("apps/v1", "Deployment"): DEPLOYMENT,
    ("v1", "Service"): SERVICE,
    ("v1", "PersistentVolumeClaim"): PVC,
    ("kustomize.config.k8s.io/v1beta1", "Kustomization"): KUSTOMIZATION,
    ("serving.kserve.io/v1alpha1", "ServingRuntime"): SERVING_RUNTIME,
    ("serving.kserve.io/v1alpha1", "ClusterServingRuntime"): SERVING_RUNTIME,
    ("serving.kserve.io/v1beta1", "InferenceService"): INFERENCE_SERVICE,
}

# ------------------------------------------------------------------------------------------------
# YAML loading: PyYAML's safe loader, but a key given twice in one map is an error (PyYAML keeps
# the last silently).


class StrictLoader(yaml.SafeLoader):
    pass


def _construct_mapping(loader, node, deep=False):
    loader.flatten_mapping(node)
    seen = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping", node.start_mark,
                "found duplicate key %r (first at line %d)" % (key, seen[key] + 1),
                key_node.start_mark)
        seen[key] = key_node.start_mark.line
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


class Doc:
    """One YAML document: its file, its index in the file, its data, and a label for errors."""

    def __init__(self, file, label, index, data):
        self.file, self.label, self.index, self.data = file, label, index, data

    @property
    def kind(self):
        return self.data.get("kind") if isinstance(self.data, dict) else None

    @property
    def name(self):
        meta = self.data.get("metadata") if isinstance(self.data, dict) else None
        return meta.get("name") if isinstance(meta, dict) else None


# ------------------------------------------------------------------------------------------------
# vramd's command line, as a container runs it


VRAMD_DEFAULT_PORTS = {"--http-port": 8000, "--grpc-port": 8001, "--metrics-port": 8002}
DEFAULT_EXIT_TIMEOUT_S = 30
DEFAULT_GRACE_S = 30  # Kubernetes' terminationGracePeriodSeconds default
HEALTH_PATHS = ("/v2/health/live", "/v2/health/ready")
MODEL_READY_RE = re.compile(r"/v2/models/[^/]+(/versions/\d+)?/ready")
KSERVE_DEFAULT_PORT = 8080
GPU = "nvidia.com/gpu"


def flag_value(argv, flag):
    """The value of `flag` in argv (`--flag=v` or `--flag v`), the last one given, or None."""
    value = None
    for i, a in enumerate(argv):
        if a == flag and i + 1 < len(argv):
            value = argv[i + 1]
        elif a.startswith(flag + "="):
            value = a[len(flag) + 1:]
    return value


def flag_values(argv, flag):
    out = []
    for i, a in enumerate(argv):
        if a == flag and i + 1 < len(argv):
            out.append(argv[i + 1])
        elif a.startswith(flag + "="):
            out.append(a[len(flag) + 1:])
    return out


def container_argv(container):
    return [str(a) for a in (container.get("command") or []) + (container.get("args") or [])]


def runs_vramd(container):
    """True for a container of vramd's image or one whose command runs vramd."""
    image = str(container.get("image") or "")
    base = image.rsplit("/", 1)[-1].split("@")[0].split(":")[0]
    cmd = container.get("command") or []
    return base == "vramd" or (bool(cmd) and pathlib.PurePosixPath(str(cmd[0])).name == "vramd")


def int_flag(argv, flag, default, err, path):
    v = flag_value(argv, flag)
    if v is None:
        return default
    try:
        return int(v)
    except ValueError:
        err(path, "%s %r is not a whole number" % (flag, v))
        return default


# ------------------------------------------------------------------------------------------------
# Checks of one pod template (a Deployment's, or a ServingRuntime's containers)


def port_table(container):
    """name -> number and the set of numbers of a container's declared ports."""
    names, numbers = {}, set()
    for p in container.get("ports") or []:
        if isinstance(p, dict) and isinstance(p.get("containerPort"), int):
            numbers.add(p["containerPort"])
            if isinstance(p.get("name"), str):
                names[p["name"]] = p["containerPort"]
    return names, numbers


def resolve_port(port, names, numbers, implicit, path, err):
    """The number a probe's port means, or None (reported) when no container port matches."""
    if isinstance(port, str) and not port.isdigit():
        if port not in names:
            err(path, "port %r is not the name of a port of this container (%s)"
                % (port, ", ".join(sorted(names)) or "it names none"))
            return None
        return names[port]
    if isinstance(port, (int, str)) and not isinstance(port, bool):
        n = int(port)
        if n not in numbers and n not in implicit:
            err(path, "port %d is not a containerPort of this container (%s)"
                % (n, ", ".join(map(str, sorted(numbers))) or "it declares none"))
            return None
        return n
    return None


def check_pod(pod, base, err, grace_applies, kserve=False):
    """Cross-field checks of a pod spec (a dict) at `base` (its path)."""
    if not isinstance(pod, dict):
        return
    containers = pod.get("containers") if isinstance(pod.get("containers"), list) else []
    volumes = {v.get("name") for v in pod.get("volumes") or [] if isinstance(v, dict)}
    pod_sc = pod.get("securityContext") if isinstance(pod.get("securityContext"), dict) else {}
    grace = pod.get("terminationGracePeriodSeconds", DEFAULT_GRACE_S)
    for i, c in enumerate(containers):
        if not isinstance(c, dict):
            continue
        cpath = join(join(base, "containers"), i)
        names, numbers = port_table(c)
        implicit = {KSERVE_DEFAULT_PORT} if kserve and not c.get("ports") else set()
        seen_names, seen_numbers = set(), set()
        for j, p in enumerate(c.get("ports") or []):
            if not isinstance(p, dict):
                continue
            if p.get("name") in seen_names:
                err(join(join(join(cpath, "ports"), j), "name"), "duplicate port name %r"
                    % p.get("name"))
            if p.get("containerPort") in seen_numbers:
                err(join(join(join(cpath, "ports"), j), "containerPort"),
                    "duplicate containerPort %s" % p.get("containerPort"))
            seen_names.add(p.get("name"))
            seen_numbers.add(p.get("containerPort"))
        for j, m in enumerate(c.get("volumeMounts") or []):
            if isinstance(m, dict) and m.get("name") not in volumes:
                err(join(join(join(cpath, "volumeMounts"), j), "name"),
                    "no volume named %r in the pod" % m.get("name"))

        # Probes: the port each uses must be one the container declares.
        probe_ports = {}
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            pr = c.get(probe)
            if not isinstance(pr, dict):
                continue
            for handler in ("httpGet", "tcpSocket", "grpc"):
                h = pr.get(handler)
                if isinstance(h, dict) and "port" in h:
                    n = resolve_port(h["port"], names, numbers, implicit,
                                     join(join(join(cpath, probe), handler), "port"), err)
                    probe_ports[probe] = (handler, n, h.get("path"))
            if probe in ("startupProbe", "livenessProbe") and pr.get("successThreshold", 1) != 1:
                err(join(join(cpath, probe), "successThreshold"),
                    "must be 1 for %s (Kubernetes refuses other values)" % probe)

        check_resources(c.get("resources"), join(cpath, "resources"), err)
        check_non_root(c, pod_sc, cpath, base, err)
        if runs_vramd(c):
            check_vramd_container(c, cpath, base, probe_ports, names, numbers, implicit, grace,
                                  grace_applies, err, kserve)


def check_resources(res, path, err):
    if not isinstance(res, dict):
        return
    req = res.get("requests") if isinstance(res.get("requests"), dict) else {}
    lim = res.get("limits") if isinstance(res.get("limits"), dict) else {}
    for name in sorted(set(req) & set(lim)):
        r, l = parse_quantity(req[name]), parse_quantity(lim[name])
        if r is not None and l is not None and r > l:
            err(join(join(path, "requests"), name), "request %s is above the limit %s"
                % (req[name], lim[name]))
    # Extended resources (GPUs) cannot be overcommitted: Kubernetes wants them in limits, and
    # a request, when given, equal to the limit, in whole units.
    for where, table in (("requests", req), ("limits", lim)):
        if GPU in table:
            q = parse_quantity(table[GPU])
            if q is None or q != int(q) or q < 0:
                err(join(join(path, where), GPU), "%r is not a whole number of GPUs"
                    % (table[GPU],))
    if GPU in req and GPU not in lim:
        err(join(join(path, "limits"), GPU), "missing: a GPU request needs an equal limit")
    elif GPU in req and parse_quantity(req[GPU]) != parse_quantity(lim[GPU]):
        err(join(join(path, "requests"), GPU), "must equal limits.%s (%s), not %s"
            % (GPU, lim[GPU], req[GPU]))


def check_non_root(c, pod_sc, cpath, base, err):
    sc = c.get("securityContext") if isinstance(c.get("securityContext"), dict) else {}
    scpath = join(cpath, "securityContext")
    non_root = sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot"))
    if non_root is not True:
        err(join(scpath, "runAsNonRoot"), "must be true (here or in %s.securityContext): "
            "the image runs as a non-root user and Kubernetes should enforce it" % base)
    user = sc.get("runAsUser", pod_sc.get("runAsUser"))
    if user == 0:
        err(join(scpath, "runAsUser"), "is 0 (root)")
    if sc.get("allowPrivilegeEscalation") is not False:
        err(join(scpath, "allowPrivilegeEscalation"), "must be false")
    if sc.get("privileged") is True:
        err(join(scpath, "privileged"), "must not be true")


def check_vramd_container(c, cpath, base, probe_ports, names, numbers, implicit, grace,
                          grace_applies, err, kserve):
    argv = container_argv(c)
    ports = {f: int_flag(argv, f, d, err, join(cpath, "args")) for f, d in
             VRAMD_DEFAULT_PORTS.items()}
    http_port = ports["--http-port"]
    # Every port vramd listens on is declared, so that Services and probes can name it. Not
    # for KServe: Knative lets a container declare one port, and KServe routes to it alone.
    for flag, n in ports.items():
        if not kserve and n not in numbers:
            err(join(cpath, "ports"), "vramd listens on %d (%s) but the container declares no "
                "such port" % (n, flag))
    if kserve:
        repos = flag_values(argv, "--model-repository") + flag_values(argv, "--model-store")
        if not any(r.rstrip("/") == "/mnt/models" for r in repos):
            err(join(cpath, "args"), "the repository must be /mnt/models, where KServe's "
                "storage initializer puts the model (--model-repository=/mnt/models)")
        if not c.get("ports") and http_port != KSERVE_DEFAULT_PORT:
            err(join(cpath, "args"), "--http-port is %d but KServe sends requests to %d when "
                "the container declares no ports" % (http_port, KSERVE_DEFAULT_PORT))

    # Probes: health is served on the HTTP port; liveness must not depend on readiness, which
    # fails on purpose while vramd loads its models or drains.
    wanted = {"livenessProbe": "live", "readinessProbe": "ready", "startupProbe": "ready"}
    for probe, kind in wanted.items():
        ppath = join(cpath, probe)
        if probe not in probe_ports:
            if probe == "startupProbe" and kserve:
                continue
            err(ppath, "missing: vramd answers GET /v2/health/%s for it" % kind)
            continue
        handler, n, path = probe_ports[probe]
        if handler != "httpGet":
            err(ppath, "use httpGet on /v2/health/%s: vramd's health is an HTTP endpoint"
                % kind)
            continue
        if n is not None and n != http_port:
            err(join(join(ppath, "httpGet"), "port"), "is %d, not vramd's HTTP port %d "
                "(--http-port): health endpoints are served there only" % (n, http_port))
        if kind == "live" and path != "/v2/health/live":
            err(join(join(ppath, "httpGet"), "path"), "%r: liveness must be /v2/health/live; "
                "readiness fails on purpose during loads and drains, and a liveness probe on it "
                "would restart the pod" % (path,))
        if kind == "ready" and path != "/v2/health/ready" and not MODEL_READY_RE.fullmatch(
                str(path)):
            err(join(join(ppath, "httpGet"), "path"), "%r is not vramd's readiness "
                "(/v2/health/ready or /v2/models/<m>/ready)" % (path,))

    # preStop: a drain through vramctl, which must reach this container's HTTP port and, with
    # the exit timeout after it, fit in the grace period.
    pre = ((c.get("lifecycle") or {}).get("preStop") or {}) if isinstance(
        c.get("lifecycle"), dict) else {}
    cmd = [str(x) for x in ((pre.get("exec") or {}).get("command") or [])] if isinstance(
        pre, dict) and isinstance(pre.get("exec"), dict) else []
    ppath = join(join(join(join(cpath, "lifecycle"), "preStop"), "exec"), "command")
    if not cmd:
        err(join(join(cpath, "lifecycle"), "preStop"), "missing: run `vramctl drain` so that "
            "readiness fails and traffic moves away before SIGTERM")
        return
    if pathlib.PurePosixPath(cmd[0]).name != "vramctl" or "drain" not in cmd[1:2]:
        err(ppath, "must run `vramctl drain ...`, not %r" % " ".join(cmd))
        return
    quiet = int_flag(cmd, "--quiet-ms", 1000, err, ppath)
    timeout = int_flag(cmd, "--timeout-ms", 30000, err, ppath)
    if quiet >= timeout:
        err(ppath, "--quiet-ms %d must be below --timeout-ms %d" % (quiet, timeout))
    url = flag_value(cmd, "--url") or "http://localhost:8000"
    m = re.match(r"https?://[^/:]+(?::(\d+))?", url)
    url_port = int(m.group(1)) if m and m.group(1) else (80 if m else None)
    if url_port != http_port:
        err(ppath, "--url %s does not reach vramd's HTTP port %d" % (url, http_port))
    exit_timeout = int_flag(argv, "--exit-timeout-secs", DEFAULT_EXIT_TIMEOUT_S, err,
                            join(cpath, "args"))
    if grace_applies:
        need = timeout / 1000.0 + exit_timeout
        if not isinstance(grace, int) or grace <= need:
            err(join(base, "terminationGracePeriodSeconds"),
                "%s s must exceed the drain's --timeout-ms (%g s) plus vramd's "
                "--exit-timeout-secs (%d s) = %g s, or the pod is killed mid-drain"
                % (grace, timeout / 1000.0, exit_timeout, need))


# ------------------------------------------------------------------------------------------------
# Per-kind checks across documents


def check_deployment(doc, all_docs, err):
    d = doc.data
    spec = d.get("spec") if isinstance(d.get("spec"), dict) else {}
    tmpl = spec.get("template") if isinstance(spec.get("template"), dict) else {}
    labels = ((tmpl.get("metadata") or {}).get("labels") or {}) if isinstance(
        tmpl.get("metadata"), dict) else {}
    sel = spec.get("selector") if isinstance(spec.get("selector"), dict) else {}
    match = sel.get("matchLabels") if isinstance(sel.get("matchLabels"), dict) else {}
    if not match and not sel.get("matchExpressions"):
        err("spec.selector", "selects nothing: give matchLabels")
    for k, v in match.items():
        if not isinstance(labels, dict) or labels.get(k) != v:
            err(join("spec.selector.matchLabels", k), "%s=%s does not match the template's "
                "labels (spec.template.metadata.labels: %s)"
                % (k, v, ", ".join("%s=%s" % kv for kv in sorted(labels.items())) or "none"))
    pod = tmpl.get("spec")
    check_pod(pod, "spec.template.spec", err, grace_applies=True)
    # Prometheus annotations: scrape "true", the port one of the pod's container ports.
    ann = ((tmpl.get("metadata") or {}).get("annotations") or {}) if isinstance(
        tmpl.get("metadata"), dict) else {}
    if isinstance(ann, dict) and "prometheus.io/scrape" in ann:
        apath = "spec.template.metadata.annotations"
        if ann.get("prometheus.io/scrape") not in ("true", "false"):
            err(join(apath, "prometheus.io/scrape"), 'must be "true" or "false"')
        port = ann.get("prometheus.io/port")
        numbers = set()
        for c in (pod or {}).get("containers") or [] if isinstance(pod, dict) else []:
            if isinstance(c, dict):
                numbers |= port_table(c)[1]
        if port is None or not str(port).isdigit() or int(port) not in numbers:
            err(join(apath, "prometheus.io/port"), "%r is not a container port of the pod"
                % (port,))
        else:
            for c in pod.get("containers") or []:
                if isinstance(c, dict) and runs_vramd(c):
                    metrics = int_flag(container_argv(c), "--metrics-port", 8002, err,
                                       "spec.template.spec.containers")
                    if int(port) != metrics:
                        err(join(apath, "prometheus.io/port"), "%s is not vramd's metrics "
                            "port %d (--metrics-port)" % (port, metrics))
        path = ann.get("prometheus.io/path", "/metrics")
        if path != "/metrics":
            err(join(apath, "prometheus.io/path"), "vramd serves metrics at /metrics, not %r"
                % (path,))
    # Volumes that claim a PersistentVolumeClaim: one must be defined beside this manifest.
    if isinstance(pod, dict):
        claims = {x.name for x in all_docs if x.kind == "PersistentVolumeClaim"
                  and x.file.parent == doc.file.parent}
        for i, v in enumerate(pod.get("volumes") or []):
            pvc = v.get("persistentVolumeClaim") if isinstance(v, dict) else None
            if isinstance(pvc, dict) and pvc.get("claimName") not in claims:
                err(join(join("spec.template.spec.volumes", i),
                         "persistentVolumeClaim.claimName"),
                    "%r names no PersistentVolumeClaim in %s" % (pvc.get("claimName"),
                                                                 doc.file.parent.name))


def check_service(doc, all_docs, err):
    spec = doc.data.get("spec") if isinstance(doc.data.get("spec"), dict) else {}
    selector = spec.get("selector") if isinstance(spec.get("selector"), dict) else {}
    if not selector:
        err("spec.selector", "missing: the Service would select no pods")
        return
    targets = []
    for d in all_docs:
        if d.kind != "Deployment" or d.file.parent != doc.file.parent:
            continue
        tmpl = (d.data.get("spec") or {}).get("template") or {}
        labels = (tmpl.get("metadata") or {}).get("labels") or {}
        if all(labels.get(k) == v for k, v in selector.items()):
            targets.append(tmpl.get("spec") or {})
    if not targets:
        err("spec.selector", "%s matches no Deployment's template labels in %s"
            % (", ".join("%s=%s" % kv for kv in sorted(selector.items())),
               doc.file.parent.name))
        return
    names, numbers = {}, set()
    for pod in targets:
        for c in pod.get("containers") or []:
            if isinstance(c, dict):
                n, s = port_table(c)
                names.update(n)
                numbers |= s
    ports = spec.get("ports") if isinstance(spec.get("ports"), list) else []
    seen = set()
    for i, p in enumerate(ports):
        if not isinstance(p, dict):
            continue
        ppath = join("spec.ports", i)
        if len(ports) > 1 and "name" not in p:
            err(join(ppath, "name"), "missing: a Service with several ports must name each")
        if p.get("name") in seen:
            err(join(ppath, "name"), "duplicate port name %r" % p.get("name"))
        seen.add(p.get("name"))
        target = p.get("targetPort", p.get("port"))
        if isinstance(target, str) and not target.isdigit():
            if target not in names:
                err(join(ppath, "targetPort"), "%r names no container port of the selected "
                    "pods (%s)" % (target, ", ".join(sorted(names)) or "none"))
        elif isinstance(target, (int, str)) and int(target) not in numbers:
            err(join(ppath, "targetPort"), "%s is no containerPort of the selected pods (%s)"
                % (target, ", ".join(map(str, sorted(numbers)))))
        if p.get("name") == "grpc" and p.get("appProtocol") not in ("grpc", "kubernetes.io/h2c"):
            err(join(ppath, "appProtocol"), "the gRPC port should say appProtocol: grpc")


def check_kustomization(doc, all_docs, err):
    base = doc.file.parent
    listed = []
    for i, r in enumerate(doc.data.get("resources") or []):
        if not isinstance(r, str):
            continue
        target = (base / r)
        if not target.exists():
            err(join("resources", i), "%r does not exist beside the kustomization" % r)
        listed.append(target.resolve())
    for d in {x.file for x in all_docs if x.file.parent == base and x.kind != "Kustomization"}:
        if d.resolve() not in listed:
            err("resources", "%s is in %s but not listed" % (d.name, base.name))


def check_serving_runtime(doc, all_docs, err):
    spec = doc.data.get("spec") if isinstance(doc.data.get("spec"), dict) else {}
    containers = spec.get("containers") if isinstance(spec.get("containers"), list) else []
    if not any(isinstance(c, dict) and c.get("name") == "kserve-container" for c in containers):
        err("spec.containers", "KServe serves the container named kserve-container; none is")
    check_pod(spec, "spec", err, grace_applies=False, kserve=True)
    ann = spec.get("annotations") if isinstance(spec.get("annotations"), dict) else {}
    if "prometheus.kserve.io/port" in ann:
        port = ann["prometheus.kserve.io/port"]
        for c in containers:
            if isinstance(c, dict) and runs_vramd(c):
                metrics = int_flag(container_argv(c), "--metrics-port", 8002, err,
                                   "spec.containers")
                if str(port) != str(metrics):
                    err(join("spec.annotations", "prometheus.kserve.io/port"),
                        "%r is not vramd's metrics port %d" % (port, metrics))


def check_inference_service(doc, all_docs, err):
    pred = (doc.data.get("spec") or {}).get("predictor") or {}
    model = pred.get("model") if isinstance(pred, dict) else None
    if not isinstance(model, dict):
        return
    check_resources(model.get("resources"), "spec.predictor.model.resources", err)
    name = model.get("runtime")
    if name is None:
        return
    runtimes = [d for d in all_docs if d.kind in ("ServingRuntime", "ClusterServingRuntime")
                and d.name == name]
    if not runtimes:
        err("spec.predictor.model.runtime", "%r names no ServingRuntime under deploy/" % name)
        return
    rspec = runtimes[0].data.get("spec") or {}
    fmt = model.get("modelFormat") or {}
    formats = [f for f in rspec.get("supportedModelFormats") or [] if isinstance(f, dict)]
    if not any(f.get("name") == fmt.get("name") and (
            "version" not in fmt or "version" not in f or f["version"] == fmt["version"])
               for f in formats):
        err("spec.predictor.model.modelFormat", "%s %s is not among runtime %r's "
            "supportedModelFormats (%s)" % (fmt.get("name"), fmt.get("version", ""), name,
                                            ", ".join("%s %s" % (f.get("name"),
                                                                 f.get("version", ""))
                                                      for f in formats)))
    proto = model.get("protocolVersion")
    if proto is not None and proto not in (rspec.get("protocolVersions") or []):
        err("spec.predictor.model.protocolVersion", "%r is not among runtime %r's "
            "protocolVersions" % (proto, name))


CROSS_CHECKS = {
    "Deployment": check_deployment,
    "Service": check_service,
    "Kustomization": check_kustomization,
    "ServingRuntime": check_serving_runtime,
    "ClusterServingRuntime": check_serving_runtime,
    "InferenceService": check_inference_service,
}


def load_yaml_docs(files, rel, errors):
    docs = []
    for f in files:
        try:
            loaded = list(yaml.load_all(f.read_text(), Loader=StrictLoader))
        except yaml.YAMLError as e:
            errors.add(rel(f), "", "not valid YAML: %s" % str(e).replace("\n", " "))
            continue
        loaded = [d for d in loaded if d is not None]
        for i, data in enumerate(loaded):
            label = rel(f) if len(loaded) == 1 else "%s (document %d)" % (rel(f), i + 1)
            docs.append(Doc(f, label, i, data))
    return docs


def check_yaml(docs, errors):
    for doc in docs:
        def err(path, message, _doc=doc):
            errors.add(_doc.label, path, message)

        if not isinstance(doc.data, dict):
            err("", "a manifest must be a map, not %s" % type_name(doc.data))
            continue
        key = (doc.data.get("apiVersion"), doc.data.get("kind"))
        schema = KIND_SCHEMAS.get(key)
        if schema is None:
            err("", "no schema for apiVersion %r kind %r (known: %s)" % (
                key[0], key[1], ", ".join("%s %s" % k for k in KIND_SCHEMAS)))
            continue
        before = len(errors.items)
        schema.check(doc.data, "", err)
        # Cross-field checks read the fields the schema vouched for; after a schema error
        # they still run, defensively, and may add their own.
        try:
            CROSS_CHECKS.get(doc.kind, lambda *a: None)(doc, docs, err)
        except (AttributeError, TypeError, ValueError) as e:
            if len(errors.items) == before:
                err("", "cannot check across fields: %s" % e)


# ------------------------------------------------------------------------------------------------
# The Grafana dashboard

# The field names of Grafana's dashboard JSON model (schemaVersion 39 and later), as its
# published schema types name them (@grafana/schema: Dashboard, Panel, RowPanel, GridPos,
# VariableModel, FieldConfig, TimePickerConfig, AnnotationQuery), plus the export fields
# __inputs, __requires and __elements.
PANEL_TYPES = {
    "timeseries", "stat", "gauge", "bargauge", "table", "text", "row", "heatmap", "piechart",
    "state-timeline", "status-history", "barchart", "histogram", "logs", "nodeGraph", "traces",
    "xychart", "candlestick", "geomap", "canvas", "flamegraph", "trend", "datagrid", "news",
    "dashlist", "alertlist", "annolist",
}
DASHBOARD_FIELDS = {
    "title": Str(non_empty=True), "uid": Str(r"[A-Za-z0-9_-]{1,40}",
                                             "1 to 40 letters, digits, '-' or '_'"),
    "schemaVersion": Int(17), "panels": ListOf(Any()),
    "id": Any(), "description": Str(),
    "annotations": Obj({"list": ListOf(Obj({
        "name": Str(), "datasource": Any(), "enable": Bool(), "hide": Bool(),
        "iconColor": Str(), "builtIn": Int(0, 1), "filter": Any(), "target": Any(),
        "type": Str(), "placement": Str(), "expr": Str(), "step": Str(),
        "titleFormat": Str(), "textFormat": Str(), "tagKeys": Str(),
    }, required=("name",)))}),
    "editable": Bool(), "fiscalYearStartMonth": Int(0, 11), "gnetId": Any(),
    "graphTooltip": Int(0, 2), "links": ListOf(Any()), "liveNow": Bool(), "refresh": Str(),
    "style": Str(), "tags": ListOf(Str()), "templating": Obj({"list": ListOf(Any())}),
    "time": Obj({"from": Str(), "to": Str()}, required=("from", "to")),
    "timepicker": Obj({"refresh_intervals": ListOf(Str()), "hidden": Bool(),
                       "time_options": ListOf(Str()), "nowDelay": Str(),
                       "quick_ranges": ListOf(Any())}),
    "timezone": Str(), "version": Int(0), "weekStart": Str(), "preload": Bool(),
    "revision": Int(), "snapshot": Any(), "__inputs": ListOf(Any()),
    "__requires": ListOf(Any()), "__elements": Any(),
}
DASHBOARD = Obj(DASHBOARD_FIELDS, required=("title", "uid", "schemaVersion", "panels"))
DATASOURCE_REF = Obj({"type": Str(), "uid": Str()}, required=("uid",))
GRID_POS = Obj({"x": Int(0, 23), "y": Int(0), "w": Int(1, 24), "h": Int(1), "static": Bool()},
               required=("x", "y", "w", "h"))
TARGET = Obj({
    "refId": Str(r"[A-Za-z0-9_]+", "a query id"), "expr": Str(non_empty=True),
    "legendFormat": Str(), "datasource": DATASOURCE_REF, "interval": Str(),
    "intervalFactor": Int(1), "format": Enum("time_series", "table", "heatmap"),
    "instant": Bool(), "range": Bool(), "hide": Bool(), "exemplar": Bool(),
    "editorMode": Enum("code", "builder"), "step": Int(1), "queryType": Str(),
}, required=("refId", "expr"))
FIELD_CONFIG = Obj({
    "unit": Str(), "decimals": Int(0), "min": Any(), "max": Any(), "displayName": Str(),
    "displayNameFromDS": Str(), "description": Str(), "noValue": Str(), "color": MapOf(Any()),
    "custom": MapOf(Any()), "links": ListOf(Any()), "mappings": ListOf(Obj({
        "type": Enum("value", "range", "regex", "special"), "options": MapOf(Any())},
        required=("type", "options"))),
    "thresholds": Obj({"mode": Enum("absolute", "percentage"), "steps": ListOf(Obj({
        "color": Str(), "value": Any(), "valueExpr": Str()}, required=("color", "value")),
        min_items=1)}, required=("mode", "steps")),
    "path": Str(), "writeable": Bool(), "filterable": Bool(), "actions": ListOf(Any()),
})
PANEL_FIELDS = {
    "id": Int(1), "type": Str(), "title": Str(), "description": Str(), "gridPos": GRID_POS,
    "datasource": DATASOURCE_REF, "targets": ListOf(TARGET),
    "fieldConfig": Obj({"defaults": FIELD_CONFIG, "overrides": ListOf(Any())}),
    "options": MapOf(Any()), "transparent": Bool(), "pluginVersion": Str(),
    "links": ListOf(Any()), "repeat": Str(), "repeatDirection": Enum("h", "v"),
    "maxPerRow": Int(1), "interval": Str(), "maxDataPoints": Int(1), "timeFrom": Str(),
    "timeShift": Str(), "hideTimeOverride": Bool(), "transformations": ListOf(Any()),
    "collapsed": Bool(), "panels": ListOf(Any()), "libraryPanel": Any(),
    "cacheTimeout": Str(), "queryCachingTTL": Int(0), "timeCompare": Str(),
}
PANEL = Obj(PANEL_FIELDS, required=("id", "type", "title", "gridPos"))
VARIABLE = Obj({
    "name": Str(r"[A-Za-z_][A-Za-z0-9_]*", "a variable name"),
    "type": Enum("query", "datasource", "custom", "constant", "interval", "textbox", "adhoc"),
    "label": Str(), "description": Str(), "query": Any(), "datasource": Any(),
    "definition": Str(), "refresh": Int(0, 2), "regex": Str(), "sort": Int(0, 8),
    "multi": Bool(), "includeAll": Bool(), "allValue": Any(), "current": Any(),
    "options": ListOf(Any()), "hide": Int(0, 2), "skipUrlSync": Bool(),
    "allowCustomValue": Bool(), "regexApplyTo": Str(), "staticOptions": ListOf(Any()),
    "staticOptionsOrder": Str(), "valuesFormat": Str(), "enableGroupBy": Bool(),
}, required=("name", "type"))

PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool",
                "offset", "and", "or", "unless", "atan2", "inf", "nan"}


def metric_families(metrics_dir):
    """Every "vramd_*" or "nv_*" string literal in the metrics sources: the families exported."""
    names = set()
    for f in sorted(pathlib.Path(metrics_dir).glob("*.cc")):
        names |= set(re.findall(r'"((?:vramd|nv)_[A-Za-z0-9_]+)"', f.read_text()))
    return names


def promql_metric_names(expr):
    """The metric names a PromQL expression selects by name (Grafana's $variables removed)."""
    s = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', expr)
    s = re.sub(r"\$\{[^}]*\}|\$\w+|\[\[\w+\]\]", " ", s)
    s = re.sub(r"\{[^}]*\}", " ", s)
    s = re.sub(r"\[[^\]]*\]", " ", s)
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)
    names = []
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", s):
        tok = m.group(0)
        if m.start() > 0 and (s[m.start() - 1].isdigit() or s[m.start() - 1] == "."):
            continue  # the unit of a duration or the exponent of a number
        if s[m.end():].lstrip().startswith("("):
            continue  # a function or an aggregation
        if tok.lower() in PROMQL_WORDS:
            continue
        names.append(tok)
    return names


def iter_panels(panels, path):
    for i, p in enumerate(panels if isinstance(panels, list) else []):
        ppath = join(path, i)
        yield p, ppath
        if isinstance(p, dict) and isinstance(p.get("panels"), list):
            yield from iter_panels(p["panels"], join(ppath, "panels"))


def check_dashboard(file, label, families, errors):
    def err(path, message):
        errors.add(label, path, message)

    try:
        dash = json.loads(file.read_text())
    except ValueError as e:
        err("", "not valid JSON: %s" % e)
        return
    if not isinstance(dash, dict):
        err("", "a dashboard must be a JSON object")
        return
    DASHBOARD.check(dash, "", err)
    variables = {}
    for i, v in enumerate((dash.get("templating") or {}).get("list") or []):
        vpath = join("templating.list", i)
        VARIABLE.check(v, vpath, err)
        if not isinstance(v, dict):
            continue
        if v.get("name") in variables:
            err(join(vpath, "name"), "duplicate variable %r" % v.get("name"))
        variables[v.get("name")] = v
        if v.get("type") == "datasource" and v.get("query") != "prometheus":
            err(join(vpath, "query"), "the datasource variable must list prometheus sources")
        if v.get("type") == "query":
            q = v.get("query")
            text = q.get("query") if isinstance(q, dict) else q
            if not isinstance(text, str):
                err(join(vpath, "query"), "must be a string or {query: string}")
                continue
            check_datasource(v.get("datasource"), join(vpath, "datasource"), variables, err,
                             required=True)
            m = re.fullmatch(r"\s*label_values\(\s*(.+?)\s*,\s*(\w+)\s*\)\s*", text)
            exprs = [m.group(1)] if m else re.findall(r"query_result\((.*)\)", text)
            for e in exprs:
                check_metric_names(e, join(vpath, "query"), families, err)
    ids = {}
    rects = []
    for p, ppath in iter_panels(dash.get("panels"), "panels"):
        PANEL.check(p, ppath, err)
        if not isinstance(p, dict):
            continue
        pid = p.get("id")
        if isinstance(pid, int) and not isinstance(pid, bool):
            if pid in ids:
                err(join(ppath, "id"), "duplicate panel id %d (also %s)" % (pid, ids[pid]))
            else:
                ids[pid] = ppath
        ptype = p.get("type")
        if isinstance(ptype, str) and ptype not in PANEL_TYPES:
            err(join(ppath, "type"), "%r is not a known panel type (%s)"
                % (ptype, ", ".join(sorted(PANEL_TYPES))))
        g = p.get("gridPos")
        if isinstance(g, dict) and all(isinstance(g.get(k), int) for k in "xywh"):
            if g["x"] + g["w"] > 24:
                err(join(ppath, "gridPos"), "x %d + w %d runs past the 24 columns"
                    % (g["x"], g["w"]))
            if ppath.count("panels") == 1:  # top level: rows' own panels have their own grid
                for other, opath in rects:
                    if (g["x"] < other["x"] + other["w"] and other["x"] < g["x"] + g["w"]
                            and g["y"] < other["y"] + other["h"]
                            and other["y"] < g["y"] + g["h"]):
                        err(join(ppath, "gridPos"), "overlaps %s" % opath)
                rects.append((g, ppath))
        targets = p.get("targets") if isinstance(p.get("targets"), list) else []
        if ptype == "row" and targets:
            err(join(ppath, "targets"), "a row has no queries")
        if targets and "datasource" not in p and not all(
                isinstance(t, dict) and "datasource" in t for t in targets):
            err(join(ppath, "datasource"), "missing: a panel with queries needs a datasource")
        if "datasource" in p:
            check_datasource(p["datasource"], join(ppath, "datasource"), variables, err)
        refs = set()
        for j, t in enumerate(targets):
            if not isinstance(t, dict):
                continue
            tpath = join(join(ppath, "targets"), j)
            if t.get("refId") in refs:
                err(join(tpath, "refId"), "duplicate refId %r" % t.get("refId"))
            refs.add(t.get("refId"))
            if "datasource" in t:
                check_datasource(t["datasource"], join(tpath, "datasource"), variables, err)
            if isinstance(t.get("expr"), str):
                check_metric_names(t["expr"], join(tpath, "expr"), families, err)
                for var in re.findall(r"\$\{?(\w+)", t["expr"]):
                    if not var.startswith("__") and var not in variables:
                        err(join(tpath, "expr"), "uses $%s, which is no template variable"
                            % var)


def check_datasource(ds, path, variables, err, required=False):
    if ds is None:
        if required:
            err(path, "missing")
        return
    if isinstance(ds, dict):
        uid = ds.get("uid")
        if ds.get("type") not in (None, "prometheus"):
            err(join(path, "type"), "%r: vramd's metrics are read from Prometheus"
                % ds.get("type"))
    else:
        uid = ds
    if not isinstance(uid, str):
        err(path, "must be {type: prometheus, uid: ${variable}}")
        return
    m = re.fullmatch(r"\$\{(\w+)\}|\$(\w+)", uid)
    if not m:
        err(path, "uid %r is fixed to one Grafana's data source: use a datasource template "
            "variable (${datasource}) so that the dashboard imports anywhere" % uid)
        return
    name = m.group(1) or m.group(2)
    if name not in variables or variables[name].get("type") != "datasource":
        err(path, "${%s} is not a datasource template variable" % name)


def check_metric_names(expr, path, families, err):
    for name in promql_metric_names(expr):
        if name not in families and name not in PENDING_METRICS:
            err(path, "unknown metric %r: vramd exports no such family "
                "(src/server/metrics/*.cc)" % name)


# ------------------------------------------------------------------------------------------------
# The Dockerfile


def dockerfile_instructions(text):
    """(line number, INSTRUCTION, arguments) for each instruction, continuations joined."""
    out, buf, start = [], "", 0
    for n, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not buf and (not stripped or stripped.startswith("#")):
            continue
        if buf and stripped.startswith("#"):
            continue  # a comment inside a continued instruction
        if not buf:
            start = n
        if stripped.endswith("\\"):
            buf += stripped[:-1] + " "
            continue
        buf += stripped
        parts = buf.split(None, 1)
        out.append((start, parts[0].upper(), parts[1] if len(parts) > 1 else ""))
        buf = ""
    if buf:
        parts = buf.split(None, 1)
        out.append((start, parts[0].upper(), parts[1] if len(parts) > 1 else ""))
    return out


BOOKWORM_RE = re.compile(r"(docker\.io/)?(library/)?debian:bookworm(-slim)?(-\d{8})?(@sha256:"
                         r"[0-9a-f]{64})?")


def exec_form(args):
    try:
        v = json.loads(args)
    except ValueError:
        return None
    return v if isinstance(v, list) and all(isinstance(x, str) for x in v) else None


def check_dockerfile(file, label, errors):
    def err(line, message):
        errors.add(label, "line %d" % line if line else "", message)

    instructions = dockerfile_instructions(file.read_text())
    global_args = {}
    stages = []  # dicts: name, line, instructions
    for line, op, args in instructions:
        if op == "ARG" and not stages:
            k, _, v = args.partition("=")
            global_args[k.strip()] = v.strip().strip('"')
            continue
        if op == "FROM":
            words = [w for w in args.split() if not w.startswith("--")]
            image = words[0] if words else ""
            image = re.sub(r"\$\{?(\w+)\}?", lambda m: global_args.get(m.group(1), m.group(0)),
                           image)
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else None
            known = {s["name"] for s in stages if s["name"]}
            if image not in known and not BOOKWORM_RE.fullmatch(image):
                err(line, "FROM %s: every stage must start from Debian bookworm "
                    "(debian:bookworm or debian:bookworm-slim) or an earlier stage" % image)
            stages.append({"name": name, "line": line, "ops": []})
            continue
        if not stages:
            err(line, "%s before the first FROM" % op)
            continue
        stages[-1]["ops"].append((line, op, args))
    if len(stages) < 2:
        err(0, "needs at least two stages (build, then a runtime image without the toolchain);"
            " has %d" % len(stages))
    if not stages:
        return
    for i, st in enumerate(stages):
        for line, op, args in st["ops"]:
            if op == "COPY":
                m = re.search(r"--from=(\S+)", args)
                if m:
                    src = m.group(1)
                    earlier = {s["name"] for s in stages[:i] if s["name"]} | {
                        str(k) for k in range(i)}
                    if src not in earlier:
                        err(line, "COPY --from=%s names no earlier stage" % src)
    final = stages[-1]
    users = [(line, args.strip()) for line, op, args in final["ops"] if op == "USER"]
    if not users:
        err(final["line"], "the final stage has no USER: it would run as root")
    else:
        line, user = users[-1]
        name = user.split(":", 1)[0]
        if name in ("root", "0"):
            err(line, "USER %s: the final stage must run as a non-root user" % user)
        elif not name.isdigit():
            err(line, "USER %s: give a numeric uid (e.g. 1000), which Kubernetes' runAsNonRoot "
                "can verify; a name it cannot" % user)
    entry = [(line, args) for line, op, args in final["ops"] if op == "ENTRYPOINT"]
    cmd = [(line, args) for line, op, args in final["ops"] if op == "CMD"]
    chosen = entry[-1] if entry else (cmd[-1] if cmd else None)
    if chosen is None:
        err(final["line"], "the final stage has neither ENTRYPOINT nor CMD")
    else:
        line, args = chosen
        argv = exec_form(args)
        if argv is None:
            err(line, "use the exec form ([\"/usr/local/bin/vramd\", ...]) so that vramd is "
                "PID 1 and receives SIGTERM itself, not through a shell")
        elif not argv or pathlib.PurePosixPath(argv[0]).name != "vramd":
            err(line, "the image must run vramd, not %r" % (argv[0] if argv else ""))
    exposed = set()
    for line, op, args in final["ops"]:
        if op == "EXPOSE":
            for w in args.split():
                port = w.split("/")[0]
                if not port.isdigit() or not 1 <= int(port) <= 65535:
                    err(line, "EXPOSE %s is not a port" % w)
                else:
                    exposed.add(int(port))
    missing = sorted(set(VRAMD_DEFAULT_PORTS.values()) - exposed)
    if missing:
        err(final["line"], "the final stage does not EXPOSE vramd's port(s) %s"
            % ", ".join(map(str, missing)))


# ------------------------------------------------------------------------------------------------


def validate(deploy_dir, metrics_dir, root=None):
    """Checks everything under `deploy_dir`; returns (error lines, files checked)."""
    deploy_dir = pathlib.Path(deploy_dir)
    root = pathlib.Path(root) if root else deploy_dir.parent

    def rel(f):
        try:
            return str(f.relative_to(root))
        except ValueError:
            return str(f)

    errors = Errors()
    if not deploy_dir.is_dir():
        errors.add(str(deploy_dir), "", "no such directory")
        return errors.lines(), 0
    yaml_files = sorted(p for p in deploy_dir.rglob("*") if p.suffix in (".yaml", ".yml"))
    json_files = sorted(deploy_dir.rglob("*.json"))
    dockerfiles = sorted(p for p in deploy_dir.rglob("*") if p.name == "Dockerfile"
                         or p.name.endswith(".Dockerfile"))
    docs = load_yaml_docs(yaml_files, rel, errors)
    check_yaml(docs, errors)
    families = metric_families(metrics_dir)
    if not families:
        errors.add(str(metrics_dir), "", "no metric family found in *.cc: wrong --metrics-src?")
    for f in json_files:
        check_dashboard(f, rel(f), families, errors)
    for f in dockerfiles:
        check_dockerfile(f, rel(f), errors)
    if not yaml_files and not json_files and not dockerfiles:
        errors.add(rel(deploy_dir), "", "nothing to check")
    return errors.lines(), len(yaml_files) + len(json_files) + len(dockerfiles)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--deploy", default=str(ROOT / "deploy"), help="the folder to check")
    ap.add_argument("--metrics-src", default=str(ROOT / "src" / "server" / "metrics"),
                    help="where the metric families are read from (*.cc)")
    ap.add_argument("--quiet", action="store_true", help="print errors only")
    args = ap.parse_args(argv)
    lines, count = validate(args.deploy, args.metrics_src, root=pathlib.Path(args.deploy).parent)
    for line in lines:
        print(line)
    if not args.quiet or lines:
        print("validate_deploy: %d file(s) checked, %d error(s)" % (count, len(lines)))
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main())
