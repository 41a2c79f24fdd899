"""The Kubernetes manifests in deploy/k8s/, read and validated offline: built-in kinds against
kubernetes-validate's bundled schemas (strict: unknown fields fail), KEDA's kinds against
tests/support/k8s/keda.schema.json, which reuses Kubernetes' definitions for what KEDA embeds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml
from kubernetes_validate.utils import schema_contents
from referencing import Registry, Resource

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "deploy" / "k8s"
KUBERNETES_VERSION = "1.33"
_KEDA = json.loads((Path(__file__).parent / "k8s" / "keda.schema.json").read_text())
_KEDA_KINDS = {"ScaledObject": "scaledObject", "TriggerAuthentication": "triggerAuthentication"}


def documents(name: str | None = None) -> list[dict[str, Any]]:
    """Every YAML document of deploy/k8s/ (of one file when ``name`` is given), in file order."""
    paths = [MANIFESTS / name] if name else sorted(MANIFESTS.glob("*.yaml"))
    return [doc for path in paths for doc in yaml.safe_load_all(path.read_text()) if doc]


def _keda_validator(kind: str) -> jsonschema.Draft202012Validator:
    definitions = schema_contents(
        f"kubernetes-json-schema/v{KUBERNETES_VERSION}.0-local-strict/_definitions.json", KUBERNETES_VERSION
    )
    registry = Registry().with_resource(definitions["$id"], Resource.from_contents(definitions))
    schema = {"$schema": _KEDA["$schema"], "$defs": _KEDA["$defs"], "$ref": f"#/$defs/{_KEDA_KINDS[kind]}"}
    return jsonschema.Draft202012Validator(schema, registry=registry)


def validate(doc: dict[str, Any]) -> None:
    """Raise `jsonschema.ValidationError` (or kubernetes-validate's) when ``doc`` is not a valid object."""
    if doc.get("apiVersion", "").startswith("keda.sh/"):
        if doc.get("kind") not in _KEDA_KINDS:
            raise jsonschema.ValidationError(f"no schema for KEDA kind {doc.get('kind')!r}")
        _keda_validator(doc["kind"]).validate(doc)
    else:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
