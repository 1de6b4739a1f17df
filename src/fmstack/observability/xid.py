"""The Xid -> action table, read from the vendored copy of NVIDIA's Xid catalog (``data/xid-catalog.csv``).

Each row of the catalog gives NVIDIA's *immediate action* bucket (IGNORE, RESTART_APP, RESET_GPU, RESTART_BM,
or a named workflow). :func:`action_for_bucket` maps a bucket onto :class:`Action`; workflows are resolved as
the catalog describes them (shared/reference/orchestration-05-xid-ecc.md §1):

- WORKFLOW_XID_48 (double-bit ECC): RESET_GPU, solo or with Xid 63/64 ("drain and reset");
- WORKFLOW_NVLINK_ERR (Xid 74) and WORKFLOW_NVLINK5_ERR (144-150): RESET_GPU unless the row's text says the
  workflow's outcome is IGNORE (147, 148). Without the decoded sub-code fmstack takes the fatal branch;
- WORKFLOW_XID_45 (preemptive cleanup after an app abort): not solo, IGNORE and follow the other Xid; solo,
  RESTART_FM (restart NVIDIA Fabric Manager, a host service on NVSwitch systems, not a rung of fmstack's ladder).
  Both map to NONE: the reference notes call 45 "sympathetic; no node action" (orchestration-05-xid-ecc.md §2),
  and restarting the job was never the catalog's action (the job has already ended: 45 is its cleanup). The
  health engine names RESTART_FM in the reason of a solo 45 so an operator can act on it;
- XID_154: follow the recovery action the driver announces (see :data:`XID154_ACTIONS`);
- CONTACT_SUPPORT as the immediate action (Xid 61, unused on Ampere+): no automatic action;
- RESTART_VM (Xid 151) reboots the node, as RESTART_BM does (gpu-cluster-healthcheck: REBOOT);
- CHECK_MECHANICALS (Xid 54, auxiliary power not connected): replace the node. Seating and cables cannot be
  checked on a cloud instance; aws-samples gpu-cluster-healthcheck classes Xid 54 ISOLATE (drain and replace the
  instance) and the signal-to-action table of shared/reference/observability.md §7 gives replace_node;
- BOOT_REATTEMPT_OR_ENABLE_ECC (Xid 168, errors in the write-protected region with ECC off): reboot the node
  (gpu-cluster-healthcheck: REBOOT; the bucket name is from its r590 table, the catalog page gives the text only).
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from importlib import resources

from fmstack.observability.actions import Action

CATALOG_URL = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"

_BUCKETS: dict[str, Action] = {
    "IGNORE": Action.NONE,
    "CONTACT_SUPPORT": Action.NONE,
    "RESTART_APP": Action.RESTART_JOB,
    "RESET_GPU": Action.RESET_GPU,
    "RESTART_VM": Action.REBOOT_NODE,
    "RESTART_BM": Action.REBOOT_NODE,
    "BOOT_REATTEMPT_OR_ENABLE_ECC": Action.REBOOT_NODE,
    "CHECK_MECHANICALS": Action.REPLACE_NODE,
}

XID154_ACTIONS: dict[str, Action] = {
    "none": Action.NONE,
    "drain p2p": Action.RESET_GPU,
    "drain and reset": Action.RESET_GPU,
    "gpu reset required": Action.RESET_GPU,
    "node reboot required": Action.REBOOT_NODE,
}
"""Xid 154 (GPU_RECOVERY_ACTION_CHANGED) texts -> action; "Drain P2P" is grouped with reset as in
aws-samples gpu-cluster-healthcheck (shared/reference/observability.md §3)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class XidRule:
    """One catalog row resolved to an action."""

    xid: int
    """The Xid number."""
    meaning: str
    """NVIDIA's name and short description."""
    catalog_action: str
    """The catalog's action text, verbatim."""
    action: Action
    """The action fmstack takes for this Xid on its own."""
    source: str
    """Where the row comes from."""


def action_for_bucket(xid: int, action_text: str) -> Action:
    """Resolve a catalog row's ``action`` text (``immediate=...; investigatory=...``) to an :class:`Action`."""
    immediate = action_text.split(";")[0].strip()
    if immediate.startswith("immediate="):
        immediate = immediate[len("immediate=") :]
    bucket = immediate.split(" ")[0].strip()
    if bucket in _BUCKETS:
        return _BUCKETS[bucket]
    if bucket in ("WORKFLOW_XID_48", "WORKFLOW_NVLINK_ERR") or action_text.startswith("follow Xid 48"):
        return Action.RESET_GPU
    if bucket == "WORKFLOW_NVLINK5_ERR":
        detail = immediate[len(bucket) :]
        return Action.NONE if "IGNORE" in detail and "RESET_GPU" not in detail else Action.RESET_GPU
    if bucket == "WORKFLOW_XID_45":
        return Action.NONE
    if bucket == "XID_154":
        return Action.NONE
    raise ValueError(f"xid {xid}: unknown catalog action {action_text!r}")


def parse_catalog(text: str) -> dict[int, XidRule]:
    """Parse the catalog CSV (columns xid, meaning, action, source) into rules keyed by Xid."""
    rules: dict[int, XidRule] = {}
    for row in csv.DictReader(io.StringIO(text)):
        xid = int(row["xid"])
        rules[xid] = XidRule(
            xid=xid,
            meaning=row["meaning"],
            catalog_action=row["action"],
            action=action_for_bucket(xid, row["action"]),
            source=row["source"],
        )
    return rules


def load_xid_catalog() -> dict[int, XidRule]:
    """The vendored catalog, parsed (no caching: callers keep the table on their own instance)."""
    text = resources.files("fmstack.observability").joinpath("data/xid-catalog.csv").read_text(encoding="utf-8")
    return parse_catalog(text)


def xids_for(rules: dict[int, XidRule], action: Action) -> list[int]:
    """The Xids whose catalog action is ``action``, sorted (used to build alert-rule regexes)."""
    return sorted(x for x, r in rules.items() if r.action is action)
