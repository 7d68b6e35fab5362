"""Checkpoints that hold data only: tensors, numbers, strings, lists and dicts.

``OUT/checkpoint/rankR-iterT.pt`` holds process R's whole state at iteration T (the method's
state as its class name and fields, the bit ledger, the clocks, the last logged row) and is
read with
``torch.load(weights_only=True)``: no Python object is rebuilt from the file, so a crafted
checkpoint cannot run code; the state's class is looked up among the method state classes
(subclasses of :class:`algorithms.base.State`) by name. ``OUT/checkpoint/meta.json``, written by
rank 0 once every rank has written, names the iteration, the run id and the length and SHA-256
of ``history.csv`` at that iteration, so that ``--resume`` continues only the run that wrote the
folder and only from the history that run logged. ``meta.json`` is the commit: the files of a
new checkpoint are written (each atomically, :mod:`runner.files`) before it, and the
older ones removed only after it, so a crash or a full disk at any moment leaves the previous
checkpoint whole. On resume every field of the state is checked against the state the method
builds on this problem (:func:`check_state`: kind, shape and dtype).

Every unreadable or foreign file ends as :class:`BadInput` (exit 2) naming the file.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import pickle
import re
import warnings
from pathlib import Path
from typing import Any

import torch

from algorithms.base import State
from runner.common import BadInput
from runner.files import WriteFailed, write_atomic, write_text_atomic

FORMAT, VERSION = "compzoo-checkpoint", 3
# Version 2 named a process's file rankR.pt; version 3 names it by its iteration too, so that a
# new checkpoint is complete (every file written, then meta.json) before the old one goes.
READABLE_VERSIONS = (2, 3)
_OLD = "was written by an older runner in a format that stores Python objects, which cannot be "
_OLD += "loaded safely; rerun the run (with --checkpoint-every to resume later)"


def checkpoint_file(out: Path, rank: int, t: int, version: int = VERSION) -> Path:
    """Process ``rank``'s file of the checkpoint at iteration ``t``."""
    name = f"rank{rank}.pt" if version == 2 else f"rank{rank}-iter{t}.pt"
    return out / "checkpoint" / name


def _drop_older(out: Path, rank: int, keep: Path) -> None:
    """Remove this process's files of earlier checkpoints, once a newer one is complete."""
    for old in (out / "checkpoint").glob(f"rank{rank}[.-]*pt"):
        if old != keep:
            old.unlink(missing_ok=True)


