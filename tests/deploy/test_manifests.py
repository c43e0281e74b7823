"""Deployment files: docker-compose.yml, Dockerfile and k8s/ (kustomize base + overlays, example).

No Docker engine or cluster here, so these are the checks that matter structurally: every
manifest parses; images and tags follow the project's version; the KafkaTopics equal the code's
topic table; nothing runs as root except where documented; capabilities only on the stacks
sidecar; probes, resources and a read-only root filesystem on every worker. Built-in kinds are
validated against the Kubernetes OpenAPI schemas when ``kubernetes-validate`` is installed;
``docker compose config`` and ``kubectl kustomize`` run when those tools are on the machine.
"""

from __future__ import annotations

import copy
import importlib.util
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import argus
from argus.kafka.local import KAFKA_VERSION
from argus.streams.app import ROLES as STREAM_ROLES
from argus.topics import TOPICS, topic_specs

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s"
OVERLAYS = ("small", "large")
ROLES = {"compressor", "steps", "l3", "funnel", "stacks", "pagerduty"}
#: deployment/service -> the worker roles it runs; L1 and L2 share one consumer group, so a step
#: record is routed and windowed once (docs/deploy.md, sizing)
WORKER_ARGS = {"steps": ["l1", "l2"]}
REKEYED = {"steps", "l3", "funnel"}  # argus/streams/pipeline_config.py internal_partitions
IMAGE = f"argus-trace:{argus.__version__}"
ROOT_ANNOTATION = "argus-trace.io/runs-as-root"
WORKLOAD_KINDS = {"Deployment", "Job", "StatefulSet", "DaemonSet"}


# -- a small kustomize: exactly the features k8s/ uses -------------------------------------------


def load_docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _json_patch(doc: dict[str, Any], ops: list[dict[str, Any]]) -> None:
    for op in ops:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        node: Any = doc
        for p in parts[:-1]:
            node = node[int(p)] if isinstance(node, list) else node[p]
        last = parts[-1]
        if op["op"] in ("replace", "add"):
            if isinstance(node, list):
                if last == "-":
                    node.append(op["value"])
                elif op["op"] == "add":
                    node.insert(int(last), op["value"])
                else:
                    node[int(last)] = op["value"]
            else:
                if op["op"] == "replace":
                    assert last in node, f"replace of missing {op['path']}"
                node[last] = op["value"]
        elif op["op"] == "remove":
            del node[int(last) if isinstance(node, list) else last]
        else:
            raise AssertionError(f"unsupported patch op {op['op']}")


def _pod_spec(doc: dict[str, Any]) -> dict[str, Any] | None:
    if doc.get("kind") in WORKLOAD_KINDS:
        spec: dict[str, Any] = doc["spec"]["template"]["spec"]
        return spec
    return None


def _containers(doc: dict[str, Any]) -> Iterator[dict[str, Any]]:
    spec = _pod_spec(doc)
    if spec is not None:
        yield from spec.get("initContainers", [])
        yield from spec.get("containers", [])


def kustomize(directory: Path) -> list[dict[str, Any]]:
    """Render a kustomization with resources, labels, namespace, images, replicas, patches."""
    k = yaml.safe_load((directory / "kustomization.yaml").read_text())
    known = {
        "apiVersion",
        "kind",
        "resources",
        "labels",
        "namespace",
        "images",
        "replicas",
        "patches",
    }
    assert set(k) <= known, (
        f"{directory}: kustomize features the test does not model: {set(k) - known}"
    )
    docs: list[dict[str, Any]] = []
    for res in k.get("resources", []):
        p = directory / res
        docs += kustomize(p) if p.is_dir() else load_docs(p)
    docs = copy.deepcopy(docs)
    for lab in k.get("labels", []):
        assert set(lab) == {"pairs"}
        for d in docs:
            d["metadata"].setdefault("labels", {}).update(lab["pairs"])
    for img in k.get("images", []):
        for d in docs:
            for c in _containers(d):
                name, _, _tag = c["image"].partition(":")
                if name == img["name"]:
                    c["image"] = f"{img.get('newName', name)}:{img.get('newTag', _tag)}"
    for rep in k.get("replicas", []):
        hits = [
            d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == rep["name"]
        ]
        assert hits, f"replicas for unknown Deployment {rep['name']}"
        for d in hits:
            d["spec"]["replicas"] = rep["count"]
    for patch in k.get("patches", []):
        t = patch["target"]
        hits = [d for d in docs if d["kind"] == t["kind"] and d["metadata"]["name"] == t["name"]]
        assert hits, f"patch target {t} matches nothing"
        for d in hits:
            _json_patch(d, yaml.safe_load(patch["patch"]))
    if "namespace" in k:
        for d in docs:
            if d["kind"] != "Namespace":
                d["metadata"]["namespace"] = k["namespace"]
    return docs


