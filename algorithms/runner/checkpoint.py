"""Checkpoints that hold data only: tensors, numbers, strings, lists and dicts.

``OUT/checkpoint/rankR.pt`` holds one process's whole state (the method's state as its class
name and fields, the bit ledger, the clocks, the last logged row) and is read with
``torch.load(weights_only=True)``: no Python object is rebuilt from the file, so a crafted
checkpoint cannot run code; the state's class is looked up among the method state classes
(subclasses of :class:`algorithms.base.State`) by name. ``OUT/checkpoint/meta.json``, written by
rank 0 once every rank has written, names the iteration, the run id and the length and SHA-256
of ``history.csv`` at that iteration, so that ``--resume`` continues only the run that wrote the
folder and only from the history that run logged.

Every unreadable or foreign file ends as :class:`BadInput` (exit 2) naming the file.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pickle
import re
import warnings
from pathlib import Path
from typing import Any

import torch

from algorithms.base import State
from algorithms.runner.common import BadInput

FORMAT, VERSION = "compzoo-checkpoint", 2
_OLD = "was written by an older runner in a format that stores Python objects, which cannot be "
_OLD += "loaded safely; rerun the run (with --checkpoint-every to resume later)"


def checkpoint_file(out: Path, comm) -> Path:
    return out / "checkpoint" / f"rank{comm.rank}.pt"


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
    """Write this process's whole state at iteration ``t`` (atomically: a crash mid-write leaves
    the previous checkpoint intact). Rank 0 writes ``meta.json`` once every rank has written."""
    path = checkpoint_file(out, comm)
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
    tmp = path.with_suffix(".tmp")
    torch.save(blob, tmp)
    os.replace(tmp, path)
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
        tmp = path.parent / "meta.json.tmp"
        tmp.write_text(json.dumps(meta) + "\n")
        os.replace(tmp, path.parent / "meta.json")


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
    if bad or meta["format"] != FORMAT or meta["version"] != VERSION or meta["iter"] < 0:
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


def _state_from(record: Any, path: Path, x0: torch.Tensor) -> State:
    classes = _state_classes()
    if not isinstance(record, dict) or record.get("class") not in classes:
        name = record.get("class") if isinstance(record, dict) else type(record).__name__
        raise BadInput(f"--resume: {str(path)!r} holds no known method state (got {name!r})")
    cls, fields = classes[record["class"]], record.get("fields")
    names = {f.name for f in dataclasses.fields(cls)}
    if not isinstance(fields, dict) or set(fields) != names:
        raise BadInput(f"--resume: {str(path)!r}: the fields of {cls.__name__} do not match")
    x = fields["x"]
    if not isinstance(x, torch.Tensor) or x.shape != x0.shape or x.dtype != x0.dtype:
        got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise BadInput(
            f"--resume: {str(path)!r}: the iterate has shape {got}, the problem needs "
            f"{tuple(x0.shape)} {x0.dtype}"
        )
    return cls(**fields)


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
        path = checkpoint_file(out, comm)
        blob = _load(path, x0.device)
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
    ):
        raise BadInput(f"--resume: checkpoint files in {str(out)!r} disagree; rerun instead")
    blob["state"] = _state_from(blob.get("state"), path, x0)
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
    files = [out / "checkpoint" / f"rank{r}.pt" for r in range(meta["files"])]
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
