"""Session 16 review of `fmstack catalog list`: UltraServers, fabrics and storage tiers in columns, as GPUs and
instances are (they printed an empty description column and every value as one "k=v, ..." cell)."""

from __future__ import annotations

from click.testing import CliRunner

from fmstack.cli.main import cli


def _rows(kind: str) -> dict[str, list[str]]:
    result = CliRunner().invoke(cli, ["catalog", "list", kind])
    assert result.exit_code == 0, result.output
    assert "=" not in result.output  # no "k=v" cells
    rows = [[c.strip() for c in ln.split("│")[1:-1]] for ln in result.output.splitlines() if ln.startswith("│")]
    return {r[0]: r[1:] for r in rows if r[0]}


def test_ultraservers_fabrics_and_storage_list_in_columns() -> None:
    # seed UltraServer table: 72 GPUs, 13.4 TB HBM3e, EFA v4 3,600 GB/s = 28.8 Tbps / 8, 18 x 4-GPU instances
    assert _rows("ultraservers")["u-p6e-gb200x72"] == ["p6e-gb200.36xlarge", "18", "72", "13.4", "efa-v4", "3,600", "-"]
    fabrics = _rows("fabrics")
    # NVLink 4: 900 GB/s bidirectional per H100 = 450 one way; EFA v2: p5's 3,200 Gbps = 400 GB/s per 8-GPU node;
    # EFA v4's 18 % collective gain over v3 (seed)
    assert fabrics["nvlink-4"][:3] == ["scale-up", "4", "450 per GPU"]
    assert fabrics["efa-v2"][:4] == ["scale-out", "2", "400 per 8-GPU node", "55"]
    assert fabrics["efa-v4"][-1] == "1.18" and fabrics["efa-v3"][-1] == "1"
    storage = _rows("storage")
    # FSx for Lustre PERSISTENT-125: 125 MB/s/TiB disk, 320 network baseline, 1,300 burst; 1.2 TiB then 2.4 TiB steps
    assert storage["fsx-persistent-125"] == ["lustre", "MB/s per TiB: network 320 (burst 1300), disk 125 read / 125 write",
                                             "1", "1.2, then +2.4"]  # fmt: skip
    assert storage["s3"][1].startswith("5500 GET / 3500 PUT per s per prefix")
