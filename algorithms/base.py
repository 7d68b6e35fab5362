"""The method interface: hyperparameters in a frozen object, ``init``/``step`` over a state of
rows.

A method is maths: ``step(state, problem, comm) -> (state, info)`` never mutates its input and
never counts bits (the comm layer does, from the payloads). Per-node quantities are ``(m, d)``
tensors (``m`` nodes held here), server quantities ``(d,)``.

Each method also knows its theory: :meth:`Algorithm.configure` computes its step size and other
parameters from the problem's constants and the compressor's ``omega``/``delta``, and returns the
formula it used, so that ``config.json`` records where every number came from.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from algorithms.provenance import Provenance
from comm import Comm
from compressors import Compressor

__all__ = ["Algorithm", "Option", "State", "StepInfo", "Theory", "check_compressor", "option"]


@dataclass(frozen=True)
class State:
    """The iterate ``x`` (``(d,)``) and the step counter; methods extend it with their rows:
    a method's state is a frozen dataclass subclass declaring its own fields (``g_i``, one row
    per node; ``g``, the server's), as ``algorithms/ef/ef21.py``'s ``EF21State``."""

    x: torch.Tensor
    t: int


_state_init = State.__init__


def _plain_state_init(self, *args, **kwargs):
    extra = sorted(set(kwargs) - {"x", "t"})
    if type(self) is State and extra:
        raise TypeError(
            f"State has no field {extra[0]!r}: State holds x and t only; declare your method's "
            f"state as a subclass, e.g. @dataclass(frozen=True) class MyState(State): "
            f"{extra[0]}: torch.Tensor (see docs/contributing.md)"
        )
    _state_init(self, *args, **kwargs)


State.__init__ = _plain_state_init


def step_mode(problem) -> torch.inference_mode:
    """How the runner runs a method on ``problem``: in torch's inference mode where the
    problem's functions make no use of autograd (its ``autograd_free``), else with autograd as
    it stands. The numbers are the same; inference mode spares each tensor operation autograd's
    bookkeeping, about 0.2 us of a 1.3 us small add, and 15-50 us of a step of EF21, DIANA,
    MARINA or DASHA on the papers' LIBSVM sets (0.22-1.0 ms). Tensors made inside are
    inference tensors: read-only outside it (a clone is a normal tensor)."""
    return torch.inference_mode(bool(getattr(problem, "autograd_free", False)))


def uncharged_init(state: State, x0: torch.Tensor, bits_up: float) -> list[str]:
    """The server fields of a method's first state that hold something no message brought: a
    non-zero tensor other than a copy of ``x^0`` (which every party has) when the comm layer
    charged no uplink bits at ``init``. A method whose ``init`` computes such a field from the
    nodes' data directly (``problem.grad``) instead of through the comm layer pays no bits for
    it: the runner warns, the methods' contract test fails."""
    if bits_up > 0:
        return []
    found = []
    for f in dataclasses.fields(state):
        v = getattr(state, f.name)
        if f.name in ("x", "t") or f.name.endswith("_i") or not isinstance(v, torch.Tensor):
            continue
        if not v.is_floating_point() or (v.shape == x0.shape and torch.equal(v, x0)):
            continue
        if bool((v != 0).any()):
            found.append(f.name)
    return found


@dataclass(frozen=True)
class StepInfo:
    """What one step reports: this step's bits per node (mean over nodes, from the ledger) and
    method-specific quantities (e.g. EF21's ``G^t``)."""

    bits_up: float
    bits_down: float
    extras: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Option:
    """A method hyperparameter settable from the command line (``--FLAG VALUE``), as the
    command line, the Python API, ``--list``, sweeps and the docs see it. Built from the
    method's dataclass field (:func:`option`), never written out by hand.

    Attributes:
        type: the value's type (the field's annotation without ``| None``).
        default: the field's default (None for a default built by a factory: the method's own).
        help: one line for ``--help``.
        choices: the allowed values (from ``choices=`` or a ``Literal[...]`` annotation).
        flag: the command-line name when it differs from the field's (``init`` for
            ``init_mode``).
        from_run: a run option whose value is the default (``"iters"``: the run's horizon).
        check: the range check (:func:`check_unit`, :func:`check_count`, ...), called by
            ``__post_init__`` with the flag's name; ``required``: None is refused too.
    """

    type: type
    default: Any
    help: str
    choices: tuple | None = None
    flag: str | None = None  # the command-line name when it differs from the field's
    from_run: str | None = None
    check: Any = None  # check(name, value, optional) -> None, raising ValueError
    required: bool = False  # None is not allowed (for check)


