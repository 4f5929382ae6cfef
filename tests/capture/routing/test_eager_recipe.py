"""The dtype recipe of each family's eager attention function, seen by running it on a probe
in the layer's dtype (no text of transformers' source is read): which families take the
softmax of bfloat16 scores in float32, which compute the scores in float32, and the routed
function bit-identical to eager in bfloat16 with the recipe found."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from attncoda.capture import forward  # noqa: E402
from attncoda.capture.routing import _recipe, routable, routed  # noqa: E402
from tiny_models import VOCAB, _configs  # noqa: E402
from tiny_models import tiny as _tiny  # noqa: E402

#: Read from each family's eager_attention_forward (transformers 5): these take the softmax
#: in the scores' own dtype (GPT-OSS's learned sinks join the row first, in its own way);
#: every other family casts half-precision scores to float32 for it.
SOFTMAX_IN_SCORES_DTYPE = {
    "gpt2",
    "gpt2-upcast",
    "bert",
    "roberta",
    "xlm-roberta",
    "camembert",
    "electra",
    "distilbert",
    "gpt_oss",
    "gptj",
}
#: GPT-J multiplies queries and keys cast to float32: its scores are float32.
FLOAT32_SCORES = {"gptj"}


def _attention_class(model) -> type:
    """The class of the model's first module that transformers' attention interface calls
    with it (the one whose modeling module defines ``eager_attention_forward``)."""
    import sys

    for module in model.modules():
        found = getattr(sys.modules[type(module).__module__], "eager_attention_forward", None)
        if found is not None and hasattr(module, "config") and "Attention" in type(module).__name__:
            return type(module)
    raise AssertionError(f"{type(model).__name__} has no attention module with an eager function")


@pytest.mark.parametrize("family", list(_configs(64)))
def test_each_family_s_recipe_is_seen_and_routed_bf16_is_eager(family, monkeypatch):
    model = _tiny(family, torch.bfloat16, positions=64)
    if not routable(model):
        pytest.skip(f"{family} is read through eager outputs here: no recipe is consulted")
    monkeypatch.setattr(_recipe, "RECIPES", {})  # found again, by this model's layers
    ids = torch.randint(3, VOCAB, (2, 12), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    model.set_attn_implementation("eager")
    eager = forward(model, ids, mask)
    with routed(model):
        ours = forward(model, ids, mask)
    recipe = _recipe.RECIPES[_attention_class(model), torch.bfloat16]
    assert recipe.upcast_softmax == (family not in SOFTMAX_IN_SCORES_DTYPE)
    assert recipe.float32_scores == (family in FLOAT32_SCORES)
    # One block: eager's op sequence in eager's dtypes, so the same bits.
    key = "logits" if getattr(eager, "logits", None) is not None else "last_hidden_state"
    assert torch.equal(getattr(ours, key), getattr(eager, key))


def test_a_family_without_an_eager_function_of_its_own_takes_the_usual_recipe(monkeypatch):
    class Alone(torch.nn.Module):  # defined here: this test module has no eager function
        pass

    monkeypatch.setattr(_recipe, "RECIPES", {})
    query, key = torch.zeros(1, 4, 3, 8), torch.zeros(1, 2, 3, 8)
    assert _recipe.recipe(Alone(), query, key) == _recipe.Recipe(True, False)
