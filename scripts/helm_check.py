"""The Helm chart's checks, run by scripts/helm-check with helm on PATH.

Each check renders the chart with `helm template` (the real helm) and asserts on the objects a
cluster would get, or on helm's refusal and its message.
"""

import os
import subprocess
import sys
import tempfile

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHART = os.path.join(ROOT, "deploy", "helm", "sluice")
EXAMPLES = os.path.join(ROOT, "examples")
failures = []


def helm(*args):
    return subprocess.run(["helm", *args], capture_output=True, text=True)


def render(pipeline_text, *sets):
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
        f.write(pipeline_text)
        path = f.name
    try:
        args = ["template", "orders", CHART, "--set-file", f"pipeline={path}"]
        for s in sets:
            args += ["--set", s]
        return helm(*args)
    finally:
        os.unlink(path)


def objects(result):
    if result.returncode != 0:
        raise AssertionError(f"helm template failed:\n{result.stderr}")
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def check(name):
    def wrap(fn):
        try:
            fn()
            print(f"ok    {name}")
        except AssertionError as e:
            print(f"FAIL  {name}: {e}")
            failures.append(name)
        return fn
    return wrap


def example(name):
    with open(os.path.join(EXAMPLES, name)) as f:
        return f.read()


def container(objs):
    return objs[("Deployment", "orders-sluice")]["spec"]["template"]["spec"]["containers"][0]


def env(c):
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c["env"]}


PG = example("postgres-to-kafka.toml")
PG_HA = PG.replace('name = "postgres_to_kafka"', 'name = "postgres_to_kafka"\nstate_store = "kafka"', 1)
assert PG_HA != PG


@check("helm lint is clean for every example")
def _lint():
    for name in sorted(os.listdir(EXAMPLES)):
        if not name.endswith(".toml"):
            continue
        r = helm("lint", "--strict", CHART, "--set-file", f"pipeline={os.path.join(EXAMPLES, name)}")
        assert r.returncode == 0 and "[WARNING]" not in r.stdout and "[ERROR]" not in r.stdout, \
            f"{name}:\n{r.stdout}{r.stderr}"


@check("every example renders; sinks are labelled sink, sources source")
def _examples():
    for name in sorted(os.listdir(EXAMPLES)):
        if not name.endswith(".toml"):
            continue
        objs = objects(render(example(name)))
        kind = "sink" if name.startswith("kafka-to-") else "source"
        d = objs[("Deployment", "orders-sluice")]
        assert d["metadata"]["labels"]["app.kubernetes.io/component"] == kind, name
        cm = objs[("ConfigMap", "orders-sluice")]
        assert cm["data"]["pipeline.toml"].strip() == example(name).strip(), f"{name}: the file is not verbatim"


@check("probes: liveness and readiness GET /health on the admin port, which SLUICE_ADMIN opens")
def _probes():
    c = container(objects(render(PG)))
    for probe in ("livenessProbe", "readinessProbe"):
        assert c[probe]["httpGet"] == {"path": "/health", "port": "admin"}, c[probe]
    assert c["ports"] == [{"name": "admin", "containerPort": 8089, "protocol": "TCP"}], c["ports"]
    assert env(c)["SLUICE_ADMIN"] == "0.0.0.0:8089", env(c)
    c = container(objects(render(PG, "adminPort=9100")))
    assert env(c)["SLUICE_ADMIN"] == "0.0.0.0:9100" and c["ports"][0]["containerPort"] == 9100