_OPTION = "compzoo.option"


def option(
    default: Any = dataclasses.MISSING,
    help: str = "",  # noqa: A002 - the word argparse uses
    *,
    choices: tuple | list | None = None,
    flag: str | None = None,
    from_run: str | None = None,
    check: Any = None,
    required: bool = False,
    default_factory: Any = dataclasses.MISSING,
) -> Any:
    """A method's hyperparameter, declared once: its dataclass field carries the default, the
    help, the allowed values and the command-line name; the method's ``options`` (and from them
    the command line, ``--help``, ``--list``, sweeps and the docs) are read from it, and a value
    outside ``choices`` is refused when the method is built. ``from_run`` names a run option
    whose value is the default when none is given (DCGD's horizon is the run's ``--iters``).
    ``check`` is the value's range check (``check_unit``: in ``(0, 1]``; ``check_count``: a
    positive integer), run when the method is built, None allowed unless ``required``.

    ::

        init_mode: str = option("full", "g_i^0: full | compressed | zero", choices=INITS,
                                flag="init")
    """
    meta = {_OPTION: {"help": help, "choices": None if choices is None else tuple(choices),
                      "flag": flag, "from_run": from_run, "check": check,
                      "required": required}}  # fmt: skip
    if default_factory is not dataclasses.MISSING:
        return field(default_factory=default_factory, metadata=meta)
    return field(default=default, metadata=meta)


def _option_type(hint: Any) -> tuple[type, tuple | None]:
    """The value type of an annotation (``float | None`` -> float) and its ``Literal`` values."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) is typing.Literal:
        values = typing.get_args(hint)
        return type(values[0]), tuple(values)
    if args and typing.get_origin(hint) in (typing.Union, types.UnionType):
        return _option_type(args[0]) if len(args) == 1 else (object, None)
    return (hint if isinstance(hint, type) else object), None


def collect_options(cls: type) -> dict[str, Option]:
    """The :class:`Option` of every field of ``cls`` declared with :func:`option`, in field
    order (base classes' fields first)."""
    try:
        hints = typing.get_type_hints(cls)  # each annotation in its own module's names
    except NameError:  # a name only imported under TYPE_CHECKING: the option's type is unknown
        hints = {}
    out: dict[str, Option] = {}
    for f in dataclasses.fields(cls):
        meta = f.metadata.get(_OPTION)
        if meta is None:
            continue
        kind, literal = _option_type(hints.get(f.name, object))
        default = None if f.default is dataclasses.MISSING else f.default
        out[f.name] = Option(kind, default, meta["help"], meta["choices"] or literal,
                             meta["flag"], meta["from_run"], meta["check"],
                             meta["required"])  # fmt: skip
    return out


class _Options:
    """``Algorithm.options``: read from the class's fields once per class (a subclass that
    assigns a dict of its own keeps it)."""

    def __get__(self, obj: Any, cls: type) -> dict[str, Option]:
        cached = cls.__dict__.get("_options")
        if cached is None:
            cached = collect_options(cls)
            setattr(cls, "_options", cached)  # noqa: B010 - a class attribute, per class
        return cached


@dataclass(frozen=True)
class Theory:
    """A step size (and parameters) computed from theory, with the formula and its inputs."""

    gamma: float
    formula: str
    inputs: dict[str, Any]
    params: dict[str, Any] = field(default_factory=dict)
    source: str = ""
    provenance: Provenance | None = None  # this regime's, where it differs from the class's

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        if self.provenance is not None:
            d["provenance"] = self.provenance.to_dict()
        return d


def check_choice(name: str, value: object, choices: tuple) -> None:
    """``ValueError`` naming an option whose value is not one of ``choices``."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(str, choices))}, got {value!r}")


def check_unit(name: str, value: float | None, optional: bool = True) -> None:
    """``ValueError`` unless ``value`` is in ``(0, 1]`` (or None, where ``optional``)."""
    if value is None and optional:
        return
    if value is None or isinstance(value, bool) or not 0 < value <= 1:
        raise ValueError(f"{name} must be in (0, 1], got {value!r}")


def check_fraction(name: str, value: float | None, optional: bool = True) -> None:
    """``ValueError`` unless ``value`` is in ``[0, 1]`` (or None, where ``optional``): a
    memory step, where 0 (no memory) is the checks' baseline."""
    if value is None and optional:
        return
    if value is None or isinstance(value, bool) or not 0 <= value <= 1:
        raise ValueError(f"{name} must be in [0, 1], got {value!r}")


def _finite_number(value: object) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)