def by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


BUILDS = {"base": K8S / "base", **{o: K8S / "overlays" / o for o in OVERLAYS}}


@pytest.fixture(scope="module", params=sorted(BUILDS))
def build(request: pytest.FixtureRequest) -> tuple[str, list[dict[str, Any]]]:
    return request.param, kustomize(BUILDS[request.param])


def all_manifests() -> list[tuple[Path, dict[str, Any]]]:
    out = []
    for p in sorted(K8S.rglob("*.yaml")):
        if p.name == "kustomization.yaml":
            continue
        out += [(p, d) for d in load_docs(p)]
    return out


# -- k8s -----------------------------------------------------------------------------------------


def test_every_manifest_parses_and_has_kind_and_name() -> None:
    docs = all_manifests()
    assert len(docs) >= 20
    for path, d in docs:
        assert d.get("apiVersion") and d.get("kind"), path
        assert d.get("metadata", {}).get("name"), path


def test_generated_files_are_up_to_date() -> None:
    spec = importlib.util.spec_from_file_location("k8s_render", K8S / "render.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for path, text in mod.rendered().items():
        assert path.read_text() == text, f"{path} is stale: run .venv/bin/python k8s/render.py"


def test_base_topics_equal_the_code_topic_table() -> None:
    kafka_topics = by_kind(load_docs(K8S / "base" / "topics.yaml"), "KafkaTopic")
    want = topic_specs("argus")
    assert set(kafka_topics) == set(want)
    for name, spec in want.items():
        t = kafka_topics[name]
        assert t["apiVersion"] == "kafka.strimzi.io/v1"
        assert t["spec"]["topicName"] == name
        assert t["spec"]["partitions"] == spec.partitions, name
        cfg = t["spec"]["config"]
        assert cfg["retention.ms"] == spec.retention_ms, name
        assert (cfg.get("cleanup.policy") == "compact") == spec.compact, name
        assert t["metadata"]["annotations"]["argus-trace.io/record"] == spec.record
    assert len(TOPICS) == len(kafka_topics)


def test_overlay_topics_keep_the_table_and_only_raise_partitions(
    build: tuple[str, list[dict[str, Any]]],
) -> None:
    _, docs = build
    base = topic_specs("argus")
    topics = by_kind(docs, "KafkaTopic")
    assert set(topics) == set(base)
    for name, t in topics.items():
        assert t["spec"]["partitions"] >= base[name].partitions
        assert t["spec"]["config"]["retention.ms"] == base[name].retention_ms
        assert (t["spec"]["config"].get("cleanup.policy") == "compact") == base[name].compact
        if base[name].suffix in ("alerts", "control", "jobs"):
            assert t["spec"]["partitions"] == 1, f"{name} must stay one partition (ordering)"


def test_strimzi_cluster_is_kraft_with_node_pools_and_the_pinned_kafka(
    build: tuple[str, list[dict[str, Any]]],
) -> None:
    _, docs = build
    kafkas = by_kind(docs, "Kafka")
    assert list(kafkas) == ["argus"]
    k = kafkas["argus"]
    assert k["apiVersion"] == "kafka.strimzi.io/v1"
    assert k["spec"]["kafka"]["version"] == KAFKA_VERSION
    assert "zookeeper" not in k["spec"]
    listeners = {ls["name"]: ls for ls in k["spec"]["kafka"]["listeners"]}
    # no plaintext listener: SCRAM over TLS only (tests/deploy/test_security_manifests.py)
    assert listeners["tls"]["port"] == 9093 and listeners["tls"]["type"] == "internal"
    for ls in listeners.values():
        assert ls["name"].isalnum() and ls["name"].islower() and len(ls["name"]) <= 11
    pools = by_kind(docs, "KafkaNodePool")
    roles = {r for p in pools.values() for r in p["spec"]["roles"]}
    assert roles == {"controller", "broker"}
    for p in pools.values():
        assert p["metadata"]["labels"]["strimzi.io/cluster"] == "argus"
        assert set(p["spec"]["roles"]) <= {"controller", "broker"}
        assert p["spec"]["storage"]["type"] in ("jbod", "persistent-claim", "ephemeral")
    controllers = sum(
        p["spec"]["replicas"] for p in pools.values() if "controller" in p["spec"]["roles"]
    )
    brokers = sum(p["spec"]["replicas"] for p in pools.values() if "broker" in p["spec"]["roles"])
    assert controllers % 2 == 1, "a KRaft quorum needs an odd number of controllers"
    cfg = k["spec"]["kafka"]["config"]
    for t in by_kind(docs, "KafkaTopic").values():
        assert t["metadata"]["labels"]["strimzi.io/cluster"] == "argus"
        assert t["spec"]["replicas"] <= brokers
        assert t["spec"]["config"]["min.insync.replicas"] < t["spec"]["replicas"]
    assert cfg["offsets.topic.replication.factor"] <= brokers


def test_one_deployment_per_worker_role(build: tuple[str, list[dict[str, Any]]]) -> None:
    _, docs = build
    deps = by_kind(docs, "Deployment")
    assert {n.removeprefix("argus-") for n in deps} == ROLES
    for name, d in deps.items():
        c = d["spec"]["template"]["spec"]["containers"]
        assert len(c) == 1
        role = name.removeprefix("argus-")
        assert c[0]["args"] == ["worker", *WORKER_ARGS.get(role, [role])]
        assert {"configMapRef": {"name": "argus-env"}} in c[0]["envFrom"]
    run = [
        r for d in deps.values() for r in d["spec"]["template"]["spec"]["containers"][0]["args"][1:]
    ]
    assert sorted(run) == sorted([*STREAM_ROLES, "pagerduty"]), "each role runs in one Deployment"


def test_images_follow_the_project_version(build: tuple[str, list[dict[str, Any]]]) -> None:
    _, docs = build
    images = {c["image"] for d in docs for c in _containers(d)}
    assert images == {IMAGE}
    for d in docs:
        for c in _containers(d):
            assert c.get("imagePullPolicy") in (None, "IfNotPresent")


def test_replicas_never_exceed_the_partitions_they_consume(
    build: tuple[str, list[dict[str, Any]]],
) -> None:
    _, docs = build
    topics = by_kind(docs, "KafkaTopic")
    deps = by_kind(docs, "Deployment")
    env = by_kind(docs, "ConfigMap")["argus-env"]["data"]
    internal = int(env["ARGUS_STREAMS__INTERNAL_PARTITIONS"])
    assert int(env["ARGUS_STREAMS__REPLICATION"]) == 3

    def ceiling(dep: str) -> int:
        d = deps[dep]
        consumed = d["metadata"]["annotations"]["argus-trace.io/consumes"]
        assert consumed in topics, f"{dep} consumes unknown topic {consumed}"
        parts = int(topics[consumed]["spec"]["partitions"])
        # l1/l2/l3/funnel re-key through faust topics with internal_partitions partitions
        return min(parts, internal) if dep.removeprefix("argus-") in REKEYED else parts

    for name, d in deps.items():
        assert d["spec"].get("replicas", 1) <= ceiling(name), name
    hpas = by_kind(docs, "HorizontalPodAutoscaler")
    assert hpas, "the lag-based HPA example is missing"
    for h in hpas.values():
        target = h["spec"]["scaleTargetRef"]
        assert target["kind"] == "Deployment" and target["name"] in deps
        consumed = deps[target["name"]]["metadata"]["annotations"]["argus-trace.io/consumes"]
        assert 1 <= h["spec"]["minReplicas"] <= h["spec"]["maxReplicas"]
        assert h["spec"]["maxReplicas"] <= ceiling(target["name"])
        assert "replicas" not in deps[target["name"]]["spec"], "the HPA owns replicas"
        (metric,) = h["spec"]["metrics"]
        assert metric["type"] == "External"
        sel = metric["external"]["metric"]["selector"]["matchLabels"]
        assert sel["topic"] == consumed and "lag" in metric["external"]["metric"]["name"]


def test_workers_are_locked_down_with_probes_and_resources(
    build: tuple[str, list[dict[str, Any]]],
) -> None:
    _, docs = build
    for d in by_kind(docs, "Deployment").values():
        pod = d["spec"]["template"]["spec"]
        assert pod["automountServiceAccountToken"] is False
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
        (c,) = pod["containers"]
        sc = c["securityContext"]
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["runAsNonRoot"] is True and sc["runAsUser"] != 0
        assert sc["capabilities"] == {"drop": ["ALL"]}
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert probe in c, f"{d['metadata']['name']}: no {probe}"
        for kind in ("requests", "limits"):
            assert {"cpu", "memory"} <= set(c["resources"][kind])
        mounts = {m["mountPath"] for m in c["volumeMounts"]}
        assert "/tmp" in mounts, "a read-only root needs a writable /tmp"
        assert any(p["containerPort"] == 9464 for p in c["ports"])


def test_nobody_runs_as_root_and_only_the_stacks_sidecar_has_a_capability() -> None:
    workloads = [(p, d) for p, d in all_manifests() if _pod_spec(d) is not None]
    assert any(d["kind"] == "Job" for _, d in workloads), "the collector example is missing"
    sidecars = 0
    for path, d in workloads:
        pod = _pod_spec(d)
        assert pod is not None
        note = d["spec"]["template"]["metadata"].get("annotations", {}).get(ROOT_ANNOTATION, "")
        pod_sc = pod.get("securityContext", {})
        for c in _containers(d):
            sc = c.get("securityContext", {})
            user = sc.get("runAsUser", pod_sc.get("runAsUser"))
            non_root = sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot"))
            if user == 0 or non_root is not True:
                assert note.startswith(f"{c['name']}:"), (
                    f"{path}: container {c['name']} may run as root without a documented reason "
                    f"in the {ROOT_ANNOTATION} pod annotation"
                )
            assert sc.get("allowPrivilegeEscalation") is False, f"{path}: {c['name']}"
            assert sc.get("privileged") is not True
            caps = sc.get("capabilities", {})
            assert caps.get("drop") == ["ALL"], f"{path}: {c['name']} keeps default capabilities"
            if caps.get("add"):
                assert c["name"] == "argus-stacks", f"{path}: {c['name']} adds capabilities"
                assert caps["add"] == ["SYS_PTRACE"]
                assert pod.get("shareProcessNamespace") is True
                assert c["args"][:2] == ["collect", "stacks"]
                assert c.get("restartPolicy") == "Always", "native sidecar: ends with the job"
                assert sc["readOnlyRootFilesystem"] is True
                sidecars += 1
    assert sidecars == 1


def test_collector_example_configures_the_trainer_by_environment() -> None:
    (job,) = [d for _, d in all_manifests() if d["kind"] == "Job"]
    containers = {c["name"]: c for c in _containers(job)}
    env = {e["name"]: e.get("value") for e in containers["trainer"]["env"]}
    assert env["ARGUS_JOB"] and env["ARGUS_KAFKA_BOOTSTRAP"].startswith("argus-kafka-bootstrap.")
    assert any(k.startswith("ARGUS_COLLECTORS__") for k in env)
    side_env = {e["name"]: e.get("value") for e in containers["argus-stacks"]["env"]}
    assert side_env["ARGUS_JOB"] == env["ARGUS_JOB"]
    # the sidecar finds the trainer's processes in the registry under the shared state dir
    state = env["ARGUS_STATE_DIR"]
    assert side_env["ARGUS_STATE_DIR"] == state
    vols = [
        {m["name"] for m in c["volumeMounts"] if m["mountPath"] == state}
        for c in (containers["trainer"], containers["argus-stacks"])
    ]
    assert vols[0] and vols[0] == vols[1]
    assert containers["argus-stacks"]["image"] == IMAGE


def test_pagerduty_routing_key_is_a_mounted_secret(build: tuple[str, list[dict[str, Any]]]) -> None:
    _, docs = build
    secret = by_kind(docs, "Secret")["argus-pagerduty"]
    assert set(secret.get("stringData", secret.get("data", {}))) == {"routing_key"}
    dep = by_kind(docs, "Deployment")["argus-pagerduty"]
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    env = {e["name"]: e for e in c["env"]}
    assert "ARGUS_PAGERDUTY_ROUTING_KEY" not in env, "the key must not be an env variable"
    path = env["ARGUS_PAGERDUTY_ROUTING_KEY_FILE"]["value"]
    vols = {v["name"]: v for v in pod["volumes"]}
    (mount,) = [m for m in c["volumeMounts"] if path.startswith(m["mountPath"] + "/")]
    assert mount["readOnly"] is True
    src = vols[mount["name"]]["secret"]
    assert src["secretName"] == "argus-pagerduty"
    assert {"key": "routing_key", "path": path.rsplit("/", 1)[1]} in src["items"]
    assert dep["spec"].get("replicas", 1) == 1
    for d in docs:  # no other workload sees the secret
        if d is not dep and _pod_spec(d) is not None:
            assert "argus-pagerduty" not in yaml.safe_dump(_pod_spec(d))


def test_overlays_set_one_namespace() -> None:
    for o in OVERLAYS:
        docs = kustomize(K8S / "overlays" / o)
        (ns,) = by_kind(docs, "Namespace").values()
        for d in docs:
            if d["kind"] != "Namespace":
                assert d["metadata"]["namespace"] == ns["metadata"]["name"]


def test_large_overlay_is_larger_than_small() -> None:
    small, large = (kustomize(K8S / "overlays" / o) for o in OVERLAYS)

    def brokers(docs: list[dict[str, Any]]) -> int:
        return int(by_kind(docs, "KafkaNodePool")["brokers"]["spec"]["replicas"])

    def parts(docs: list[dict[str, Any]]) -> int:
        return sum(t["spec"]["partitions"] for t in by_kind(docs, "KafkaTopic").values())

    assert brokers(large) > brokers(small) and parts(large) > parts(small)
    for t in by_kind(large, "KafkaTopic").values():
        if t["spec"]["partitions"] > 1:
            assert t["spec"]["partitions"] % brokers(large) == 0, "spread leaders evenly"


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (kustomize) not installed")
@pytest.mark.parametrize("name", sorted(BUILDS))
def test_kubectl_kustomize_agrees_with_the_model(name: str) -> None:
    out = subprocess.run(
        ["kubectl", "kustomize", str(BUILDS[name])],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    real = {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(out.stdout) if d}
    model = {(d["kind"], d["metadata"]["name"]): d for d in kustomize(BUILDS[name])}
    assert real == model


def test_builtin_kinds_validate_against_kubernetes_schemas() -> None:
    kv = pytest.importorskip("kubernetes_validate")
    version = kv.latest_version()
    docs = [d for b in BUILDS.values() for d in kustomize(b)]
    docs += [d for p, d in all_manifests() if "examples" in p.parts]
    checked = 0
    for d in docs:
        if d["apiVersion"].startswith("kafka.strimzi.io/"):
            continue  # CRDs: checked structurally above
        kv.validate(d, version, strict=True)
        checked += 1
    assert checked >= 30
    bad = copy.deepcopy(by_kind(docs, "Deployment")["argus-steps"])
    bad["spec"]["template"]["spec"]["containers"][0]["readOnlyRootFs"] = True  # a typo
    with pytest.raises(kv.ValidationError):
        kv.validate(bad, version, strict=True)


# -- docker compose and the Dockerfile --------------------------------------------------------------


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return data


def test_compose_runs_pinned_kafka_in_kraft_mode(compose: dict[str, Any]) -> None:
    k = compose["services"]["kafka"]
    assert k["image"] == f"apache/kafka:{KAFKA_VERSION}"
    env = k["environment"]
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    assert "CONTROLLER" in env["KAFKA_CONTROLLER_LISTENER_NAMES"]
    assert "zookeeper" not in yaml.safe_dump(compose).lower()
    assert k["healthcheck"]["test"] and k["restart"] == "unless-stopped"


def test_compose_has_topics_job_and_one_service_per_role(compose: dict[str, Any]) -> None:
    services = compose["services"]
    topics = services["topics"]
    assert topics["command"][:2] == ["topics", "create"]
    assert topics["restart"] == "on-failure"
    assert topics["depends_on"]["kafka"]["condition"] == "service_healthy"
    assert set(services) == {"kafka", "topics"} | ROLES
    run = [r for name in ROLES for r in services[name]["command"][1:]]
    assert sorted(run) == sorted([*STREAM_ROLES, "pagerduty"]), "each role runs in one service"
    for role in ROLES:
        s = services[role]
        assert s["command"] == ["worker", *WORKER_ARGS.get(role, [role])]
        assert s["image"] == IMAGE
        assert s["depends_on"]["topics"]["condition"] == "service_completed_successfully"
        assert s["depends_on"]["kafka"]["condition"] == "service_healthy"
        assert s["restart"] == "unless-stopped"
        assert "metrics" in " ".join(s["healthcheck"]["test"])
        assert s["read_only"] is True and s["cap_drop"] == ["ALL"]
        assert not s["user"].startswith("0") and s["user"].split(":")[0] != "root"
        assert "env_file" not in s and "volumes" not in s, "configuration by environment only"
        assert s["environment"]["ARGUS_KAFKA_BOOTSTRAP"] == "kafka:9092"
        assert "ARGUS_PAGERDUTY_ROUTING_KEY" not in s["environment"]
    pd = services["pagerduty"]
    assert (
        pd["environment"]["ARGUS_PAGERDUTY_ROUTING_KEY_FILE"]
        == "/run/secrets/pagerduty_routing_key"
    )
    assert pd["secrets"] == ["pagerduty_routing_key"]


def test_dockerfile_is_slim_non_root_and_versioned() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert "-slim" in text
    assert f"ARG ARGUS_VERSION={argus.__version__}" in text
    users = [ln.split()[1] for ln in text.splitlines() if ln.startswith("USER ")]
    assert users and users[-1].split(":")[0] not in ("0", "root")
    assert 'ENTRYPOINT ["argus"]' in text
    ignore = (ROOT / ".dockerignore").read_text().split()
    assert ignore[ignore.index("*") :][:2] == ["*", "!pyproject.toml"]


def _compose_cli() -> list[str] | None:
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True, check=False)
        if probe.returncode == 0:
            return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return None


@pytest.mark.skipif(_compose_cli() is None, reason="docker compose not installed")
def test_docker_compose_config_is_valid() -> None:
    cli = _compose_cli()
    assert cli is not None
    for extra in ([], ["--profile", "pagerduty"]):
        out = subprocess.run(
            [*cli, *extra, "config", "-q"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env={
                "PATH": "/usr/local/bin:/usr/bin:/bin",
                "HOME": str(Path.home()),
                "ARGUS_PAGERDUTY_ROUTING_KEY": "x" * 32,
            },
        )
        assert out.returncode == 0, out.stderr
