"""scripts/validate_deploy.py against the repository's deploy/ folder, and against copies of it
with one mistake each: every mistake must fail validation with an error naming the file and the
path of the field that is wrong. Run: /usr/bin/python3 -m pytest tests/deploy
"""

import importlib.util
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

try:
    import yaml
except ImportError:  # a failure, not a skip: CI must not pass without checking deploy/
    raise ImportError("tests/deploy need python3-yaml (scripts/install-deps.sh installs it)")

SOURCE_DIR = pathlib.Path(os.environ.get("VRAMD_SOURCE_DIR",
                                         pathlib.Path(__file__).resolve().parents[2]))
SCRIPT = SOURCE_DIR / "scripts" / "validate_deploy.py"
DEPLOY = SOURCE_DIR / "deploy"
METRICS_SRC = SOURCE_DIR / "src" / "server" / "metrics"

DEPLOYMENT = "deploy/kubernetes/deployment.yaml"
SERVICE = "deploy/kubernetes/service.yaml"
RUNTIME = "deploy/kserve/servingruntime.yaml"
ISVC = "deploy/kserve/inferenceservice.yaml"
DASHBOARD = "deploy/grafana/vramd-dashboard.json"
DOCKERFILE = "deploy/Dockerfile"
CONTAINER = "spec.template.spec.containers[0]"


def load_validator():
    spec = importlib.util.spec_from_file_location("validate_deploy", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


validator = load_validator()


@pytest.fixture
def tree(tmp_path):
    """A copy of deploy/ in tmp_path (as tmp_path/deploy); returns tmp_path."""
    shutil.copytree(DEPLOY, tmp_path / "deploy")
    return tmp_path


def errors_of(root):
    lines, count = validator.validate(root / "deploy", METRICS_SRC, root=root)
    assert count >= 8, "the validator found only %d files under %s" % (count, root / "deploy")
    return lines


def edit_yaml(root, rel, change):
    """Loads the single document of `rel`, applies change(doc) and writes it back."""
    path = root / rel
    doc = yaml.safe_load(path.read_text())
    change(doc)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def edit_json(root, rel, change):
    path = root / rel
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc, indent=2))


def edit_text(root, rel, old, new, count=1):
    path = root / rel
    text = path.read_text()
    assert old in text, "%r is not in %s: the test no longer matches the file" % (old, rel)
    path.write_text(text.replace(old, new, count))


def container(doc):
    return doc["spec"]["template"]["spec"]["containers"][0]


def assert_error(lines, file, path, *words):
    """One of `lines` is about `file` at `path` and says each of `words`."""
    prefix = "%s: %s:" % (file, path)
    hits = [l for l in lines if l.startswith(prefix)]
    assert hits, "no error at %s in:\n%s" % (prefix, "\n".join(lines) or "(no errors)")
    assert any(all(w.lower() in l.lower() for w in words) for l in hits), (
        "the errors at %s do not say %s:\n%s" % (prefix, words, "\n".join(hits)))


# -- the repository's own files ------------------------------------------------------------------


def test_the_repositorys_deploy_folder_is_valid():
    lines, count = validator.validate(DEPLOY, METRICS_SRC, root=SOURCE_DIR)
    assert lines == [], "\n".join(lines)
    assert count >= 8


