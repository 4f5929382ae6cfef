"""The four variants of the head clustering, in the order of every table and figure."""

__all__ = ["VARIANTS", "VARIANT_TITLES"]

VARIANTS = ("keep", "drop", "aitchison_sink", "aitchison_content")
"""The four runs of the pipeline, in the order of every table and figure."""

VARIANT_TITLES = {
    "keep": "JS, keep sink (Clark et al.)",
    "drop": "JS, drop sink",
    "aitchison_sink": "Aitchison sink term",
    "aitchison_content": "Aitchison content term",
}
"""A human-readable name for each variant (figure titles)."""
