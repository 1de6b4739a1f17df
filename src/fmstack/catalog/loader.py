"""Load the built-in catalog and a user's overrides from YAML files.

A catalog file is either ``{kind: KIND, entries: [ {...}, ... ]}`` or one entry with its own
``kind``. User files (``--catalog DIR`` or ``FMSTACK_CATALOG``) add entries or replace a built-in
entry of the same kind and name. A malformed file fails with one line naming file, entry and field.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import ValidationError

from fmstack.catalog.schema import GPU, KINDS, Entry, Fabric, Instance, ModelArch, StorageTier, UltraServer
from fmstack.errors import InputError

E = TypeVar("E", bound=Entry)


def _norm(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(" ", "-")


def unknown_name_message(what: str, name: str, known: Iterable[str], aliases: Iterable[tuple[str, str]] = ()) -> str:
    """``unknown WHAT 'name'; did you mean 'a' or 'b'? known: ...``: up to three close names first (a typo, a
    missing character, another case; difflib's ratio >= 0.6 on the normalised names, or names the given text
    begins), then every known name. ``aliases`` are (alias, name) pairs that also match and suggest their name."""
    names = sorted(set(known))
    by_norm: dict[str, str] = {_norm(n): n for n in names}
    for alias, target in aliases:
        by_norm.setdefault(_norm(alias), target)
    key = _norm(name)
    close = [by_norm[k] for k in difflib.get_close_matches(key, list(by_norm), n=3, cutoff=0.6)]
    if len(key) >= 2:
        close += [by_norm[k] for k in sorted(by_norm) if k.startswith(key)]
    suggested = list(dict.fromkeys(close))[:3]
    hint = ""
    if suggested:
        hint = f"did you mean {' or '.join(repr(s) for s in suggested)}? "
    return f"unknown {what} {name!r}; {hint}known: {', '.join(names)}"


def _describe_validation(exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"]) or str((err.get("ctx") or {}).get("field", "(entry)"))
    msg = err["msg"]
    if err["type"] == "extra_forbidden":
        msg = "unknown field"
    elif err["type"] == "missing":
        msg = "missing required field"
    return f"field '{loc}': {msg}"


def parse_entry(raw: Any, kind: str | None, where: str, *, require: str | None = None) -> Entry:
    """Validate one raw mapping into its typed entry; errors name ``where`` and the field.

    ``require``: the kind the caller expects (a file given as ``--model``); another kind is refused by name.
    """
    if not isinstance(raw, dict):
        raise InputError(where, f"an entry must be a mapping, got {type(raw).__name__}")
    entry_kind = raw.get("kind", kind)
    if require is not None and entry_kind != require:
        raise InputError(where, f"holds an entry of kind {entry_kind!r}, not a {require}; use kind: {require}")
    if entry_kind not in KINDS:
        raise InputError(where, f"kind {entry_kind!r} unknown; allowed: {', '.join(KINDS)}")
    name = raw.get("name", "?")
    try:
        return KINDS[entry_kind].model_validate({**raw, "kind": entry_kind})
    except ValidationError as exc:
        raise InputError(f"{where} entry '{name}'", _describe_validation(exc)) from None


def read_file(path: Path, kind: str | None = None, *, single: bool = False) -> list[Entry]:
    """Parse one catalog YAML file into entries; with ``kind``, entries default to it and must all be of it.

    ``single``: the file must hold exactly one entry (a file given as ``--model``), checked before parsing them."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(str(path), f"cannot read: {exc.strerror}") from None
    except UnicodeDecodeError as exc:  # a ValueError, not an OSError: a binary file (an image, a gzip) in the folder
        raise InputError(str(path), f"not UTF-8 text (byte {exc.start}); expected a catalog YAML file") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark is not None else ""
        raise InputError(str(path), f"not valid YAML{line}") from None
    except RecursionError:  # the parser recurses per nesting level: a: [[[[...]]]] 100,000 deep
        raise InputError(str(path), "nests YAML lists or mappings too deeply to read") from None
    if isinstance(data, dict) and "entries" in data:
        entries = data["entries"]
        if not isinstance(entries, list):
            raise InputError(str(path), "'entries' must be a list")
        if single and len(entries) != 1:
            raise InputError(str(path), f"must hold exactly one {kind or 'catalog'} entry, found {len(entries)}")
        return [parse_entry(raw, data.get("kind", kind), str(path), require=kind) for raw in entries]
    if isinstance(data, dict):
        return [parse_entry(data, kind, str(path), require=kind)]
    raise InputError(str(path), "expected a mapping with 'kind' and 'entries', or one entry")


def _yaml_files(directory: Path) -> Iterator[Path]:
    yield from sorted(p for p in directory.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())


