"""The compositional core: attention rows as points of the simplex (docs/design.md, "The
mathematics").

Works on numpy arrays and torch tensors alike (any device) and never imports torch itself.
"""

from attncoda.coda.entropies import (
    EntropyChange,
    EntropySplit,
    entropy,
    entropy_change_split,
    entropy_split,
)
from attncoda.coda.geometry import (
    AitchisonSplit,
    aitchison,
    aitchison_split,
    clr,
    log_probs,
    sink_balance,
)
from attncoda.coda.metrics import head_distances, row_distance

__all__ = [
    "AitchisonSplit",
    "EntropyChange",
    "EntropySplit",
    "aitchison",
    "aitchison_split",
    "clr",
    "entropy",
    "entropy_change_split",
    "entropy_split",
    "head_distances",
    "log_probs",
    "row_distance",
    "sink_balance",
]
