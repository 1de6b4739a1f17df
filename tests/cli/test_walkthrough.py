"""A new user's walk through the README and docs (session 8): what it found, each with the behaviour expected."""

from __future__ import annotations

from pathlib import Path

from fmstack.cli.common import number_text as _number
from tests.cli.test_plan_ux import _invoke_split as _invoke


def test_group_without_a_command_prints_its_help_not_one_flattened_line() -> None:
    # `fmstack plan` alone used to print "fmstack: error: Usage: fmstack plan [OPTIONS] ... Commands: serve ..." on
    # one line; it is the help, laid out as --help lays it out, with click's usage-error exit code
    for argv in (["plan"], ["estimate"], []):
        code, _, err = _invoke(*argv)
        assert code == 2
        assert not err.startswith("fmstack: error:")
        lines = err.splitlines()
        assert lines[0].startswith(f"Usage: fmstack {' '.join(argv)}".rstrip() + " [OPTIONS] COMMAND")
        assert "Commands:" in lines


def test_group_help_names_every_subcommand() -> None:
    # the estimate and plan groups said "training, and more as they land" / "serving when available"
    _, out, _ = _invoke("estimate", "--help")
    assert "train, serve, or rl (one PPO / GRPO step)" in " ".join(out.split())
    _, out, _ = _invoke("plan", "--help")
    assert "training (train), serving (serve) or an RL step (rl)" in " ".join(out.split())


def test_validate_numbers_never_print_in_exponent_form() -> None:
    assert _number(14431.2) == "14,431"  # was f"{x:.4g}": "1.443e+04" beside a measured "12036"
    assert _number(305.49) == "305.5"
    assert _number(0.00021994) == "0.0002199"  # the collectives column printed "0.0" for 8-byte all-reduces
    code, out, _ = _invoke("validate", "--only", "training")
    assert code == 0
    table = out.split("training dense:")[0]
    assert "e+0" not in table
    table = table.split("training: not expressible")[0]  # the predicted rows' table
    # the error column stays on one line: "+156.9 %" was split into "+156.9" and "%"
    rows = [line for line in table.splitlines() if line.startswith("│ T")]
    assert rows and all(line.split("│")[7].strip().endswith("%") or line.split("│")[7].strip() == "-" for line in rows)


def test_scale_table_fits_140_columns_with_whole_instance_names() -> None:
    # the gpu axis cut names to "p5en.48xlar…" and headers to "tokens/s/G…"; stdout began with a blank line (the
    # search's progress bar, finished on stdout in a pipe)
    code, out, _ = _invoke(
        "scale", "--model", "llama3.1-70b", "--instance", "p5.48xlarge", "--gpus", "512", "--tokens", "2e12",
        "--axis", "gpu", "--values", "p5.48xlarge,p5en.48xlarge",
    )  # fmt: skip
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("llama3.1-70b: scaling over gpu")
    table = [line for line in lines if line[:1] in "┏┃┡│└"]
    assert all(len(line) <= 140 and line.rstrip()[-1] in "┓┃┩│┘" for line in table)  # not cropped either
    assert any(line.startswith("│ p5en.48xlarge ") for line in table)
    assert "…" not in "".join(table)


def test_plan_serve_names_replicas_and_whole_instances() -> None:
    # the summary read "8 x p6-b200.48xlarge tp 1 fp8 on 1 node(s)" (8 replicas, not 8 instances) and the table cut
    # instance names to "p6-b200.48x…"; --instance took no comma list as plan train's does ("unknown instance
    # 'p6-b200.48xlarge,p5en.48xlarge'"), only the option repeated
    code, out, _ = _invoke(
        "plan", "serve", "--model", "llama3.1-8b", "--qps", "5", "--input-len", "512", "--output-len", "128",
        "--ttft-p99", "0.5", "--itl-p99", "0.05", "--instance", "p6-b200.48xlarge,p5en.48xlarge",
    )  # fmt: skip
    assert code == 0
    first, *rest = out.splitlines()
    assert " replica(s) of tp " in first and " x p" in first.split(" on ")[-1]
    rows = [line for line in rest if line.startswith("│ ")]
    names = ("p6-b200.48xlarge", "p5en.48xlarge")
    title = next(line for line in rest if line.startswith("candidates"))
    if "every row: p" in title:  # one instance for every row: said once, in full, in the title
        assert title.split("every row: ")[1].split(",")[0] in names
    else:
        assert rows and all(line.split("│")[1].strip() in names for line in rows)


def test_inference_validation_numbers_never_print_in_exponent_form() -> None:
    code, out, _ = _invoke("validate", "--only", "inference")
    assert code == 0
    assert "e+0" not in out.split("inference:")[1]


def test_whole_nodes_hint_gives_the_counts_either_side() -> None:
    from fmstack.cli.common import whole_nodes_hint

    assert whole_nodes_hint(500, 8) == "; nearest: 496 (62 nodes) or 504 (63 nodes)"
    assert whole_nodes_hint(4, 8) == "; nearest: 8 (1 node)"  # no zero-node option
    assert whole_nodes_hint(12, 8) == "; nearest: 8 (1 node) or 16 (2 nodes)"


def test_health_says_when_the_alerts_leave_nothing_to_do(tmp_path: Path) -> None:
    # an alerts answer with no firing fmstack node alert printed an empty table and nothing else
    alerts = tmp_path / "alerts.json"
    alerts.write_text('{"data": {"alerts": [{"state": "pending", "labels": {"alertname": "FmstackGpuXidRebootRequired"'
                      ', "Hostname": "n4", "xid": "79"}}]}}')  # fmt: skip
    code, out, _ = _invoke("health", "--alerts", str(alerts))
    assert code == 0
    assert out.strip() == f"{alerts}: no firing fmstack node alert; nothing to do"