@dataclass
class Catalog:
    """All entries by kind, looked up by name or alias, case-insensitively."""

    entries: dict[str, dict[str, Entry]] = field(default_factory=lambda: {k: {} for k in KINDS})

    def add(self, entry: Entry) -> None:
        kind = str(getattr(entry, "kind"))  # noqa: B009 - every concrete entry has a kind literal
        self.entries[kind][_norm(entry.name)] = entry

    def extend(self, items: Iterable[Entry]) -> None:
        for item in items:
            self.add(item)

    def names(self, kind: str) -> list[str]:
        self._check_kind(kind)
        return [e.name for e in self.entries[kind].values()]

    def all(self, kind: str) -> list[Entry]:
        self._check_kind(kind)
        return list(self.entries[kind].values())

    def get(self, kind: str, name: str) -> Entry:
        """The entry of ``kind`` called ``name`` (or an alias); InputError listing the known names."""
        self._check_kind(kind)
        table = self.entries[kind]
        key = _norm(name)
        if key in table:
            return table[key]
        for entry in table.values():
            if key in (_norm(a) for a in entry.aliases):
                return entry
        raise InputError(kind, self.unknown_message(kind, name, [kind]))

    def unknown_message(self, what: str, name: str, kinds: list[str]) -> str:
        """The message for a name found in none of ``kinds``: close names (and aliases) suggested, all listed."""
        entries = [e for kind in kinds for e in self.all(kind)]
        aliases = [(a, e.name) for e in entries for a in e.aliases]
        return unknown_name_message(what, name, (e.name for e in entries), aliases)

    def _check_kind(self, kind: str) -> None:
        if kind not in self.entries:
            raise InputError("kind", f"unknown catalog kind {kind!r}; allowed: {', '.join(self.entries)}")

    def gpu(self, name: str) -> GPU:
        return _typed(self.get("gpu", name), GPU)

    def instance(self, name: str) -> Instance:
        return _typed(self.get("instance", name), Instance)

    def ultraserver(self, name: str) -> UltraServer:
        return _typed(self.get("ultraserver", name), UltraServer)

    def fabric(self, name: str) -> Fabric:
        return _typed(self.get("fabric", name), Fabric)

    def storage(self, name: str) -> StorageTier:
        return _typed(self.get("storage", name), StorageTier)

    def model(self, name_or_path: str) -> ModelArch:
        """A zoo model by name, or a model YAML file by path."""
        path = Path(name_or_path)
        if path.suffix in (".yaml", ".yml") or path.is_file():
            if not path.is_file():
                raise InputError("model", f"model file {name_or_path!r} does not exist")
            entries = read_file(path, kind="model", single=True)  # a file given as a model needs no `kind:`
            return _typed(entries[0], ModelArch)
        return _typed(self.get("model", name_or_path), ModelArch)


def _typed(entry: Entry, cls: type[E]) -> E:
    assert isinstance(entry, cls)
    return entry


def builtin_dir() -> Path:
    return Path(str(resources.files("fmstack.catalog") / "data"))


def load_catalog(user_dir: Path | str | None = None) -> Catalog:
    """The built-in catalog, then every YAML file of ``user_dir`` on top (same kind and name replaces)."""
    cat = Catalog()
    for path in _yaml_files(builtin_dir()):
        cat.extend(read_file(path))
    if user_dir is not None:
        directory = Path(user_dir)
        if not directory.is_dir():
            raise InputError("catalog", f"{directory} is not a directory")
        for path in _yaml_files(directory):
            cat.extend(read_file(path))
    _check_references(cat)
    return cat


HBM_TOLERANCE = 0.10
"""How far a published instance (or UltraServer) HBM total may differ from its GPU count x the GPU's ``hbm_gb``.
Published totals are rounded, and some boards expose less than the GPU's marketed size: p6-b300.48xlarge lists
2,100 GB for 8 x B300 of 288 GB (2,304 GB, -8.9 %), p6e-gb200.36xlarge 740 GB for 4 x 186 GB (-0.5 %). A total
off by more (a per-GPU value typed as the total, a missing digit) is a mistake."""


def _check_references(cat: Catalog) -> None:
    """Names that must resolve, and numbers that must agree with the entries they name (one line each)."""
    for entry in cat.all("instance"):
        assert isinstance(entry, Instance)
        gpu = _typed(_ref(cat, "gpu", entry.gpu, f"instance '{entry.name}' field 'gpu'"), GPU)
        _ref(cat, "fabric", entry.network, f"instance '{entry.name}' field 'network'")
        where = f"instance '{entry.name}' field 'gpu_memory_gb'"
        _check_hbm(where, entry.gpu_memory_gb, "GB", 1.0, entry.num_gpus, gpu)
    for entry in cat.all("ultraserver"):
        assert isinstance(entry, UltraServer)
        base = _typed(_ref(cat, "instance", entry.instance, f"ultraserver '{entry.name}' field 'instance'"), Instance)
        _ref(cat, "fabric", entry.network, f"ultraserver '{entry.name}' field 'network'")
        expected = entry.num_instances * base.num_gpus
        if entry.num_gpus != expected:
            raise InputError(
                f"ultraserver '{entry.name}' field 'num_gpus'",
                f"{entry.num_gpus} != num_instances({entry.num_instances}) x {base.num_gpus} GPUs per {base.name} = "
                f"{expected}",
            )
        gpu = cat.gpu(base.gpu)
        where = f"ultraserver '{entry.name}' field 'hbm_aggregate_tb'"
        _check_hbm(where, entry.hbm_aggregate_tb, "TB", 1000.0, entry.num_gpus, gpu)


def _check_hbm(where: str, total: float, unit: str, gb_per_unit: float, num_gpus: int, gpu: GPU) -> None:
    """``total`` (in ``unit``) must be ``num_gpus x gpu.hbm_gb`` within :data:`HBM_TOLERANCE`."""
    expected = num_gpus * gpu.hbm_gb / gb_per_unit
    if abs(total - expected) > HBM_TOLERANCE * expected:
        lo, hi = expected * (1 - HBM_TOLERANCE), expected * (1 + HBM_TOLERANCE)
        raise InputError(
            where,
            f"{total:g} {unit} does not match num_gpus({num_gpus}) x {gpu.name} hbm_gb({gpu.hbm_gb:g} GB) = "
            f"{expected:g} {unit}; allowed: {lo:.4g} to {hi:.4g} {unit}",
        )


def _ref(cat: Catalog, kind: str, name: str, where: str) -> Entry:
    try:
        return cat.get(kind, name)
    except InputError as exc:
        raise InputError(where, exc.message) from None
