"""The grammar a server decodes an action under: the opening sent as prompt, then the rest.

llama-server decodes every token a grammar forces as one step of its own. Every action of a
schema starts with the same text (``{"a":"``, :func:`.action_opening`), known before the call,
so its tokens go with the prompt, prefilled in the same pass, and the grammar admits only what
follows them (the opening's last token stays with the grammar when it could merge with what
comes next). The tokens are the ones the model itself would write: a split it never saw in
training would cost it probability on the very first free token.
"""

from __future__ import annotations

from dataclasses import dataclass

from forethought.policies import ActionForm, ActionSchema

from .._decode_run import common_prefix
from .._prompt import PromptEncoder
from ..grammar._bounds import OutputBounds
from ..grammar._gbnf import Opening, action_gbnf, action_opening

__all__ = ["ActionGrammar", "action_grammar"]

_PRINTABLE = [chr(c) for c in range(0x20, 0x7F)]
"""Characters that may follow an action's opening: its last token is forced only if none of
them would merge with it."""


@dataclass(frozen=True, slots=True)
class ActionGrammar:
    """What a server decodes an action under: the opening's tokens, then a grammar of the rest."""

    forced: tuple[int, ...]
    """The opening's tokens, as the model would write them, sent after the prompt."""
    opening: str
    """The text of :attr:`forced`."""
    gbnf: str
    """The grammar of what follows :attr:`forced`."""


def action_grammar(
    prompts: PromptEncoder, schema: ActionSchema, bounds: OutputBounds, *, with_opening: bool
) -> ActionGrammar:
    """The opening and the compact GBNF of ``schema``'s actions.

    ``with_opening``: the server takes token ids after the prompt together with a grammar
    (llama-server does; an OpenAI-style API takes text, so its grammar keeps the opening).
    """
    compact = schema.json_schema(ActionForm.COMPACT)
    opening = action_opening(compact) if with_opening else None
    forced = forced_opening(prompts, opening) if opening is not None else []
    text = prompts.decode(forced)
    return ActionGrammar(tuple(forced), text, action_gbnf(compact, bounds, skip=len(text)))


def forced_opening(prompts: PromptEncoder, opening: Opening) -> list[int]:
    """The opening's tokens that every action shares, as the model would write them.

    Each way on (an enum's values; else every printable character) is tokenized after the
    opening; the tokens all of them share, up to the opening's end, are forced. A last token
    that merges with what follows (``":"`` + ``"``, say) is left to the grammar, so the model
    never sees a split it would not write itself.
    """
    if not opening.text:
        return []
    # An enum's values are every way on; anything else (a string's first character, what
    # follows a value that may end here) may be any character.
    ways = list(opening.ways_on)
    if not ways or "" in ways:
        ways += _PRINTABLE
    spelled = [prompts.encode_action(opening.text + w) for w in ways]
    forced = spelled[0][: common_prefix(spelled)]
    while forced and not opening.text.startswith(prompts.decode(forced)):
        forced.pop()
    return forced