def check_positive(name: str, value: float | None, optional: bool = True) -> None:
    """``ValueError`` unless ``value`` is a finite number ``> 0`` (or None, where
    ``optional``): an initial scale, Adam's ``eps``."""
    if value is None and optional:
        return
    if not _finite_number(value) or not value > 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")


def check_nonnegative(name: str, value: float | None, optional: bool = True) -> None:
    """``ValueError`` unless ``value`` is a finite number ``>= 0`` (or None, where
    ``optional``): a budget or bound where 0 means off."""
    if value is None and optional:
        return
    if not _finite_number(value) or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")


def check_decay(name: str, value: float | None, optional: bool = True) -> None:
    """``ValueError`` unless ``value`` is in ``[0, 1)`` (or None, where ``optional``): a moment's
    decay (Adam's ``beta1``, ``beta2``)."""
    if value is None and optional:
        return
    if not _finite_number(value) or not 0 <= value < 1:
        raise ValueError(f"{name} must be in [0, 1), got {value!r}")


def check_count(name: str, value: int | None, optional: bool = True) -> None:
    """``ValueError`` unless ``value`` is a positive integer (or None, where ``optional``)."""
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def check_compressor(name: str, needs: str, c: Compressor, d: int, force: bool) -> None:
    """Refuse a compressor outside the class the method's theory needs (unless ``force``)."""
    if force or needs == "any":
        return
    if needs == "none":
        if c.spec() != "identity":
            raise ValueError(
                f"{name} takes no compressor (it sends its rows uncompressed or compresses "
                f"with a mechanism of its own), got "
                f"{c.spec()}; allowed: identity (see its options in --list)"
            )
        return
    if needs == "unbiased" and not c.unbiased:
        raise ValueError(
            f"{name} needs an unbiased compressor (one declaring omega), got {c.spec()}; "
            "use e.g. randk, qsgd, natural, permk, or pass --force-compressor"
        )
    if needs == "absolute":
        if not c.absolute:
            raise ValueError(
                f"{name} needs an absolute compressor (one declaring Delta^2), got {c.spec()}; "
                "use e.g. threshold, round, or pass --force-compressor"
            )
        c.abs_delta_sq(d)
        return
    if needs == "contractive":
        if not c.contractive:
            raise ValueError(
                f"{name} needs a contractive compressor (one declaring delta), got {c.spec()}; "
                "use e.g. topk, scaled-sign, rank, scaled:randk, or pass --force-compressor"
            )
        c.delta(d)  # raises with the compressor's own reason (k > d, no constant at this d)
    elif needs == "unbiased":
        c.omega(d)


