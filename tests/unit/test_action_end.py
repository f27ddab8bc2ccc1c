"""A streamed action is read until its top-level object closes, and not one character less.

The server's answer is cut there (a decode step early), so a brace or a quote inside a string
value must never look like the end, and a value that could still go on never ends early.
"""

from __future__ import annotations

import pytest

from forethought.models.backends._action_end import ActionEnd


def _closes_at(pieces: list[str]) -> int | None:
    """The index of the piece after which the reader said the action closed."""
    end = ActionEnd()
    for i, piece in enumerate(pieces):
        if end.feed(piece):
            return i
    return None


@pytest.mark.parametrize(
    ("pieces", "at"),
    [
        (['{"a":"', "stop", '"}'], 2),
        (['{"a":"', "stop", '","s":', "0", ".5", "}"], 5),
        (['{"n":"', "a}", "b", '"', "}"], 4),  # a brace inside a string
        (['{"n":"', 'say \\"}\\"', '"}'], 2),  # escaped quotes inside a string
        (['{"n":"', "\\\\", '"}'], 2),  # an escaped backslash ends before the quote
        (['{"p":{"x":', "1}", ',"q":[', "1,2]", "}"], 4),  # nested values
        (["[", "1,", "[2]", "]"], 3),
        (['{"a":"stop"', ',"s":1', "}", "extra"], 2),
    ],
)
def test_the_action_closes_at_its_last_brace(pieces: list[str], at: int) -> None:
    assert _closes_at(pieces) == at


@pytest.mark.parametrize("pieces", [["12", "3"], ['"stop"'], ["true"], ['{"a":', '"x"'], []])
def test_a_value_that_may_go_on_never_closes_early(pieces: list[str]) -> None:
    assert _closes_at(pieces) is None


def test_closed_stays_closed() -> None:
    end = ActionEnd()
    assert not end.closed
    assert end.feed('{"a":1}')
    assert end.feed("more")
    assert end.closed
