"""The options of a run that say where and how a model runs: :class:`CaptureOptions`, declared
once, field by field (:func:`option`: its help, its API doc and annotation, its choices, its
command-line form, whether a run config stores it). The CLI's flags
(:func:`attncoda.cli._args.add_options`), the API's keywords and their docs
(:mod:`attncoda.api._signatures`), the JSON a run config keeps
(:meth:`CaptureOptions.to_json`, :meth:`CaptureOptions.from_json`) and the checks of each value
are generated from the fields; a new option is one field here plus its use."""

from __future__ import annotations

import dataclasses
import importlib
import re
import textwrap
from collections.abc import Callable, Mapping
from dataclasses import InitVar, dataclass
from typing import Any

from attncoda._errors import AttncodaError, check_choice

__all__ = ["DEVICES", "DTYPES", "CaptureOptions", "Option", "about", "option", "resolve_device"]

#: Where a run puts its models, captures and head distances (``auto``: CUDA when present).
DEVICES = ("cpu", "cuda", "auto")
#: Model parameter dtypes a run may ask for (statistics accumulate in float32 or wider).
DTYPES = ("float32", "bfloat16", "float16", "float64")


def resolve_device(device: str) -> str:
    """``"cpu"`` or ``"cuda"`` for a device option of :data:`DEVICES`.

    ``"auto"`` is CUDA when torch sees a GPU, else the CPU; ``"cuda"`` without a GPU is
    refused rather than silently run elsewhere.
    """
    check_choice("device", device, DEVICES)
    if device == "cpu":
        return "cpu"
    import torch

    if torch.cuda.is_available():
        return "cuda"
    if device == "cuda":
        raise AttncodaError("device 'cuda' asked for, but torch sees no GPU: use cpu or auto")
    return "cpu"


@dataclass(frozen=True)
class Option:
    """What the interfaces of one capture option read from its field (:func:`option`):
    ``help`` (the CLI's; ``{default}`` the default) and ``doc`` (the API's numpydoc), each a
    text or a callable that gives it late; the API's ``annotation`` (its numpydoc type is
    made from it, :attr:`kind`); the ``choices`` it takes (the CLI's, and the check of a
    value) or a ``check(value)`` that refuses a bad one; the command line's ``parse`` and
    ``metavar``; and whether a run config's JSON holds it ``"always"`` or only when it is not
    its default (``"given"``: a config written before the option existed reads it back)."""

    help: str | Callable[[], str]
    doc: str | Callable[[], str]
    annotation: str
    choices: Callable[[], tuple[str, ...]] | None = None
    check: Callable[[Any], None] | None = None
    parse: Callable[[str], Any] = str
    metavar: str | None = None
    stored: str = "always"

    def help_text(self, default: Any) -> str:
        """The command-line help, the default said in it."""
        said = self.help() if callable(self.help) else self.help
        return said.replace("{default}", str(default))

    def doc_text(self) -> str:
        """The API docstring's text of the keyword."""
        return self.doc() if callable(self.doc) else self.doc

    @property
    def kind(self) -> str:
        """The numpydoc type: ``"str | dict[str, int] | None"`` is ``"str or dict, optional"``."""
        kinds = re.sub(r"\[[^\]]*\]", "", self.annotation).replace("Path", "path").split(" | ")
        optional = ", optional" if "None" in kinds else ""
        return " or ".join(k for k in kinds if k != "None") + optional


def option(default: Any, **declared: Any) -> Any:
    """A :class:`CaptureOptions` field with default ``default`` and the keywords of
    :class:`Option` (what its interfaces read)."""
    return dataclasses.field(default=default, metadata={"option": Option(**declared)})


def about(f: dataclasses.Field[Any]) -> Option:
    """The :class:`Option` of a field made by :func:`option`."""
    return f.metadata["option"]


