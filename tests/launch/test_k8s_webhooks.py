"""What the JobSet and training-operator webhooks refuse beyond the CRD schemas, checked offline (k8s_webhooks):
the PyTorchJob ``pytorch`` container and its MASTER_PORT port, DNS-1035 names, generated names within 63 characters.
"""

from __future__ import annotations

from typing import Any

import pytest

from fmstack.catalog import Catalog
from fmstack.errors import InputError
from fmstack.orchestration.jobspec import ResolvedJob, parse_jobspec, resolve
from fmstack.orchestration.launchers.k8s_manifests import RDZV_PORT, render_jobset, render_pytorchjob, validate_manifest
from tests.launch.conftest import P5_SPEC

pytest.importorskip("kubernetes_validate")


def _job(catalog: Catalog, **over: Any) -> ResolvedJob:
    return resolve(parse_jobspec({**P5_SPEC, **over}), catalog)


def _containers(m: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for r in m["spec"]["pytorchReplicaSpecs"].values() for c in r["template"]["spec"]["containers"]]


def test_pytorchjob_container_is_named_pytorch_with_the_operators_port(p5_job: ResolvedJob) -> None:
    m = render_pytorchjob(p5_job)
    assert [c["name"] for c in _containers(m)] == ["pytorch", "pytorch"]  # Master and Worker
    for c in _containers(m):
        # the operator sets MASTER_PORT from the pytorch container's pytorchjob-port port (else adds 23456)
        assert c["ports"] == [{"containerPort": RDZV_PORT, "name": "pytorchjob-port"}]
        assert "--master-port=$(MASTER_PORT)" in c["args"]
    validate_manifest(m)
    js = render_jobset(p5_job)  # JobSet: the name is free, unchanged
    assert js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["name"] == "trainer"


def test_offline_check_refuses_a_pytorchjob_without_a_pytorch_container(p5_job: ResolvedJob) -> None:
    m = render_pytorchjob(p5_job)
    m["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["name"] = "trainer"
    with pytest.raises(InputError, match=r"Worker.template.spec.containers: must have a container named 'pytorch'"):
        validate_manifest(m)


@pytest.mark.parametrize("render", [render_jobset, render_pytorchjob])
def test_a_name_starting_with_a_digit_is_refused(render: Any, catalog: Catalog) -> None:
    m = render(_job(catalog, name="7b-pretrain"))
    with pytest.raises(InputError, match=r"^name: '7b-pretrain' starts with a digit: a \w+ name must be a DNS-1035"):
        validate_manifest(m)


@pytest.mark.parametrize(
    ("nodes", "longest_ok"),
    [
        (4, 45),  # 63 - len("-trainer-0-3-xxxxx") = 63 - 18
        (10, 45),  # pod index 9: still one digit
        (11, 44),  # pod index 10
        (101, 43),  # pod index 100
    ],
)
def test_jobset_name_fits_its_longest_pod_name(nodes: int, longest_ok: int, catalog: Catalog) -> None:
    validate_manifest(render_jobset(_job(catalog, nodes=nodes, name="a" * longest_ok, plan=None)))
    m = render_jobset(_job(catalog, nodes=nodes, name="a" * (longest_ok + 1), plan=None))
    pod = "a" * (longest_ok + 1) + f"-trainer-0-{nodes - 1}-xxxxx"
    assert len(pod) == 64
    with pytest.raises(InputError) as err:
        validate_manifest(m)
    assert str(err.value) == (
        f"name: '{'a' * (longest_ok + 1)}' is {longest_ok + 1} characters; at most {longest_ok} for this JobSet: "
        f"its longest pod name '{pod}' (64 characters) must be a DNS-1035 label of at most 63"
    )


def test_pytorchjob_name_fits_the_operators_service_names(p5_job: ResolvedJob) -> None:
    m = render_pytorchjob(p5_job)  # 4 nodes: Master 0 and Workers 0..2, Services <name>-worker-2 the longest
    m["metadata"]["name"] = "a" * 54  # 54 + len("-worker-2") = 63
    validate_manifest(m)
    m["metadata"]["name"] = "a" * 55
    with pytest.raises(InputError, match=r"^name: 'a{55}' is 55 characters; at most 54 for this PyTorchJob: the "
                                         r"operator's Service 'a{55}-master-0' \(64 characters\)"):  # fmt: skip
        validate_manifest(m)
