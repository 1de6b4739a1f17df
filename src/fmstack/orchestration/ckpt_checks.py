"""Checks of a JobSpec's checkpoint tiers before anything is submitted: the URL shapes, whether the fast tier can be
written from here, and the node-local paths a multi-node job would not share."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

from fmstack.errors import InputError
from fmstack.orchestration.jobspec import JobSpec

NODE_LOCAL_PREFIXES = ("/tmp", "/var/tmp", "/dev/shm", "/run")
"""Paths that are node-local on any cluster (FHS: /tmp, /var/tmp; tmpfs: /dev/shm, /run)."""


def node_local_warning(spec: JobSpec, *, target: str = "slurm") -> str | None:
    """A warning when a multi-node job's only checkpoint tier is a node-local path: each node then keeps its own
    shards, and a restart on other nodes finds nothing to resume from (a test cluster of virtual nodes on one
    host is the exception, hence a warning and not an error)."""
    ck = spec.checkpoint
    # on Kubernetes a claim (checkpoint.pvc) is shared storage mounted at the location; Slurm ignores pvc
    if ck is None or spec.nodes < 2 or ck.durable is not None or (ck.pvc is not None and target == "kubernetes"):
        return None
    path = os.path.abspath(ck.location)
    if not any(path == p or path.startswith(p + "/") for p in NODE_LOCAL_PREFIXES):
        return None
    return (
        f"warning: checkpoint.location {ck.location!r} is node-local and the job has {spec.nodes} nodes; a restart on "
        "other nodes will not find it: use a shared file system (FSx for Lustre, NFS) or set checkpoint.durable"
    )


def check_checkpoint_location(spec: JobSpec, *, fast_tier_on_this_host: bool = True) -> None:
    """Fail before submission if a checkpoint tier cannot be written (a directory is created in the fast tier's
    nearest existing parent and removed again: nothing is left behind). ``fast_tier_on_this_host``
    False: the fast tier is a volume mounted in the pods (Kubernetes ``checkpoint.pvc``), not checked here."""
    if spec.checkpoint is None:
        return
    ck = spec.checkpoint
    if fast_tier_on_this_host:
        _check_local("checkpoint.location", ck.location)
    if ck.durable is None:
        return
    if "://" not in ck.durable or ck.durable.startswith("file://"):
        _check_local("checkpoint.durable", ck.durable.removeprefix("file://"))
        return
    try:
        import fsspec

        fs, path = fsspec.core.url_to_fs(ck.durable, **ck.storage_options)
        bucket = str(path).split("/", 1)[0]
        try:
            fs.ls(bucket, detail=False)
        except FileNotFoundError:
            raise InputError("checkpoint.durable", f"{ck.durable!r}: bucket {bucket!r} does not exist") from None
    except InputError:
        raise
    except Exception as exc:  # any transport or auth failure means unreachable
        reason = " ".join(str(exc).split())[:160] or type(exc).__name__
        raise InputError("checkpoint.durable", f"{ck.durable!r} is unreachable: {reason}") from None


_URL = re.compile(r"^([a-z][a-z0-9+.-]*)://([^/]+)(/.*)?$")


def check_checkpoint_shape(spec: JobSpec) -> list[str]:
    """What a dry run can check without touching the network or the file system: the fast tier is a path, not a
    URL; the durable tier is a path or a ``scheme://bucket/...`` URL. Returns the checks it left out (the ones
    :func:`check_checkpoint_location` makes), so the caller can say so."""
    if spec.checkpoint is None:
        return []
    ck = spec.checkpoint
    if "://" in ck.location:
        raise InputError(
            "checkpoint.location", f"{ck.location!r}: the fast tier must be a local or shared file-system path"
        )
    skipped = [f"checkpoint.location {ck.location!r} is writable"]
    if ck.durable is not None:
        if "://" in ck.durable and not ck.durable.startswith("file://") and not _URL.match(ck.durable):
            raise InputError("checkpoint.durable", f"{ck.durable!r} is not a path or a URL like s3://bucket/prefix")
        remote = "://" in ck.durable and not ck.durable.startswith("file://")
        skipped.append(f"checkpoint.durable {ck.durable!r} is {'reachable' if remote else 'writable'}")
    return skipped


def _check_local(field: str, location: str) -> None:
    if "://" in location:
        raise InputError(field, f"{location!r}: the fast tier must be a local or shared file-system path")
    p = Path(location).absolute()
    while not p.exists():
        p = p.parent
    if not p.is_dir():
        raise InputError(field, f"{location!r}: {p} is not a directory")
    if not os.access(p, os.W_OK | os.X_OK):
        raise InputError(field, f"{location!r}: {p} is not writable")
    # os.access says yes to root everywhere, and to virtual or read-only file systems: really create a directory
    # there (what the job will do) and remove it again, so the check leaves nothing behind
    try:
        probe = tempfile.mkdtemp(prefix=".fmstack-probe-", dir=p)
    except OSError as exc:
        raise InputError(field, f"{location!r}: cannot create a directory in {p}: {exc.strerror}") from None
    os.rmdir(probe)
