"""attncoda: attention rows as compositional data.

Every row of an attention matrix is a point of the simplex. attncoda splits each comparison
of rows exactly into a *sink* part (how much mass the sink token takes) and a *content* part
(how the rest is shared among content tokens), reads attention from Hugging Face models, and
runs the experiments that show when the usual keep-sink / drop-sink conventions mislead.

``import attncoda`` imports neither torch nor transformers; the model layer loads on first
use of :func:`load_model` or :mod:`attncoda.capture`. One function per experiment of the
registry (:data:`attncoda.experiments.contract.REGISTRY`: :func:`profile`, :func:`flips`,
:func:`cluster`, :func:`safety`, :func:`predict`, :func:`prune`, :func:`collapse`) takes
model specs or captures and returns a :class:`Result`; :func:`compare` tells whether two
run folders hold the same evidence.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

from attncoda._errors import AttncodaError, MissingWheelError
from attncoda._version import __version__ as __version__
from attncoda.coda import (
    AitchisonSplit,
    EntropyChange,
    EntropySplit,
    aitchison,
    aitchison_split,
    clr,
    entropy,
    entropy_change_split,
    entropy_split,
    head_distances,
    log_probs,
    row_distance,
    sink_balance,
)
from attncoda.experiments.contract import REGISTRY

# Names served lazily so that `import attncoda` stays free of torch and transformers.
_LAZY = {
    "load_model": ("attncoda.models.load", "load_model"),
    "corpus": ("attncoda.data.corpus", None),
    "capture_windows": ("attncoda.capture._capture", "capture_windows"),
    "Capture": ("attncoda.capture._result", "Capture"),
    "from_attentions": ("attncoda.capture.given", "from_attentions"),
    "recording": ("attncoda.capture.live", "recording"),
    "Result": ("attncoda.api", "Result"),
    "compare": ("attncoda.api", "compare"),
    "Comparison": ("attncoda.api", "Comparison"),
    # One function per experiment of the registry (attncoda.api makes them).
    **{function: ("attncoda.api", function) for function in REGISTRY.values()},
}

__all__ = [
    "AitchisonSplit",
    "AttncodaError",
    "MissingWheelError",
    "Capture",
    "Comparison",
    "capture",
    "compare",
    "Result",
    "EntropyChange",
    "EntropySplit",
    "aitchison",
    "aitchison_split",
    "capture_windows",
    "clr",
    "corpus",
    "entropy",
    "entropy_change_split",
    "entropy_split",
    "from_attentions",
    "head_distances",
    "load_model",
    "log_probs",
    "recording",
    "row_distance",
    "sink_balance",
    *REGISTRY.values(),
]


# The subpackage, which answers a call as capture() (attncoda/capture/__init__.py); bound
# here so that the name is there before anything imports one of its modules.
capture = importlib.import_module("attncoda.capture")


def _capture_view(cap: Any) -> str:
    """The notebook view of a :class:`Capture` (:func:`attncoda.report.notebook.capture_html`:
    per-layer means in nats and the profile figure), read in the capture's own sink spec."""
    # Imported by name, as the lazy names below are: the top-level package stands above
    # every layer and imports none of them when it is imported.
    notebook = importlib.import_module("attncoda.report.notebook")
    return str(notebook.capture_html(cap, sink=cap.sink_spec))


def _register_notebook_view() -> None:
    """Show a :class:`Capture` in a notebook with the report's figure code.

    The capture layer sits below the report and never imports it: the top-level package,
    above both, registers the view with the running IPython shell by the class's module and
    name, which imports nothing now. Outside IPython nothing is registered. A notebook
    kernel starts IPython before the first ``import attncoda``, so every notebook has it.
    """
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is None:
        return
    html = shell.display_formatter.formatters["text/html"]
    html.for_type_by_name("attncoda.capture._result", "Capture", _capture_view)


_register_notebook_view()


def __dir__() -> list[str]:
    """The public names, those served lazily included (tab completion shows what exists)."""
    return sorted(__all__)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module_name, attr = _LAZY[name]
        module = importlib.import_module(module_name)
        value = module if attr is None else getattr(module, attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'attncoda' has no attribute {name!r}")