def history_digest(path: Path, nbytes: int | None = None) -> dict[str, Any]:
    """Length and SHA-256 of ``path``'s first ``nbytes`` bytes (all of it by default)."""
    with open(path, "rb") as fh:
        data = fh.read() if nbytes is None else fh.read(nbytes)
    return {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def _state_classes() -> dict[str, type]:
    found, todo = {}, [State]
    while todo:
        cls = todo.pop()
        found[f"{cls.__module__}.{cls.__qualname__}"] = cls
        todo.extend(cls.__subclasses__())
    return found


def state_record(state: State) -> dict[str, Any]:
    cls = type(state)
    fields = {f.name: getattr(state, f.name) for f in dataclasses.fields(state)}
    return {"class": f"{cls.__module__}.{cls.__qualname__}", "fields": fields}


def save_checkpoint(
    out: Path, comm, state, t: int, wall: float, watch, last, is_writer: bool, run_id: str
) -> None:
    """Write this process's whole state at iteration ``t`` (atomically: a crash or a full disk
    mid-write leaves the previous checkpoint intact, and raises
    :class:`runner.files.WriteFailed`). Rank 0 writes ``meta.json`` once every rank
    has written."""
    path = checkpoint_file(out, comm.rank, t)
    path.parent.mkdir(parents=True, exist_ok=True)
    led = comm.ledger
    blob = {
        "format": FORMAT,
        "version": VERSION,
        "run_id": run_id,
        "t": t,
        "state": state_record(state),
        "ledger": {
            "up": led.up,
            "down": led.down,
            "rounds": led.rounds,
            "full_vectors_up": led.full_vectors_up,
            "extra": dict(led.extra),
        },
        "wall": wall,
        "times": dict(watch.totals),
        "last": dict(last),
        "n": comm.n,
        "nodes": comm.nodes,
    }
    write_atomic(path, lambda fh: torch.save(blob, fh))
    comm.barrier()
    if is_writer:
        meta = {
            "format": FORMAT,
            "version": VERSION,
            "run_id": run_id,
            "iter": t,
            "n": comm.n,
            "files": comm.world,
            "history": history_digest(out / "history.csv"),
        }
        try:
            write_text_atomic(path.parent / "meta.json", json.dumps(meta) + "\n")
        except WriteFailed:
            path.unlink(missing_ok=True)  # not committed: give its room back
            raise
    comm.barrier()  # meta.json names the new files: the older ones may go
    _drop_older(out, comm.rank, path)


def read_meta(out: Path) -> dict[str, Any]:
    """``OUT/checkpoint/meta.json``, checked field by field."""
    path = out / "checkpoint" / "meta.json"
    if not path.is_file():
        raise BadInput(f"--resume {str(out)!r}: no checkpoint there (run with --checkpoint-every)")
    try:
        meta = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise BadInput(f"--resume: {str(path)!r} is unreadable ({e}); rerun the run") from None
    if not isinstance(meta, dict):
        raise BadInput(f"--resume: {str(path)!r} is not a checkpoint's meta.json; rerun the run")
    if "format" not in meta and "iter" in meta:
        raise BadInput(f"--resume: the checkpoint {str(path)!r} {_OLD}")
    want = {"format": str, "version": int, "run_id": str, "iter": int, "n": int, "files": int,
            "history": dict}  # fmt: skip
    bad = [k for k, kind in want.items() if not isinstance(meta.get(k), kind)]
    hist = meta.get("history") or {}
    if not bad and not (isinstance(hist.get("bytes"), int) and isinstance(hist.get("sha256"), str)):
        bad = ["history"]
    if not bad and meta["format"] == FORMAT and meta["version"] not in READABLE_VERSIONS:
        raise BadInput(
            f"--resume: the checkpoint {str(path)!r} is of {FORMAT} version {meta['version']}, "
            f"written by another version of compzoo; this one reads versions "
            f"{', '.join(map(str, READABLE_VERSIONS))}: resume it with the compzoo that wrote it, "
            "or rerun the run"
        )
    if bad or meta["format"] != FORMAT or meta["iter"] < 0:
        raise BadInput(
            f"--resume: {str(path)!r} is not a {FORMAT} version {VERSION} meta.json "
            f"(bad or missing: {', '.join(bad) or 'format/version/iter'}); rerun the run"
        )
    return meta


def _load(path: Path, device: torch.device) -> Any:
    if not path.is_file():
        raise BadInput(f"--resume: {str(path)!r} is missing; the checkpoint is incomplete")
    try:
        with warnings.catch_warnings():  # a foreign pickle protocol is refused below anyway
            warnings.simplefilter("ignore")
            return torch.load(path, weights_only=True, map_location=device)
    except pickle.UnpicklingError as e:
        text = str(e)
        if "GLOBAL algorithms." in text or "GLOBAL compressors." in text:
            raise BadInput(f"--resume: {str(path)!r} {_OLD}") from None
        found = re.search(r"GLOBAL ([\w.]+)", text)
        if found is None:
            first = text.strip().splitlines()[0][:120] if text.strip() else "empty"
            raise BadInput(
                f"--resume: {str(path)!r} is unreadable (not a checkpoint: {first}); rerun the run"
            ) from None
        what = f"it asks for the Python object {found.group(1)}"
        raise BadInput(
            f"--resume: refused to load {str(path)!r}: {what}; a checkpoint holds tensors, "
            "numbers and strings only, so this file was not written by the runner"
        ) from None
    except Exception as e:  # a truncated zip, random bytes, an empty file: all unreadable
        raise BadInput(
            f"--resume: {str(path)!r} is unreadable ({type(e).__name__}: "
            f"{str(e).splitlines()[0][:120] if str(e) else 'empty'}); rerun the run"
        ) from None


def _state_class(name: Any) -> type | None:
    """The state class a checkpoint names: by module and name, or (a checkpoint written before
    the methods were grouped by family, ``algorithms.ef21.EF21State``) by its unique name."""
    classes = _state_classes()
    if name in classes:
        return classes[name]
    if not isinstance(name, str):
        return None
    short = name.rsplit(".", 1)[-1]
    same = [cls for key, cls in classes.items() if key.rsplit(".", 1)[-1] == short]
    return same[0] if len(same) == 1 else None


def _state_from(record: Any, path: Path, x0: torch.Tensor) -> State:
    cls = _state_class(record.get("class")) if isinstance(record, dict) else None
    if cls is None:
        name = record.get("class") if isinstance(record, dict) else type(record).__name__
        raise BadInput(f"--resume: {str(path)!r} holds no known method state (got {name!r})")
    fields = record.get("fields")
    names = {f.name for f in dataclasses.fields(cls)}
    if not isinstance(fields, dict) or set(fields) != names:
        raise BadInput(f"--resume: {str(path)!r}: the fields of {cls.__name__} do not match")
    x = fields["x"]
    if not _same_kind(x, x0):
        raise BadInput(
            f"--resume: {str(path)!r}: the iterate x is {_describe(x)}; the problem needs "
            f"{_describe(x0)}"
        )
    return cls(**fields)


def _describe(v: Any) -> str:
    if isinstance(v, torch.Tensor):
        return f"a tensor of shape {tuple(v.shape)} and dtype {str(v.dtype).removeprefix('torch.')}"
    return "None" if v is None else f"a {type(v).__name__}"


def _same_kind(got: Any, want: Any) -> bool:
    if isinstance(want, torch.Tensor):
        return isinstance(got, torch.Tensor) and got.shape == want.shape and got.dtype == want.dtype
    if want is None or got is None:
        return want is None and got is None
    if isinstance(want, bool) or isinstance(got, bool):
        return isinstance(want, bool) and isinstance(got, bool)
    if isinstance(want, (int, float)):
        return isinstance(got, (int, float)) and not isinstance(got, torch.Tensor)
    return type(got) is type(want)


def check_state(state: State, reference: State, path: Path | str) -> None:
    """Every field of a checkpointed ``state`` must be of the kind the method builds: a tensor
    of the same shape and dtype as ``reference``'s (the method's ``init`` on this problem), a
    number where it has a number, None where it has None. A mismatch is :class:`BadInput`
    naming the field, what the method builds and what the file holds."""
    if type(state) is not type(reference):
        raise BadInput(
            f"--resume: {str(path)!r} holds a {type(state).__name__}, but this run's method "
            f"builds a {type(reference).__name__}; the checkpoint is not this run's"
        )
    for f in dataclasses.fields(reference):
        got, want = getattr(state, f.name), getattr(reference, f.name)
        if not _same_kind(got, want):
            raise BadInput(
                f"--resume: {str(path)!r}: field {f.name!r} of {type(state).__name__} is "
                f"{_describe(got)}; the method builds {_describe(want)}; the checkpoint does not "
                "fit this run (altered, or written by another version): rerun the run"
            )


def _check_extras(blob: dict, path: Path) -> None:
    """The clocks and the last logged row: plain numbers (they are printed and summed)."""
    number = (int, float)
    last, times = blob.get("last"), blob.get("times")
    bad = None
    if not isinstance(blob.get("wall"), number) or isinstance(blob.get("wall"), bool):
        bad = "wall"
    elif not isinstance(times, dict) or not all(
        isinstance(v, number) and not isinstance(v, bool) for v in times.values()
    ):
        bad = "times"
    elif not isinstance(last, dict) or not all(
        v is None or isinstance(v, (int, float, str)) for v in last.values()
    ):
        bad = "last"
    elif not all(isinstance(last.get(k), number) for k in ("iter", "f", "grad_norm_sq")):
        bad = "last"
    if bad is not None:
        raise BadInput(
            f"--resume: {str(path)!r}: its {bad!r} entry is not what the runner writes (plain "
            "numbers); the checkpoint is altered or not this runner's: rerun the run"
        )


def load_checkpoint(out: Path, comm, x0: torch.Tensor, run_id: str) -> dict[str, Any]:
    """This process's checkpoint of run ``run_id`` in ``out``, restored into ``comm``'s ledger.
    Returns the blob, its ``state`` rebuilt and ``meta`` (rank 0's ``meta.json``) added."""
    meta = read_meta(out)
    meta_path = out / "checkpoint" / "meta.json"
    if meta["run_id"] != run_id:
        raise BadInput(
            f"--resume: {str(meta_path)!r} belongs to run {meta['run_id']}, config.json to run "
            f"{run_id}: the folder holds pieces of two runs; rerun instead"
        )
    if meta["n"] != comm.n:
        raise BadInput(f"--resume: the run had n = {meta['n']} nodes, this one has {comm.n}")
    if meta["files"] != comm.world:
        blob, path = _reshard(out, comm, meta, x0.device, run_id)
    else:
        path = checkpoint_file(out, comm.rank, meta["iter"], meta["version"])
        blob = _load(path, x0.device)
        _drop_older(out, comm.rank, path)  # files of a checkpoint meta.json never named
    _check_blob(blob, path, run_id)
    nodes, led = blob.get("nodes"), blob.get("ledger")
    if (
        blob.get("t") != meta["iter"]
        or not isinstance(nodes, torch.Tensor)
        or not torch.equal(nodes.cpu(), comm.nodes.cpu())
        or not isinstance(led, dict)
        or not all(
            isinstance(led.get(k), torch.Tensor) and led[k].shape == (comm.m,)
            for k in ("up", "down")
        )  # fmt: skip
        or not all(isinstance(led.get(k), int) for k in ("rounds", "full_vectors_up"))
        or not isinstance(led.get("extra"), dict)
    ):
        raise BadInput(f"--resume: checkpoint files in {str(out)!r} disagree; rerun instead")
    _check_extras(blob, path)
    blob["state"] = _state_from(blob.get("state"), path, x0)
    blob["path"] = path
    blob["meta"] = meta
    ledger = comm.ledger
    ledger.up.copy_(led["up"])
    ledger.down.copy_(led["down"])
    ledger.rounds = int(led["rounds"])
    ledger.full_vectors_up = int(led["full_vectors_up"])
    ledger.extra.clear()
    ledger.extra.update(led["extra"])
    return blob


def _check_blob(blob: Any, path: Path, run_id: str) -> None:
    if not isinstance(blob, dict) or blob.get("format") != FORMAT:
        raise BadInput(f"--resume: {str(path)!r} is not a {FORMAT} file; rerun the run")
    if blob.get("run_id") != run_id:
        raise BadInput(
            f"--resume: {str(path)!r} belongs to run {blob.get('run_id')}, config.json to run "
            f"{run_id}; rerun instead"
        )


def per_node(name: str) -> bool:
    """Whether a state field holds one row per node: the methods name those ``*_i`` (``g_i``,
    ``h_i``, ...), and every other field is the same on every process."""
    return name.endswith("_i")


def _reshard(out: Path, comm, meta: dict, device, run_id: str) -> tuple[dict, Path]:
    """This process's checkpoint when the run was checkpointed by another number of processes:
    every file is read, the per-node rows (state fields ``*_i``, the bit ledger) are put in node
    order and this process's block is cut from them; the other fields come from rank 0."""
    files = [checkpoint_file(out, r, meta["iter"], meta["version"]) for r in range(meta["files"])]
    blobs = []
    for path in files:
        blob = _load(path, device)
        _check_blob(blob, path, run_id)
        nodes = blob.get("nodes")
        if blob.get("t") != meta["iter"] or not isinstance(nodes, torch.Tensor):
            raise BadInput(f"--resume: checkpoint files in {str(out)!r} disagree; rerun instead")
        blobs.append(blob)
    order = torch.cat([b["nodes"].cpu() for b in blobs])
    if not torch.equal(torch.sort(order).values, torch.arange(comm.n)):
        raise BadInput(f"--resume: the checkpoint files in {str(out)!r} miss or repeat nodes")
    mine = torch.argsort(order)[comm.nodes.cpu()]  # rows of the concatenation, in my order

    def rows(parts: list) -> torch.Tensor:
        return torch.cat(parts)[mine.to(parts[0].device)]

    first = blobs[0]
    fields = dict(first["state"]["fields"])
    for name in fields:
        if per_node(name):
            parts = [b["state"]["fields"][name] for b in blobs]
            if not all(isinstance(p, torch.Tensor) and p.shape[:1] == b["nodes"].shape
                       for p, b in zip(parts, blobs, strict=True)):  # fmt: skip
                raise BadInput(
                    f"--resume: field {name!r} of the checkpoint in {str(out)!r} is not one row "
                    "per node; resume with the number of processes that wrote it"
                )
            fields[name] = rows(parts)
        elif isinstance(fields[name], torch.Tensor) and not all(
            torch.equal(b["state"]["fields"][name], fields[name]) for b in blobs
        ):  # a field that differs between processes is per node whatever its name
            raise BadInput(
                f"--resume: field {name!r} differs between the checkpoint files in "
                f"{str(out)!r}; resume with the number of processes that wrote them"
            )
    led = dict(first["ledger"])
    led["up"] = rows([b["ledger"]["up"] for b in blobs])
    led["down"] = rows([b["ledger"]["down"] for b in blobs])
    led["extra"] = {}  # bytes handed to collectives were counted per process of the old run
    blob = {**first, "state": {**first["state"], "fields": fields}, "ledger": led,
            "nodes": comm.nodes.clone()}  # fmt: skip
    return blob, files[0]


def check_history(out: Path, meta: dict[str, Any]) -> None:
    """``history.csv`` must begin with the rows the checkpointed run had logged."""
    path = out / "history.csv"
    if not path.is_file():
        raise BadInput(f"--resume: {str(path)!r} is missing; the run's history is gone, rerun it")
    want = meta["history"]
    if history_digest(path, want["bytes"]) != want:
        raise BadInput(
            f"--resume: {str(path)!r} is not the history the checkpoint was taken with (its "
            f"first {want['bytes']} bytes differ): another run wrote it; rerun instead"
        )


def truncate_history(out: Path, meta: dict[str, Any]) -> None:
    """Keep the rows logged up to the checkpoint: the resumed run logs the ones after it."""
    with open(out / "history.csv", "r+b") as fh:
        fh.truncate(meta["history"]["bytes"])