def _seed(value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise AttncodaError(f"seed must be an integer of at least 0; got {value!r}")


def _sink(value: Any) -> None:
    from attncoda.capture.sinks import parse_sink

    if not isinstance(value, str):
        raise AttncodaError(f"sink must be a sink spec string; got {value!r}")
    parse_sink(value)


def _placed(value: Any) -> None:
    """A device map is checked with its memory limits and folder (the class's own check)."""


def _late(module: str, name: str) -> Callable[[], Any]:
    """``module.name``, imported when asked (a registry the CLI reads as it builds)."""
    return lambda: getattr(importlib.import_module(module), name)


_REGISTRY = "attncoda.capture.kernels.registry"


def _documented(cls: type) -> type:
    """``cls`` whose docstring's ``{fields}`` is one numpydoc entry per field, its type and
    text the API's (:attr:`Option.kind`, :meth:`Option.doc_text`)."""
    entries = []
    for f in dataclasses.fields(cls):
        text = textwrap.indent(textwrap.fill(about(f).doc_text(), 84), " " * 8)
        entries.append(f"    {f.name} : {about(f).kind}\n{text}")
    cls.__doc__ = (cls.__doc__ or "").replace("    {fields}", "\n".join(entries))
    return cls


@_documented
@dataclass(frozen=True)
class CaptureOptions:
    """How a run loads and captures every model: built and checked once (by the CLI or the
    API), then handed through whole (a run holds them in its run config); declared once,
    each field with :func:`option` (the module docstring).

    Attributes
    ----------
    {fields}

    Other Parameters
    ----------------
    here : bool, default True
        Also check them against this machine (``"cuda"`` without a GPU); not a field, False
        for options read back from a run folder (:meth:`from_json`), made elsewhere maybe.

    Raises
    ------
    AttncodaError
        On construction: an unknown device, ``"cuda"`` where torch sees no GPU, an unknown
        dtype, method or kernel, a kernel without the fast method, a bad sink or seed, or a
        placement :func:`attncoda.load_model` refuses.
    """

    sink: str = option(
        "first", annotation="str", check=_sink, doc='Sink spec (docs/design.md, "Sinks").',
        help="first | auto | positions like 0 or 0,1 | a token like [CLS] or id:101 "
        "(default: {default})",
    )  # fmt: skip
    seed: int = option(
        0, annotation="int", check=_seed, parse=int,
        help="the run's seed: row samples, bootstrap, MDS, random pruning (default: {default})",
        doc="The run's seed (row samples, bootstrap resamples, MDS, random pruning).",
    )  # fmt: skip
    device: str = option(
        "auto", annotation="str", choices=lambda: DEVICES,
        help="where models run; auto: CUDA where torch sees a GPU, else the CPU "
        "(default: {default})",
        doc='Model specs only: where models run (``"cpu"``, ``"cuda"``, or ``"auto"``: CUDA '
        "where torch sees a GPU, else the CPU).",
    )  # fmt: skip
    device_map: str | Mapping[str, Any] | None = option(
        None, annotation="str | dict[str, int | str] | None", stored="given", check=_placed,
        choices=_late("attncoda.models.placement", "DEVICE_MAPS"),
        help="spread each model over the GPUs, the CPU and the disk instead of --device "
        "(transformers' device_map strategies)",
        doc="Model specs only: spread each model over GPUs, the CPU and the disk instead of "
        '``device`` (``"auto"``, ``"balanced"``, ``"sequential"`` or ``{module: device}``, as '
        "for :func:`attncoda.load_model`); weights put on the disk go to ``out/offload``.",
    )  # fmt: skip
    max_memory: Mapping[Any, Any] | None = option(
        None, annotation="dict[int | str, int | str] | str | None", stored="given",
        check=_placed, metavar="DEV=SIZE,...",
        help="with --device-map: the most each device holds, e.g. 0=2GiB,cpu=8GiB",
        doc="Model specs with a ``device_map`` only: memory limits per device, "
        '``{0: "2GiB", "cpu": "8GiB"}`` (or the text ``"0=2GiB,cpu=8GiB"``).',
    )  # fmt: skip
    offload_folder: str | None = option(
        None, annotation="str | Path | None", stored="given", check=_placed, metavar="DIR",
        help="with --device-map: where weights put on the disk go (default: OUT/offload)",
        doc="Model specs with a ``device_map`` only: where weights the map puts on the disk "
        "go (None: ``out/offload``).",
    )  # fmt: skip
    dtype: str | None = option(
        None, annotation="str | None", choices=lambda: DTYPES,
        help="model parameter dtype (default: float32)",
        doc="Model specs only: the models' parameter dtype (None: float32).",
    )  # fmt: skip
    method: str = option(
        "auto", annotation="str", choices=_late("attncoda.capture.names", "METHODS"),
        help="capture: auto (fast wherever a kernel serves the device and dtype, else exact), "
        "exact (eager's forward, the reference) or fast (statistics from the fused kernel) "
        "(default: {default})",
        doc='Model specs and live models: the capture method, ``"auto"`` (the fast path '
        'wherever a kernel serves the device and dtype, else the exact one), ``"exact"`` '
        '(eager\'s forward, the reference) or ``"fast"``.',
    )  # fmt: skip
    kernel: str = option(
        "auto", annotation="str", choices=_late(_REGISTRY, "KERNELS"),
        stored="given",  # the fast path's only (the exact path has no kernel)
        help=lambda: f"the fast path's kernel: {_late(_REGISTRY, 'describe')()()} "
        "(default: {default})",
        doc=lambda: 'Model specs and live models, with ``method="fast"`` or ``"auto"``: the '
        f"fast path's kernel, {_late(_REGISTRY, 'describe')()(quoted=True)}.",
    )  # fmt: skip
    here: InitVar[bool] = True

    def __post_init__(self, here: bool) -> None:
        from attncoda.models.placement import check_run_placement

        for f in dataclasses.fields(self):
            _check(f, getattr(self, f.name))
        if self.kernel != "auto" and self.method == "exact":
            raise AttncodaError(
                f"--kernel {self.kernel} is for the fast path (the exact method has no "
                "kernel): drop --method exact, or drop --kernel"
            )
        if isinstance(self.max_memory, str):  # the command line's "0=2GiB,cpu=8GiB"
            from attncoda.models.placement import parse_max_memory

            object.__setattr__(self, "max_memory", parse_max_memory(self.max_memory))
        # The disk needs a folder: a run's default is <run folder>/offload.
        folder = self.offload_folder
        if self.device_map is not None and folder is None:
            folder = "offload"
        check_run_placement(self.device, self.device_map, self.max_memory, folder)
        if here and self.device == "cuda":
            resolve_device(self.device)  # refused here, before anything is written or loaded
        if self.offload_folder is not None:
            object.__setattr__(self, "offload_folder", str(self.offload_folder))

    def placement(self) -> dict[str, Any]:
        """The placement keywords of :func:`attncoda.load_model`: the resolved ``device``, or
        without it the device map, its memory limits (the JSON keys of a run config read
        back) and offload folder."""
        if self.device_map is None:
            return {"device": resolve_device(self.device)}
        from attncoda.models.placement import max_memory_from_config

        return {
            "device_map": self.device_map,
            "max_memory": max_memory_from_config(self.max_memory),
            "offload_folder": self.offload_folder,
        }

    def to_json(self) -> dict[str, Any]:
        """The options as a run config's JSON keeps them: every field stored ``"always"``,
        the others only when they differ from their default (a mapping copied)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if about(f).stored == "always" or value != f.default:
                out[f.name] = dict(value) if isinstance(value, Mapping) else value
        return out

    @classmethod
    def from_json(cls, stored: Mapping[str, Any]) -> CaptureOptions:
        """The options :meth:`to_json` wrote, checked as any others are, but not against this
        machine (a report of a GPU run is rendered on a laptop; a model's load checks its
        device where it runs, :meth:`placement`)."""
        values = {
            f.name: stored[f.name] if about(f).stored == "always" else stored.get(f.name, f.default)
            for f in dataclasses.fields(cls)
        }
        return cls(**values, here=False)


def _check(f: dataclasses.Field[Any], value: Any) -> None:
    """Refuse ``value`` of the option ``f`` unless its check, else its choices, allow it
    (None where None is the default is always allowed)."""
    if value is None and f.default is None:
        return
    declared = about(f)
    if declared.check is not None:
        declared.check(value)
    elif declared.choices is not None:
        check_choice(f.name, value, declared.choices())