def bind_down_compressor(
    name: str,
    needs: str,
    problem,
    compressor: Compressor,
    opts: dict[str, Any],
    force: bool,
    same_as_up: bool = False,
) -> dict[str, Any]:
    """``opts`` with its ``down_compressor`` bound for the server's one row and checked against
    the class ``needs`` (unless ``force``), for bidirectional methods' ``configure``. Without
    one: the uplink's spec when ``same_as_up`` (methods whose papers compress both directions
    with one operator), else left absent (the method's default, e.g. the identity)."""
    down = opts.get("down_compressor")
    if down is None and same_as_up:
        from compressors import parse_spec

        down = parse_spec(compressor.spec())
    if down is None:
        return opts
    down = down.bind(1)
    check_compressor(f"{name} (downlink)", needs, down, problem.d, force)
    return {**opts, "down_compressor": down}


@dataclass(frozen=True)
class Algorithm:
    """Base of every method: hyperparameters only.

    Class declarations:
        needs: ``"unbiased"``, ``"contractive"``, ``"absolute"``, ``"any"`` or ``"none"`` (the
            method compresses by a mechanism of its own: only the identity is accepted): the
            compressor class the theory assumes (``contractive`` also accepts unbiased ones through
            ``delta = 1/(omega+1)`` only if the method's paper does; by default it needs
            ``delta`` declared).
        down_needs: for a method that compresses the downlink too (a ``down_compressor``
            option), the class its downlink compressor must have (``"unbiased"``,
            ``"contractive"``); :meth:`configure` binds it to the server's one row and checks it
            (:func:`bind_down_compressor`), ``down_like_up``: when none is given, the uplink's
            spec is used (the papers that compress both directions with one operator).
        requires: the problem capabilities the method needs beyond gradients
            (:mod:`problems.capabilities`: ``hessians``, ``server_data``,
            ``smoothness_matrices``), checked by :meth:`configure` before anything runs.
        stochastic: the method uses minibatches (``batch_size``).
        options: the hyperparameters beyond ``gamma`` and the compressor, read from the fields
            declared with :func:`option` (a value outside an option's choices is refused by
            ``__post_init__``, naming its flag).
        reports: names of the extras ``step`` returns (history.csv columns).
        provenance: where the default step comes from (:mod:`algorithms.provenance`: a
            theorem, the authors' code, a derivation written here, another method's step, a
            reconstruction, a practical default, or none); every registered method declares it.
        example_compressor: for a method that takes ``"any"`` compressor but is built for one
            (Dyna-COLD's binary quantizer), that compressor's spec: the one the registry-wide
            tests and benchmarks run it with (:func:`algorithms.registry.usual_compressor`).
        solves_vi: the method solves variational inequalities (``problem.grad`` an operator
            ``F_i``, no objective): only such methods run on a ``variational`` problem
            (:func:`problems.capabilities.check_kind`, exit 2 otherwise).
        batchable: runs of the method that differ only in their step can advance together in
            one process (:mod:`algorithms.batching`): its ``_step`` uses ``gamma`` only in
            tensor products, and its state's fields are the iterate, node rows (``*_i``) and
            server vectors; the contract test checks a batch against the same runs alone.
    """

    compressor: Compressor
    gamma: float

    needs: ClassVar[str] = "any"
    down_needs: ClassVar[str | None] = None
    down_like_up: ClassVar[bool] = False
    requires: ClassVar[tuple[str, ...]] = ()
    stochastic: ClassVar[bool] = False
    options = _Options()  # (not a field: no annotation)
    reports: ClassVar[tuple[str, ...]] = ()
    provenance: ClassVar[Provenance | None] = None
    example_compressor: ClassVar[str | None] = None
    solves_vi: ClassVar[bool] = False
    batchable: ClassVar[bool] = False

    def __post_init__(self) -> None:
        if not isinstance(self.compressor, Compressor):
            raise ValueError(f"compressor must be a Compressor, got {self.compressor!r}")
        if isinstance(self.gamma, torch.Tensor):  # a batch's per-run steps (algorithms.batching)
            if not bool((self.gamma.as_subclass(torch.Tensor) > 0).all()):
                raise ValueError(f"gamma must be > 0, got {self.gamma.tolist()}")
        elif not self.gamma > 0:
            raise ValueError(f"gamma must be > 0, got {self.gamma}")
        for name, opt in type(self).options.items():
            value = getattr(self, name)
            flag = (opt.flag or name).replace("_", "-")
            if opt.choices and value is not None and value not in opt.choices:
                raise ValueError(
                    f"--{flag} must be one of {', '.join(map(str, opt.choices))}, got {value!r}"
                )
            if opt.required and value is None:
                raise ValueError(f"--{flag} must be given: {opt.help}")
            if opt.check is not None:
                opt.check(f"--{flag}", value, optional=not opt.required)
            if opt.type is Compressor and value is not None and not isinstance(value, Compressor):
                raise ValueError(f"{name} must be a Compressor, got {value!r}")

    @classmethod
    def message_dim(cls, d: int) -> int:
        """Entries of the rows the method compresses, for a problem of dimension ``d``: ``d``
        (gradients), or, for second-order methods, the ``d(d+1)/2`` entries of a symmetric
        matrix; what ``config.json`` records the compressor's constant and bits at."""
        return d

    # ------------------------------------------------------------ theory
    @classmethod
    def theory(cls, problem, compressor: Compressor, opts: dict[str, Any]) -> Theory:
        """The theoretical step size and parameters for this problem and compressor."""
        raise NotImplementedError

    @classmethod
    def practical(cls, problem, compressor: Compressor, opts: dict[str, Any]) -> Theory | None:
        """A practical default step, for the few methods whose theorem's step is unusable in
        practice (declared with ``provenance`` of kind ``practical``); None for the others,
        whose default step is their theory step. ``--step theory`` always gives the theory's."""
        return None

    @classmethod
    def configure(
        cls,
        problem,
        compressor: Compressor,
        *,
        step: str | float = "theory",
        step_mult: float = 1.0,
        force: bool = False,
        **opts: Any,
    ) -> tuple[Algorithm, dict[str, Any]]:
        """Build the method for ``problem``: the step (times ``step_mult``) from theory
        (``"theory"``), the method's default (``"default"``: its practical step where it
        declares one, else the theory step) or the given float; the other parameters from
        theory unless given in ``opts``. The record names the step's origin (``step_origin``)
        and the declared provenance of the theory or practical step (``provenance``).

        Returns the method and a record for ``config.json``.
        """
        if cls.requires:
            from problems import capabilities

            capabilities.check(cls.__name__, problem, cls.requires)
        if cls.down_needs is not None:
            opts = bind_down_compressor(
                cls.__name__, cls.down_needs, problem, compressor, opts, force, cls.down_like_up
            )
        compressor = compressor.bind(problem.n)
        check_compressor(cls.__name__, cls.needs, compressor, problem.d, force)
        unknown = set(opts) - set(cls.options)
        if unknown:
            raise ValueError(
                f"{cls.__name__} takes no option {sorted(unknown)}; "
                f"its options: {sorted(cls.options) or 'none'}"
            )
        full = {k: o.default for k, o in cls.options.items()}
        full.update({k: v for k, v in opts.items() if v is not None})
        record: dict[str, Any] = {}
        try:
            th = cls.theory(problem, compressor, full)
        except (ValueError, TypeError, NotImplementedError) as e:
            th, why = None, _theory_error(cls, problem, e)
        if th is not None:
            for k, v in th.params.items():
                if opts.get(k) is None:
                    full[k] = v
            record.update(theory=th.to_dict(), gamma_theory=th.gamma)
        else:
            record.update(theory=None, theory_unavailable=why)
        declared = (th.provenance if th is not None else None) or cls.provenance
        if declared is not None:
            record.update(provenance=declared.to_dict())
        practical = cls.practical(problem, compressor, full) if step == "default" else None
        if practical is not None:
            # A practical default (the theorem's step is unusable); --step theory gives it.
            gamma = practical.gamma * step_mult
            record.update(practical=practical.to_dict(), step_origin="practical")
            if practical.provenance is not None:
                record.update(provenance=practical.provenance.to_dict())
        elif step in ("theory", "default"):
            record.update(step_origin="theory")
            if th is not None:
                gamma = th.gamma * step_mult
            elif getattr(problem, "default_step", None) is not None:
                # Deep nets have no smoothness constants: their documented default step.
                gamma = problem.default_step * step_mult
                record.update(step_source=f"problem default {problem.default_step} ({why})")
                record.update(step_origin="problem default")
            else:
                raise ValueError(why)
        else:
            record.update(step_origin="given")
            gamma = float(step) * step_mult
            if not gamma > 0:
                raise ValueError(f"step must be > 0, got {step} (times step-mult {step_mult})")
        record.update(gamma=gamma, step_mult=step_mult, params=dict(full))
        algo = cls(compressor=compressor, gamma=gamma, **full)
        return algo, record

    # ------------------------------------------------------------ the method
    def init(self, x0: torch.Tensor, problem, comm: Comm) -> State:
        raise NotImplementedError

    def step(self, state: State, problem, comm: Comm) -> tuple[State, StepInfo]:
        """One round; bits are read off the comm ledger, never counted here."""
        ledger = comm.ledger
        ledger.open_round()
        try:
            new, extras = self._step(state, problem, comm)
            comm.end_round()
        finally:
            up, down = ledger.close_round()
        m = comm.m
        return new, StepInfo(bits_up=up / m, bits_down=down / m, extras=extras)

    def _step(self, state: State, problem, comm: Comm) -> tuple[State, dict[str, float]]:
        raise NotImplementedError

    def params(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["compressor"] = self.compressor.spec()
        return out


def _theory_error(cls, problem, e: Exception) -> str:
    """Why the theoretical step is unavailable, as a message naming what to do."""
    if isinstance(e, ValueError):
        return str(e)
    if isinstance(e, NotImplementedError):
        return f"{cls.__name__} has no theoretical step (no theory method): give --step FLOAT"
    missing = [k for k in ("L", "L_tilde", "L_max", "mu") if getattr(problem.consts, k) is None]
    return (
        f"{cls.__name__}'s theoretical step needs constants this problem does not know "
        f"({', '.join(missing) or type(e).__name__}): give --step FLOAT"
    )


REGIMES = ("auto", "nonconvex", "pl")


def regime_option(default: str = "auto"):
    """The ``regime`` option of the methods with a nonconvex and a PL theorem: which step
    (``auto``: the PL step where the problem knows ``mu``)."""
    return option(default, "theory step: auto | nonconvex | pl", choices=REGIMES)


def minibatch_option():
    """The ``batch_size`` option of the methods whose minibatches are optional: a positive
    integer, or None (the default) for full local gradients."""
    return option(None, "minibatch per node (default: full local gradients)", check=check_count)


def minibatch(problem, comm: Comm, t: int, tag: int, size: int | None):
    """Step ``t``'s minibatch of ``size`` rows per node from the stream ``tag``, or None (full
    local gradients) when ``size`` is None."""
    return None if size is None else problem.sample(comm.rng(t, tag=tag), size)


def grads(problem, x: torch.Tensor, batch=None) -> torch.Tensor:
    """Every held node's gradient at the common point ``x``, ``(m, d)``."""
    return problem.grad(x, batch)


def initial_estimator(
    init: str, g_i: torch.Tensor, compressor: Compressor, comm: Comm, t_rng: int = -1
) -> tuple[torch.Tensor, torch.Tensor]:
    """The shared ``--init full|compressed|zero`` choice for an estimator ``g_i^0`` of ``g_i``.

    ``full``: ``g_i^0 = g_i`` sent uncompressed (charged); ``compressed``: ``C(g_i)`` (charged);
    ``zero``: nothing sent. Returns ``(g_i^0, g^0 = mean_i g_i^0)``.
    """
    if init == "full":
        return g_i, comm.reduce_full(g_i)
    if init == "compressed":
        packet = compressor.encode(g_i, comm.rng_for(compressor, t_rng))
        c_i = compressor.decode(packet)
        return c_i, comm.reduce(packet, compressor, decoded=c_i)
    if init == "zero":
        return torch.zeros_like(g_i), torch.zeros_like(g_i[0])
    raise ValueError(f"init must be full, compressed or zero, got {init!r}")
