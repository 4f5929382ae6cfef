"""Tests for attncoda.experiments.contract: each kind of field, its checks and messages."""

from __future__ import annotations

import dataclasses

import pytest

from attncoda import AttncodaError
from attncoda.experiments.contract import allowed_text, check_setting, check_settings, setting


@dataclasses.dataclass(frozen=True)
class Settings:
    n: int = setting(3, "a count", at_least=1)
    rate: float = setting(0.5, "a share", above=0.0, at_most=1.0)
    tol: float = setting(1e-6, "a tolerance", at_least=0.0)
    pick: tuple[str, ...] = setting(("a", "b"), "names", choices=("a", "b", "c"), item="letter")
    ks: tuple[int, ...] = setting((1, 2), "sizes", at_least=1, item="size")
    path: str = setting("x", "a path")


FIELDS = {f.name: f for f in dataclasses.fields(Settings)}


def test_values_are_normalised_to_the_fields_kind():
    assert check_setting(FIELDS["pick"], ["c", "a"], "pick") == ("c", "a")
    assert check_setting(FIELDS["pick"], "b", "pick") == ("b",)
    assert check_setting(FIELDS["ks"], [4], "ks") == (4,)
    assert check_setting(FIELDS["tol"], 0, "tol") == 0.0 and isinstance(
        check_setting(FIELDS["tol"], 0, "tol"), float
    )
    assert check_setting(FIELDS["rate"], 1, "rate") == 1.0  # the closed upper bound


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("n", 0, "n must be an integer of at least 1; got 0"),
        ("n", 2.0, "n must be an integer of at least 1; got 2.0"),
        ("n", False, "n must be an integer of at least 1; got False"),
        ("rate", 0.0, "rate must be a number above 0 and at most 1; got 0.0"),
        ("rate", 1.01, "rate must be a number above 0 and at most 1; got 1.01"),
        ("rate", "0.5", "rate must be a number above 0 and at most 1; got '0.5'"),
        ("tol", float("inf"), "tol must be a finite number of at least 0; got inf"),
        ("tol", -1e-9, "tol must be a finite number of at least 0; got -1e-09"),
        ("pick", [], "pick is empty: give a list of a, b, c"),
        ("pick", ["a", "z"], "unknown letter 'z' in pick: use a list of a, b, c"),
        ("pick", ["a", "a"], "pick holds 'a' twice: give each letter once"),
        ("pick", 3, "pick must be a list of names; got 3"),
        ("ks", [], "ks is empty: give a list of sizes, e.g. [1, 2, 4]"),
        ("ks", [2, 0], "ks holds 0: every size must be at least 1"),
        ("ks", [1.5], "ks holds 1.5: every size is an integer"),
        ("path", 3, "path must be a str; got 3"),
    ],
)
def test_a_value_the_field_does_not_allow_is_refused_by_name(name, value, message):
    with pytest.raises(AttncodaError) as info:
        check_setting(FIELDS[name], value, name)
    assert str(info.value) == message


def test_the_command_line_names_the_flag_and_asks_for_a_comma_list():
    with pytest.raises(AttncodaError) as info:
        check_settings(Settings, {"ks": ()}, label=lambda n: "--" + n, listing="a comma list")
    assert str(info.value) == "--ks is empty: give a comma list of sizes, e.g. 1,2,4"


def test_an_unknown_name_is_refused_with_the_known_ones():
    with pytest.raises(AttncodaError) as info:
        check_settings(Settings, {"m": 1})
    assert (
        str(info.value)
        == "unknown setting 'm' of test_setting: use one of ks, n, path, pick, rate, tol"
    )


def test_what_a_field_allows_in_words():
    assert [allowed_text(f) for f in FIELDS.values()] == [
        "an integer of at least 1",
        "a number above 0 and at most 1",
        "a finite number of at least 0",
        "some of a, b, c, each at most once",
        "sizes of at least 1",
        "a str",
    ]