@check("mounts: the pipeline read-only, a writable state directory and /tmp, a read-only root")
def _mounts():
    objs = objects(render(PG))
    c = container(objs)
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    assert mounts["/etc/sluice"].get("readOnly") is True, mounts
    assert "/var/lib/sluice" in mounts and "/tmp" in mounts, mounts
    assert c["args"] == ["run", "/etc/sluice/pipeline.toml"], c["args"]
    assert env(c)["XDG_STATE_HOME"] == "/var/lib/sluice"
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    pod = objs[("Deployment", "orders-sluice")]["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 65532
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["pipeline"]["configMap"]["name"] == "orders-sluice"
    assert "emptyDir" in volumes["state"]


@check("secrets: as files (read-only, 0400), as variables, the admin token")
def _secrets():
    objs = objects(render(PG, "secretFiles[0].secret=orders-kafka",
                          "secretFiles[0].mountPath=/run/secrets/kafka",
                          "envFromSecrets[0].name=PG_URL", "envFromSecrets[0].secret=orders-pg",
                          "envFromSecrets[0].key=url", "admin.tokenSecret=orders-admin"))
    c = container(objs)
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    assert mounts["/run/secrets/kafka"]["readOnly"] is True, mounts
    pod = objs[("Deployment", "orders-sluice")]["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["secret-0"]["secret"] == {"secretName": "orders-kafka", "defaultMode": 0o400}, volumes
    e = env(c)
    assert e["PG_URL"] == {"secretKeyRef": {"name": "orders-pg", "key": "url"}}, e
    assert e["SLUICE_ADMIN_TOKEN"] == {"secretKeyRef": {"name": "orders-admin", "key": "token"}}, e


@check("one source replica: Recreate, no PodDisruptionBudget")
def _one_source():
    r = render(PG)
    objs = objects(r)
    d = objs[("Deployment", "orders-sluice")]
    assert d["spec"]["replicas"] == 1 and d["spec"]["strategy"]["type"] == "Recreate", d["spec"]
    assert not any(k == "PodDisruptionBudget" for k, _ in objs)


@check("two source replicas need state_store = \"kafka\"; then a standby, a PDB, spread over nodes")
def _two_sources():
    refused = render(PG, "replicas=2")
    assert refused.returncode != 0 and 'needs state_store = "kafka"' in refused.stderr, refused.stderr
    objs = objects(render(PG_HA, "replicas=2"))
    d = objs[("Deployment", "orders-sluice")]
    assert d["spec"]["replicas"] == 2
    assert d["spec"]["strategy"] == {"type": "RollingUpdate",
                                     "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}, d["spec"]
    pdb = objs[("PodDisruptionBudget", "orders-sluice")]
    assert pdb["spec"]["maxUnavailable"] == 1
    anti = d["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    assert anti["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]["topologyKey"] \
        == "kubernetes.io/hostname"


@check("sink replicas are consumer-group members: no state_store needed")
def _sinks():
    objs = objects(render(example("kafka-to-files.toml"), "replicas=3"))
    assert objs[("Deployment", "orders-sluice")]["spec"]["replicas"] == 3
    assert ("PodDisruptionBudget", "orders-sluice") in objs


@check("refusals name the value and the fix")
def _refusals():
    r = render("")
    assert r.returncode != 0 and "--set-file pipeline=" in r.stderr, r.stderr
    r = render(PG.replace("${SLUICE_ADMIN:-127.0.0.1:8089}", "127.0.0.1:8089"))
    assert r.returncode != 0 and "[admin] listen must read SLUICE_ADMIN" in r.stderr, r.stderr
    r = render(PG, "persistence.enabled=true", "replicas=2")
    assert r.returncode != 0, r.stdout[:500]
    objs = objects(render(PG, "persistence.enabled=true"))
    assert ("PersistentVolumeClaim", "orders-sluice") in objs


@check("monitoring: ServiceMonitor on /metrics; the PrometheusRule is docs/alerts/sluice.rules.yml")
def _monitoring():
    with open(os.path.join(ROOT, "docs", "alerts", "sluice.rules.yml")) as a, \
            open(os.path.join(CHART, "files", "sluice.rules.yml")) as b:
        docs_rules, chart_rules = a.read(), b.read()
    assert docs_rules == chart_rules, "deploy/helm/sluice/files/sluice.rules.yml differs from docs/alerts/sluice.rules.yml: copy it"
    objs = objects(render(PG))
    assert not any(k in ("ServiceMonitor", "PrometheusRule") for k, _ in objs)
    objs = objects(render(PG, "metrics.serviceMonitor.enabled=true", "metrics.prometheusRule.enabled=true"))
    sm = objs[("ServiceMonitor", "orders-sluice")]
    assert sm["spec"]["endpoints"][0] == {"port": "admin", "path": "/metrics", "interval": "30s"}
    rule = objs[("PrometheusRule", "orders-sluice")]
    assert rule["spec"]["groups"] == yaml.safe_load(docs_rules)["groups"]
    svc = objs[("Service", "orders-sluice")]
    assert svc["spec"]["ports"][0]["targetPort"] == "admin"


if "--print" in sys.argv:
    print(render(PG).stdout)
if failures:
    print(f"helm-check: {len(failures)} check(s) failed", file=sys.stderr)
    sys.exit(1)
print("helm-check: all checks passed", file=sys.stderr)
