"""Numbers and names as a demo run's headline writes them in Markdown (the README's results
table, the end of ``attncoda demo``): percentages of fractions, perplexity ratios, models
by the names prose gives them."""

from __future__ import annotations

__all__ = ["pct", "prose_name", "times"]

#: How prose names the demo's models (``attncoda demo``); any other model by its spec.
_PROSE = {"smollm2": "SmolLM2", "gemma3": "Gemma 3", "minilm": "MiniLM"}


def pct(x: float, digits: int = 1) -> str:
    """A fraction as a percentage: ``pct(0.7944) == "79.4%"``."""
    return f"{100 * x:.{digits}f}%"


def times(x: float) -> str:
    """A perplexity ratio as the headline writes it: ``×1.72``, ``×460``, ``×4.4·10⁷``."""
    if x >= 1000:
        exponent = len(str(int(x))) - 1
        sup = str(exponent).translate(str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹"))
        return f"×{x / 10**exponent:.1f}·10{sup}"
    return f"×{x:.3g}" if x >= 100 else f"×{x:.2f}" if x < 10 else f"×{x:.1f}"


def prose_name(model: str) -> str:
    """``"SmolLM2"`` for ``"smollm2"``: a demo model's name in prose, else ``model``."""
    return _PROSE.get(str(model), str(model))
