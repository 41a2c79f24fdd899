"""deploy/k8s/ is valid Kubernetes and KEDA, offline, and its parts agree with each other and with
what jobqueue serves (the Deployment they scale, the metric the HPA reads, the worker's flags)."""

from __future__ import annotations

import copy
from datetime import datetime, timezone

import jsonschema
import pytest
import yaml
from kubernetes_validate.utils import SchemaNotFoundError

from jobqueue.cli import build_parser
from jobqueue.observability.metrics import Snapshot
from jobqueue.observability.prometheus import render
from jobqueue.store.metrics import QueueCounts
from tests.support.manifests import MANIFESTS, documents, validate


def by_kind(kind: str) -> list[dict]:
    return [doc for doc in documents() if doc["kind"] == kind]


@pytest.mark.parametrize("doc", documents(), ids=lambda d: f"{d['kind']}/{d['metadata']['name']}")
def test_every_manifest_is_valid(doc):
    validate(doc)


@pytest.mark.parametrize(
    "path, breaks",
    [
        ("keda.yaml", lambda docs: docs[1]["spec"].update(minReplicas=2)),  # HPA's spelling in KEDA
        ("keda.yaml", lambda docs: docs[1]["spec"]["triggers"][0]["metadata"].update(targetQueryValue=100)),
        (
            "keda.yaml",
            lambda docs: docs[1]["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleUp"][
                "policies"
            ][0].update(periodSecond=30),
        ),  # Kubernetes' own (strict) schema
        ("keda.yaml", lambda docs: docs[0]["spec"]["secretTargetRef"][0].pop("key")),
        ("hpa.yaml", lambda docs: docs[0]["spec"]["metrics"][0]["external"].update(metrics={})),
        ("worker.yaml", lambda docs: docs[0]["spec"]["template"]["spec"]["containers"][0].update(arguments=[])),
    ],
)
def test_a_broken_manifest_is_refused(path, breaks):
    docs = copy.deepcopy(documents(path))
    breaks(docs)
    with pytest.raises(jsonschema.ValidationError):
        for doc in docs:
            validate(doc)


def test_an_unknown_kind_is_refused_not_skipped():
    with pytest.raises(jsonschema.ValidationError):
        validate({"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledJob", "metadata": {"name": "x"}, "spec": {}})
    with pytest.raises(SchemaNotFoundError):
        validate({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "x"}})


def test_the_autoscalers_target_the_worker_deployment_and_share_its_bounds_and_cooldowns():
    (deployment,) = by_kind("Deployment")
    (scaled,) = by_kind("ScaledObject")
    (hpa,) = by_kind("HorizontalPodAutoscaler")
    (auth,) = by_kind("TriggerAuthentication")
    name = deployment["metadata"]["name"]
    assert scaled["spec"]["scaleTargetRef"]["name"] == name
    assert (hpa["spec"]["scaleTargetRef"]["kind"], hpa["spec"]["scaleTargetRef"]["name"]) == ("Deployment", name)
    assert scaled["spec"]["triggers"][0]["authenticationRef"]["name"] == auth["metadata"]["name"]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    secret = container["env"][0]["valueFrom"]["secretKeyRef"]
    assert (auth["spec"]["secretTargetRef"][0]["name"], auth["spec"]["secretTargetRef"][0]["key"]) == (
        secret["name"],
        secret["key"],
    )
    assert (scaled["spec"]["minReplicaCount"], scaled["spec"]["maxReplicaCount"]) == (2, 100)
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 100)
    keda_behavior = scaled["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    assert keda_behavior == hpa["spec"]["behavior"]
    assert keda_behavior["scaleUp"]["policies"] == [{"type": "Pods", "value": 2, "periodSeconds": 30}]
    assert keda_behavior["scaleDown"]["stabilizationWindowSeconds"] == 300
    # the grace period outlasts the worker's own shutdown grace
    grace = next(int(e["value"]) for e in container["env"] if e["name"] == "JOBQUEUE_SHUTDOWN_GRACE")
    assert deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > grace


def test_the_worker_arguments_are_ones_jobqueue_worker_accepts():
    (deployment,) = by_kind("Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    args = build_parser().parse_args(["worker", *container["args"]])
    assert (args.app, args.queues, args.concurrency, args.metrics_port) == (
        "jobqueue.demo:queue",
        "default",
        "2:20",
        9100,
    )
    probe_port = container["readinessProbe"]["httpGet"]["port"]
    assert {p["name"]: p["containerPort"] for p in container["ports"]}[probe_port] == 9100


def test_the_hpa_reads_the_gauge_the_api_serves():
    (hpa,) = by_kind("HorizontalPodAutoscaler")
    metric = hpa["spec"]["metrics"][0]["external"]["metric"]
    (adapter,) = by_kind("ConfigMap")
    rule = yaml.safe_load(adapter["data"]["config.yaml"])["externalRules"][0]
    assert rule["name"]["as"] == metric["name"] and rule["seriesQuery"].startswith(metric["name"] + "{")
    snapshot = Snapshot(
        measured_at=datetime.now(timezone.utc),
        submitted=0,
        queues=[QueueCounts(metric["selector"]["matchLabels"]["queue"], 2, 5, 0, 0, 0, 0.0)],
        dead=[],
        totals=[],
        workers=[],
        collect_seconds=0.0,
    )
    assert f'{metric["name"]}{{queue="default"}} 2' in render(snapshot)
    assert hpa["spec"]["metrics"][0]["external"]["target"] == {"type": "AverageValue", "averageValue": "1"}


def test_the_dockerfile_builds_the_image_the_deployment_runs():
    text = (MANIFESTS / "Dockerfile").read_text()
    (deployment,) = by_kind("Deployment")
    image = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    assert f"-t {image} ." in text and 'ENTRYPOINT ["jobqueue-worker"]' in text
