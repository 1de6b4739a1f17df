"""GB200 / GB300 NVL72 on Slurm (slurm_gb200): ``slurm.segment`` -> ``#SBATCH --segment``, the MNNVL NCCL variables,
the Prolog's IMEX duty as a comment, the refusal of ``--segment`` on a Slurm before 24.05, topology.conf blocks.

Segment sizes are worked by hand: p6e-gb200.36xlarge has 4 GPUs in a 72-GPU NVLink domain, 72 / 4 = 18 nodes per
domain; auto takes the job's nodes when they fit one domain, else the largest divisor of them that is <= 18.
Golden: ``tests/launch/golden/sbatch_gb200_36n.sh`` (regenerate with ``FMSTACK_REGEN_GOLDEN=1``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from fmstack.catalog import Catalog
from fmstack.errors import InputError
from fmstack.orchestration.jobspec import ResolvedJob, parse_jobspec, resolve
from fmstack.orchestration.launchers import get_launcher, k8s_gb200, shell, slurm_gb200
from fmstack.orchestration.launchers.slurm import render_sbatch
from tests.launch.conftest import GB200_SLURM_SPEC

GOLDEN = Path(__file__).parent / "golden" / "sbatch_gb200_36n.sh"


def _job(catalog: Catalog, **more: Any) -> ResolvedJob:
    return resolve(parse_jobspec({**GB200_SLURM_SPEC, **more}), catalog)


def _segment_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("#SBATCH --segment")]


def test_render_matches_golden(catalog: Catalog) -> None:
    text = render_sbatch(_job(catalog))
    if os.environ.get("FMSTACK_REGEN_GOLDEN"):
        GOLDEN.write_text(text, encoding="utf-8")
    assert text == GOLDEN.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("nodes", "size"),
    [
        (2, None), (8, None), (18, None),  # one rack holds the job: topology/block keeps it there, no segment needed
        (36, 18), (54, 18), (72, 18),  # whole racks
        (20, 10), (24, 12), (30, 15), (40, 10),  # largest divisor <= 18: 20 = 2 x 10, 24 = 2 x 12, 30 = 2 x 15, 40 = 4 x 10
        (1, None),  # one node: NVLink within the node, nothing to place
        (19, None), (37, None),  # primes above 18: no divisor from 2 to 18
    ],
)  # fmt: skip
def test_auto_segment_by_hand(catalog: Catalog, nodes: int, size: int | None) -> None:
    job = _job(catalog, nodes=nodes)
    assert slurm_gb200.segment(job).size == size
    assert _segment_lines(render_sbatch(job)) == ([f"#SBATCH --segment={size}"] if size else [])


def test_auto_says_why_when_below_one_rack(catalog: Catalog) -> None:
    text = render_sbatch(_job(catalog, nodes=20))
    assert "# fmstack: --segment=10: the largest divisor of 20 nodes that fits one NVLink domain of 18 nodes" in text
    text = render_sbatch(_job(catalog, nodes=19))
    assert "# fmstack: no --segment: 19 nodes have no divisor from 2 to 18" in text
    # a choice equal to a rack needs no comment; a job that one rack holds gets none and says why
    assert "largest divisor" not in render_sbatch(_job(catalog, nodes=36))
    assert "# fmstack: no --segment: 8 nodes fit one NVLink domain of 18 nodes" in render_sbatch(_job(catalog, nodes=8))


def test_explicit_segment_is_checked(catalog: Catalog) -> None:
    assert _segment_lines(render_sbatch(_job(catalog, slurm={"segment": 12}))) == ["#SBATCH --segment=12"]
    assert _segment_lines(render_sbatch(_job(catalog, slurm={"segment": 9}))) == ["#SBATCH --segment=9"]
    # divisors of 36 up to 18: 1, 2, 3, 4, 6, 9, 12, 18
    allowed = "allowed: auto, none or one of 1, 2, 3, 4, 6, 9, 12, 18"
    with pytest.raises(InputError, match=f"slurm.segment: 7: a segment must divide nodes\\(36\\) .*{allowed}$"):
        render_sbatch(_job(catalog, slurm={"segment": 7}))
    with pytest.raises(InputError, match=f"slurm.segment: 36: .*one NVLink domain of 18 nodes .*{allowed}$"):
        render_sbatch(_job(catalog, slurm={"segment": 36}))


def test_none_renders_no_segment_but_keeps_the_nvlink_env(catalog: Catalog) -> None:
    text = render_sbatch(_job(catalog, slurm={"segment": "none"}))
    assert _segment_lines(text) == []
    assert "export NCCL_MNNVL_ENABLE=1" in text and "nodes_config.cfg" in text


def test_nccl_env_is_k8s_gb200s_and_the_jobspec_wins(catalog: Catalog) -> None:
    assert slurm_gb200.nccl_env(_job(catalog)) == k8s_gb200.NCCL_ENV  # one definition, two launchers
    text = render_sbatch(_job(catalog, env={"NCCL_MNNVL_ENABLE": "0"}))
    assert "export NCCL_MNNVL_ENABLE=0" in text and "NCCL_MNNVL_ENABLE=1" not in text
    assert "export NCCL_NVLS_ENABLE=1" in text


def test_imex_duty_is_stated(catalog: Catalog) -> None:
    comments = slurm_gb200.comment_lines(_job(catalog))
    text = "\n".join(comments)
    assert all(c.startswith("#") for c in comments)
    for needle in ("Prolog", "nodes_config.cfg", "IMEX_NODE_CONFIG_FILE", "restart nvidia-imex",
                   "/dev/nvidia-caps-imex-channels/channel0", "switch/nvidia_imex"):  # fmt: skip
        assert needle in text, needle


def test_instances_without_multi_node_nvlink(catalog: Catalog) -> None:
    p5 = {"instance": "p5.48xlarge", "nodes": 4}
    text = render_sbatch(_job(catalog, **p5))
    assert _segment_lines(text) == [] and "NCCL_MNNVL_ENABLE" not in text and "IMEX" not in text
    assert _segment_lines(render_sbatch(_job(catalog, **p5, slurm={"segment": "none"}))) == []
    with pytest.raises(
        InputError, match=r"slurm.segment: 2: p5.48xlarge \(nvlink_domain_gpus 8, not above one node's 8"
    ):
        render_sbatch(_job(catalog, **p5, slurm={"segment": 2}))
    with pytest.raises(InputError, match=r"slurm.segment: 2: a job without an instance"):
        render_sbatch(_job(catalog, instance=None, nodes=2, slurm={"segment": 2}))
    # one GB200 node: NVLink within the node needs no IMEX
    one = render_sbatch(_job(catalog, nodes=1))
    assert "NCCL_MNNVL_ENABLE" not in one and "IMEX" not in one


@pytest.mark.parametrize("bad", ["Auto", 0, -18, True, "18", 1.5])
def test_segment_field_is_strict(bad: object) -> None:
    with pytest.raises(
        InputError, match=r"field 'slurm.segment': Value error, must be auto, none or a number of nodes"
    ):
        parse_jobspec({**GB200_SLURM_SPEC, "slurm": {"segment": bad}})


@pytest.mark.parametrize(
    ("text", "version"),
    [("slurm-wlm 22.05.8\n", (22, 5, 8)), ("slurm 24.05.4", (24, 5, 4)), ("slurm 25.11", (25, 11, 0)), ("?", None)],
)
def test_parse_version(text: str, version: tuple[int, int, int] | None) -> None:
    assert slurm_gb200.parse_version(text) == version


def test_check_sbatch_refuses_segment_before_24_05(catalog: Catalog) -> None:
    script = render_sbatch(_job(catalog))
    with pytest.raises(InputError) as err:
        slurm_gb200.check_sbatch(script, "slurm-wlm 22.05.8\n")
    assert str(err.value) == (
        "slurm.segment: --segment=18 needs Slurm 24.05 or newer (topology/block segments), but sbatch --version says "
        "'slurm-wlm 22.05.8'; set slurm.segment: none to submit without it"
    )
    with pytest.raises(InputError, match=r"'slurm 23.11.10'"):
        slurm_gb200.check_sbatch(script, "slurm 23.11.10")
    for ok in ("slurm 24.05.0", "slurm 25.05.3", "unknown"):
        slurm_gb200.check_sbatch(script, ok)
    # no --segment: no check at all
    slurm_gb200.check_sbatch(render_sbatch(_job(catalog, slurm={"segment": "none"})), "slurm-wlm 22.05.8")


def test_submit_asks_sbatch_its_version_first(
    tmp_path: Path, catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[list[str]] = []

    def fake(version: str) -> Any:
        def run(argv: list[str], *, input_text: str | None = None, timeout_s: float = 60.0) -> str:
            calls.append(list(argv))
            return version if argv == ["sbatch", "--version"] else "4242\n"

        return run

    job = _job(catalog, nodes=2, log_dir=str(tmp_path / "logs"), checkpoint=None, image=None,
               slurm={"segment": 2})  # fmt: skip
    monkeypatch.setattr(shell, "run", fake("slurm-wlm 22.05.8\n"))
    with pytest.raises(InputError, match=r"slurm.segment: --segment=2 needs Slurm 24.05"):
        get_launcher("slurm").submit(job)
    assert calls == [["sbatch", "--version"]]  # sbatch --parsable never ran
    calls.clear()
    monkeypatch.setattr(shell, "run", fake("slurm 24.11.1\n"))
    assert get_launcher("slurm").submit(job).job_id == "slurm:4242"
    assert calls == [["sbatch", "--version"], ["sbatch", "--parsable"]]
    calls.clear()  # without --segment (p5, or segment: none) nothing is asked
    get_launcher("slurm").submit(_job(catalog, nodes=2, log_dir=str(tmp_path / "logs"), checkpoint=None, image=None,
                                      slurm={"segment": "none"}))  # fmt: skip
    assert calls == [["sbatch", "--parsable"]]


def test_topology_block_conf() -> None:
    racks = {"us1": [f"gb-{i}" for i in range(1, 19)], "us2": [f"gb-{i}" for i in range(19, 37)]}
    text = slurm_gb200.topology_block_conf(racks, 18)
    assert text.splitlines() == [
        "BlockName=us1 Nodes=" + ",".join(f"gb-{i}" for i in range(1, 19)),
        "BlockName=us2 Nodes=" + ",".join(f"gb-{i}" for i in range(19, 37)),
        "BlockSizes=18",
    ]
    with pytest.raises(InputError, match="blocks: us3: 9 nodes < BlockSizes 18"):
        slurm_gb200.topology_block_conf({"us3": [f"x{i}" for i in range(9)]}, 18)
    with pytest.raises(InputError, match="blocks: 'a b'"):
        slurm_gb200.topology_block_conf({"a b": ["x"]}, 1)