def test_estimate_time_to_train_lines_are_not_broken_mid_phrase() -> None:
    # the README's estimate command: the checkpoint + FSx line and the failures + lost-time line ran past 140
    # columns, and a log (fixed width 140) broke them mid-phrase ("... 2.4 TiB needed (read" / "1.2, write ...")
    code, out, _ = _invoke(
        "estimate", "train", "--model", "llama3.1-70b", "--instance", "p5.48xlarge", "--nodes", "64", "--tp", "8",
        "--pp", "4", "--micro-batch", "1", "--global-batch", "1024", "--seq-len", "8192", "--recompute", "selective",
        "--tokens", "2e12",
    )  # fmt: skip
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("llama3.1-70b on 512 p5.48xlarge GPUs: ")  # was "512 x p5.48xlarge": 512 instances?
    starts = ("checkpoint ", "FSx fsx-persistent-1000 ", "failures: MTBF ", "time lost: ", "time to train ", "cost $")
    tail = lines[-len(starts) - 1 : -1]
    assert [line.startswith(s) for line, s in zip(tail, starts, strict=True)] == [True] * len(starts), tail


def test_plan_serve_table_says_shared_columns_once_and_fits_140_columns() -> None:
    # an MoE plan's 15 columns squeezed every two-word header over 4-5 lines ("nodes / per / replica"); what every
    # shown row shares (instance, precision, pp, nodes per replica) now goes to the title
    code, out, _ = _invoke(
        "plan", "serve", "--model", "deepseek-v3", "--instance", "p5en.48xlarge", "--qps", "15", "--input-len", "2048",
        "--output-len", "256", "--ttft-p99", "2", "--itl-p99", "0.1", "--precision", "fp8",
    )  # fmt: skip
    assert code == 0, out
    lines = out.splitlines()
    title = next(line for line in lines if line.startswith("candidates"))
    assert "every row: p5en.48xlarge, fp8, pp 1, 1 node(s) per replica" in title
    top = next(i for i, line in enumerate(lines) if line.startswith("┏"))
    rule = next(i for i, line in enumerate(lines) if line.startswith("┡"))
    assert rule - top - 1 <= 2  # header lines: at most the two the headers ask for
    assert all(len(line) <= 140 for line in lines[top : rule + 1])
    header = " ".join(lines[top + 1 : rule])
    assert "attn" in header and "instance" not in header


def test_validate_training_lists_the_rows_it_cannot_express_apart() -> None:
    # a not-expressible row's reason wrapped over five lines inside the predicted table's config column
    code, out, _ = _invoke("validate", "--only", "training")
    assert code == 0
    predicted, apart = out.split("training: not expressible")
    predicted_ids = {line.split("│")[1].strip() for line in predicted.splitlines() if line.startswith("│ T")}
    apart_ids = {line.split("│")[1].strip() for line in apart.splitlines() if line.startswith("│ T")}
    assert predicted_ids and apart_ids and not predicted_ids & apart_ids
    assert "T034" in apart_ids and "T001" in predicted_ids
    assert "not expressible:" not in predicted


def test_collectives_table_prints_no_exponents_and_each_reason_once() -> None:
    from fmstack.cli.common import number_text, published_text

    # a p4d 8-byte all-reduce printed its measured busbw as "9.12964e-05" and predicted "9.482e-05"
    assert number_text(9.482e-05) == "0.00009482" and published_text(9.12964e-05) == "0.0000912964"
    assert published_text(479.28) == "479.28" and published_text(12036) == "12,036"  # as published
    code, out, _ = _invoke("validate", "--only", "collectives")
    assert code == 0
    table, _, after = out.partition("└")
    assert "e-0" not in table and "e+0" not in table
    # an out-of-scope reason repeated on every p4d row (4 wrapped lines each); now numbered once under the table,
    # as are in-scope rows' notes (session 16: "no size stated: compared at 8 GiB" was --json only)
    rows = [[c.strip() for c in ln.split("│")[1:-1]] for ln in table.splitlines() if ln.startswith("│ COL")]
    refs = {r[10] for r in rows} - {""}
    notes = [ln for ln in after.splitlines() if ln.startswith("[")]
    assert refs and {n.split(" ")[0] for n in notes} == refs
    assert {r[8] for r in rows} == {"yes", "no"} and all(r[10] for r in rows if r[8] == "no")
    by_id = {r[0]: r for r in rows}
    assert (by_id["COL-030"][9], by_id["COL-031"][9]) == ("nvls", "ring")  # one node, one size: NVLS vs ring


def test_side_check_says_each_note_once_under_the_table() -> None:
    # the system note of every multi-node row ("system mosaic-a100-40gb-roce: data/llmfoundry/instances.yaml
    # (ib-hdr standing for RoCE)") filled a wrapped note column on 100+ rows; now a number per row, the text once
    code, out, _ = _invoke("validate", "--only", "sidecheck")
    assert code == 0
    table, below = out.split("└", 1)
    assert "standing for RoCE" not in table
    notes = [line for line in below.splitlines() if line.startswith("[")]
    assert len(notes) == len(set(notes)) == 3
    assert all(f"[{n}]" in table for n in (1, 2, 3))