def test_the_command_line_exits_0_on_the_repository_and_1_on_an_error(tree):
    ok = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True,
                        timeout=60)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "0 error(s)" in ok.stdout
    edit_text(tree, DOCKERFILE, "USER 1000:1000", "USER root")
    bad = subprocess.run([sys.executable, str(SCRIPT), "--deploy", str(tree / "deploy"),
                          "--metrics-src", str(METRICS_SRC)],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "deploy/Dockerfile: line" in bad.stdout and "non-root" in bad.stdout, bad.stdout


def test_every_manifest_kind_is_checked():
    kinds = set()
    for f in DEPLOY.rglob("*.yaml"):
        for d in yaml.safe_load_all(f.read_text()):
            kinds.add((d["apiVersion"], d["kind"]))
    assert {("apps/v1", "Deployment"), ("v1", "Service"),
            ("kustomize.config.k8s.io/v1beta1", "Kustomization"),
            ("serving.kserve.io/v1alpha1", "ServingRuntime"),
            ("serving.kserve.io/v1beta1", "InferenceService")} <= kinds
    assert kinds <= set(validator.KIND_SCHEMAS)


def test_metric_families_are_read_from_the_server_sources():
    families = validator.metric_families(METRICS_SRC)
    for name in ("vramd_memory_live_bytes", "vramd_memory_unattributed_alarm",
                 "vramd_memory_leaked_bytes_total", "nv_inference_request_success",
                 "nv_inference_queue_duration_us"):
        assert name in families
    # The one family the dashboard may use before the server exports it.
    assert set(validator.PENDING_METRICS) == {"vramd_rollbacks_total"}


@pytest.mark.parametrize("expr,names", [
    ('sum by (model, device) (vramd_memory_live_bytes{model=~"$model", device=~"cuda.*"})',
     ["vramd_memory_live_bytes"]),
    ("rate(nv_inference_queue_duration_us[5m]) / rate(nv_inference_request_success[5m])",
     ["nv_inference_queue_duration_us", "nv_inference_request_success"]),
    ("count by (model) (a unless b offset $__interval) > 1e3", ["a", "b"]),
    ('max(x) without (instance) * on (device) group_left(model) y{a="b(c)"}', ["x", "y"]),
    ("histogram_quantile(0.99, sum by (le) (rate(h_bucket[${__rate_interval}])))",
     ["h_bucket"]),
])
def test_promql_metric_names(expr, names):
    assert validator.promql_metric_names(expr) == names


# -- mutations: each must fail, naming the file and the path ------------------------------------


def test_unknown_key_is_an_error_naming_its_path(tree):
    edit_yaml(tree, DEPLOYMENT,
              lambda d: container(d)["readinessProbe"]["httpGet"].update(portt=8000))
    assert_error(errors_of(tree), DEPLOYMENT, CONTAINER + ".readinessProbe.httpGet.portt",
                 "unknown field")


def test_unknown_top_level_spec_key(tree):
    edit_yaml(tree, DEPLOYMENT, lambda d: d["spec"].update(replica=2))
    assert_error(errors_of(tree), DEPLOYMENT, "spec.replica", "unknown field")


def test_probe_on_a_port_the_container_does_not_declare(tree):
    edit_yaml(tree, DEPLOYMENT,
              lambda d: container(d)["readinessProbe"]["httpGet"].update(port="admin"))
    assert_error(errors_of(tree), DEPLOYMENT, CONTAINER + ".readinessProbe.httpGet.port",
                 "'admin'", "not the name of a port")


def test_probe_on_the_metrics_port_is_not_vramds_health(tree):
    edit_yaml(tree, DEPLOYMENT,
              lambda d: container(d)["livenessProbe"]["httpGet"].update(port="metrics"))
    assert_error(errors_of(tree), DEPLOYMENT, CONTAINER + ".livenessProbe.httpGet.port",
                 "8002", "HTTP port 8000")


def test_liveness_on_readiness_would_restart_a_draining_pod(tree):
    edit_yaml(tree, DEPLOYMENT,
              lambda d: container(d)["livenessProbe"]["httpGet"].update(path="/v2/health/ready"))
    assert_error(errors_of(tree), DEPLOYMENT, CONTAINER + ".livenessProbe.httpGet.path",
                 "/v2/health/live", "drain")


def test_a_probe_with_two_handlers(tree):
    edit_yaml(tree, DEPLOYMENT,
              lambda d: container(d)["startupProbe"].update(tcpSocket={"port": "http"}))
    assert_error(errors_of(tree), DEPLOYMENT, CONTAINER + ".startupProbe",
                 "exactly one of", "httpGet, tcpSocket")


def test_selector_that_does_not_match_the_template(tree):
    edit_yaml(tree, DEPLOYMENT, lambda d: d["spec"]["selector"]["matchLabels"].update(
        {"app.kubernetes.io/name": "vramd-typo"}))
    lines = errors_of(tree)
    assert_error(lines, DEPLOYMENT, 'spec.selector.matchLabels["app.kubernetes.io/name"]',
                 "does not match the template")


def test_service_selector_that_matches_no_deployment(tree):
    edit_yaml(tree, SERVICE, lambda d: d["spec"]["selector"].update(
        {"app.kubernetes.io/name": "other"}))
    assert_error(errors_of(tree), SERVICE, "spec.selector", "matches no Deployment")


def test_service_target_port_that_no_container_declares(tree):
    edit_yaml(tree, SERVICE, lambda d: d["spec"]["ports"][1].update(targetPort="gprc"))
    assert_error(errors_of(tree), SERVICE, "spec.ports[1].targetPort", "'gprc'")


def test_grace_period_shorter_than_drain_plus_exit_timeout(tree):
    edit_yaml(tree, DEPLOYMENT,
              lambda d: d["spec"]["template"]["spec"].update(terminationGracePeriodSeconds=30))
    assert_error(errors_of(tree), DEPLOYMENT, "spec.template.spec.terminationGracePeriodSeconds",
                 "--timeout-ms", "--exit-timeout-secs")


def test_prestop_that_does_not_drain(tree):
    edit_yaml(tree, DEPLOYMENT, lambda d: container(d)["lifecycle"]["preStop"].update(
        exec={"command": ["/bin/sleep", "5"]}))
    assert_error(errors_of(tree), DEPLOYMENT, CONTAINER + ".lifecycle.preStop.exec.command",
                 "vramctl drain")


def test_container_allowed_to_run_as_root(tree):
    def change(d):
        d["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] = False
        container(d)["securityContext"].pop("runAsNonRoot")
        container(d)["securityContext"]["runAsUser"] = 0
    edit_yaml(tree, DEPLOYMENT, change)
    lines = errors_of(tree)
    assert_error(lines, DEPLOYMENT, CONTAINER + ".securityContext.runAsNonRoot", "must be true")
    assert_error(lines, DEPLOYMENT, CONTAINER + ".securityContext.runAsUser", "root")


def test_bad_resource_quantity_and_gpu_request_without_equal_limit(tree):
    def change(d):
        res = container(d)["resources"]
        res["requests"]["memory"] = "16GB"
        res["limits"]["nvidia.com/gpu"] = 2
    edit_yaml(tree, DEPLOYMENT, change)
    lines = errors_of(tree)
    assert_error(lines, DEPLOYMENT, CONTAINER + ".resources.requests.memory",
                 "not a resource quantity")
    assert_error(lines, DEPLOYMENT, CONTAINER + '.resources.requests["nvidia.com/gpu"]',
                 "must equal")


def test_annotation_that_is_not_a_string(tree):
    edit_yaml(tree, DEPLOYMENT, lambda d: d["spec"]["template"]["metadata"]["annotations"].update(
        {"prometheus.io/scrape": True}))
    assert_error(errors_of(tree), DEPLOYMENT,
                 'spec.template.metadata.annotations["prometheus.io/scrape"]', "string")


def test_wrong_type_is_named(tree):
    edit_yaml(tree, DEPLOYMENT, lambda d: container(d)["ports"][0].update(containerPort="8000"))
    assert_error(errors_of(tree), DEPLOYMENT, CONTAINER + ".ports[0].containerPort",
                 "must be an integer")


def test_duplicate_yaml_key(tree):
    edit_text(tree, DEPLOYMENT, "  replicas: 1\n", "  replicas: 1\n  replicas: 2\n")
    lines = errors_of(tree)
    assert any(l.startswith(DEPLOYMENT + ":") and "duplicate key 'replicas'" in l
               for l in lines), lines


def test_manifest_missing_from_the_kustomization(tree):
    edit_yaml(tree, "deploy/kubernetes/kustomization.yaml",
              lambda d: d["resources"].remove("service.yaml"))
    assert_error(errors_of(tree), "deploy/kubernetes/kustomization.yaml", "resources",
                 "service.yaml", "not listed")


def test_kserve_runtime_on_another_repository_path(tree):
    edit_yaml(tree, RUNTIME, lambda d: d["spec"]["containers"][0].update(
        args=["serve", "--model-repository=/models", "--http-port=8080"]))
    assert_error(errors_of(tree), RUNTIME, "spec.containers[0].args", "/mnt/models")


def test_kserve_drain_that_misses_the_http_port(tree):
    def change(d):
        cmd = d["spec"]["containers"][0]["lifecycle"]["preStop"]["exec"]["command"]
        cmd[cmd.index("--url") + 1] = "http://127.0.0.1:8000"
    edit_yaml(tree, RUNTIME, change)
    assert_error(errors_of(tree), RUNTIME, "spec.containers[0].lifecycle.preStop.exec.command",
                 "8000", "HTTP port 8080")


def test_inference_service_with_a_format_the_runtime_does_not_serve(tree):
    edit_yaml(tree, ISVC, lambda d: d["spec"]["predictor"]["model"].update(
        modelFormat={"name": "onnx", "version": "1"}))
    assert_error(errors_of(tree), ISVC, "spec.predictor.model.modelFormat",
                 "supportedModelFormats")


def test_unknown_kind(tree):
    (tree / "deploy" / "kubernetes" / "extra.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {}\n")
    lines = errors_of(tree)
    assert any(l.startswith("deploy/kubernetes/extra.yaml: ") and "no schema" in l
               for l in lines), lines


def test_root_user_in_the_dockerfile(tree):
    edit_text(tree, DOCKERFILE, "USER 1000:1000", "USER root")
    lines = errors_of(tree)
    assert any(re.match(r"deploy/Dockerfile: line \d+: USER root: .*non-root", l)
               for l in lines), lines


def test_uid_0_in_the_dockerfile(tree):
    edit_text(tree, DOCKERFILE, "USER 1000:1000", "USER 0")
    assert any("USER 0" in l and "non-root" in l for l in errors_of(tree))


def test_dockerfile_without_user(tree):
    edit_text(tree, DOCKERFILE, "USER 1000:1000\n", "")
    assert any(l.startswith(DOCKERFILE) and "no USER" in l for l in errors_of(tree))


def test_dockerfile_on_another_base_image(tree):
    edit_text(tree, DOCKERFILE, "FROM debian:bookworm-slim AS runtime",
              "FROM ubuntu:24.04 AS runtime")
    assert any(l.startswith(DOCKERFILE) and "ubuntu:24.04" in l and "bookworm" in l
               for l in errors_of(tree))


def test_dockerfile_with_one_stage(tree):
    text = (tree / DOCKERFILE).read_text()
    runtime = text[text.index("FROM debian:bookworm-slim AS runtime"):]
    runtime = re.sub(r"COPY --from=build[^\n]*\n", "", runtime)
    (tree / DOCKERFILE).write_text(runtime)
    assert any("at least two stages" in l for l in errors_of(tree))


def test_dockerfile_entrypoint_in_shell_form(tree):
    edit_text(tree, DOCKERFILE,
              'ENTRYPOINT ["/usr/local/bin/vramd", "serve", "--model-repository", "/models"]',
              "ENTRYPOINT vramd serve --model-repository /models")
    assert any("exec form" in l for l in errors_of(tree))


def test_dashboard_expr_with_an_unknown_metric(tree):
    def change(d):
        d["panels"][1]["targets"][0]["expr"] = d["panels"][1]["targets"][0]["expr"].replace(
            "vramd_memory_live_bytes", "vramd_memory_live_byte")
    edit_json(tree, DASHBOARD, change)
    assert_error(errors_of(tree), DASHBOARD, "panels[1].targets[0].expr",
                 "unknown metric 'vramd_memory_live_byte'")


def test_dashboard_duplicate_panel_ids(tree):
    edit_json(tree, DASHBOARD, lambda d: d["panels"][2].update(id=d["panels"][1]["id"]))
    assert_error(errors_of(tree), DASHBOARD, "panels[2].id", "duplicate panel id")


def test_dashboard_overlapping_panels(tree):
    edit_json(tree, DASHBOARD, lambda d: d["panels"][2]["gridPos"].update(x=6))
    assert_error(errors_of(tree), DASHBOARD, "panels[2].gridPos", "overlaps panels[1]")


def test_dashboard_panel_past_24_columns_and_unknown_type(tree):
    def change(d):
        d["panels"][2]["gridPos"].update(x=20, w=12)
        d["panels"][3]["type"] = "graphh"
    edit_json(tree, DASHBOARD, change)
    lines = errors_of(tree)
    assert_error(lines, DASHBOARD, "panels[2].gridPos", "24 columns")
    assert_error(lines, DASHBOARD, "panels[3].type", "not a known panel type")


def test_dashboard_missing_required_fields(tree):
    def change(d):
        del d["uid"]
        d["schemaVersion"] = "39"
    edit_json(tree, DASHBOARD, change)
    lines = errors_of(tree)
    assert_error(lines, DASHBOARD, "uid", "missing required field")
    assert_error(lines, DASHBOARD, "schemaVersion", "must be an integer")


def test_dashboard_field_config_typo(tree):
    edit_json(tree, DASHBOARD,
              lambda d: d["panels"][1]["fieldConfig"]["defaults"].update(unitt="bytes"))
    assert_error(errors_of(tree), DASHBOARD, "panels[1].fieldConfig.defaults.unitt",
                 "unknown field")


def test_dashboard_fixed_datasource_uid(tree):
    edit_json(tree, DASHBOARD, lambda d: d["panels"][1].update(
        datasource={"type": "prometheus", "uid": "P1809F7CD0C75ACF3"}))
    assert_error(errors_of(tree), DASHBOARD, "panels[1].datasource", "template variable")


def test_dashboard_undefined_variable(tree):
    def change(d):
        d["panels"][1]["targets"][0]["expr"] = d["panels"][1]["targets"][0]["expr"].replace(
            "$model", "$modle")
    edit_json(tree, DASHBOARD, change)
    assert_error(errors_of(tree), DASHBOARD, "panels[1].targets[0].expr", "$modle")


# -- optional: PromQL syntax, where Prometheus' promtool is installed ---------------------------


def test_dashboard_exprs_parse_as_promql(tmp_path):
    promtool = shutil.which("promtool") or os.environ.get("VRAMD_PROMTOOL")
    if not promtool:
        pytest.skip("promtool is not installed (Debian: prometheus); the schema checks above "
                    "do not parse PromQL")
    dash = json.loads((DEPLOY / "grafana" / "vramd-dashboard.json").read_text())
    rules = []
    for p, path in validator.iter_panels(dash["panels"], "panels"):
        for i, t in enumerate(p.get("targets") or []):
            expr = t["expr"].replace("$__rate_interval", "1m").replace("$__interval", "1m")
            expr = expr.replace("$__range", "1h").replace("$model", ".*")
            rules.append({"record": "check:%s_%d" % (re.sub(r"\W", "_", path), i),
                          "expr": expr})
    f = tmp_path / "rules.yaml"
    f.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    out = subprocess.run([promtool, "check", "rules", str(f)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
