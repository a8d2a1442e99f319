"""Slurm's ``--constraint``: node features joined by ``&`` (AND; a comma too, which slurmctld keeps as
``&``) and ``|`` (OR), read left to right as slurmctld reads them; ``(...)`` groups; ``[a|b]`` is a
matching OR (every node of the job has the same one); ``a*2`` asks for at least 2 nodes with ``a`` (the
other nodes need not have it). One operator may end the expression (``gpu&``), as 22.05 lets it.

What slurmctld refuses with ``Invalid feature specification`` raises :class:`ConstraintError`: an empty
feature, two operators in a row, an unbalanced or nested bracket, a count that is no positive number
and, through :func:`unknown_features`, a feature no node has (names are case-sensitive).
"""
from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Collection, Iterator
from typing import NamedTuple, Union

__all__ = ["ConstraintError", "Feature", "Group", "parse_constraint", "as_stored", "unknown_features",
           "node_matches", "variants", "counted", "nodes_counted", "counts_met", "counts_misplaced"]

INVALID = "Invalid feature specification"


class ConstraintError(ValueError):
    """A ``--constraint`` slurmctld refuses (its message: ``Invalid feature specification``)."""


class Feature(NamedTuple):
    name: str
    count: int = 0  # a*N: at least N nodes; 0: every node


class Group(NamedTuple):
    items: tuple[Term, ...]
    ops: tuple[str, ...]  # "&" or "|" between items, one fewer than items
    matching: bool = False  # [...]: one OR alternative for all nodes


Term = Union[Feature, Group]
_TOKEN = re.compile(r"[&|()\[\]]|\*\d*|[^&|()\[\]*]+")


def parse_constraint(text: str) -> Group:
    """The constraint as a tree, or :class:`ConstraintError`."""
    tokens = _TOKEN.findall(as_stored(text))
    if tokens[-1:] in (["&"], ["|"]):
        tokens.pop()
    return _expr(tokens, 0, None, text)[0]


def as_stored(text: str) -> str:
    """The constraint as slurmctld keeps it (``scontrol show job``'s Features=): a comma is an ``&``."""
    return text.replace(",", "&")


def _expr(tokens: list[str], pos: int, closing: str | None, text: str) -> tuple[Group, int]:
    items: list[Term] = []
    ops: list[str] = []
    while True:
        term, pos = _term(tokens, pos, closing, text)
        items.append(term)
        if pos == len(tokens) or tokens[pos] in (")", "]"):
            break
        if tokens[pos] not in ("&", "|"):
            raise ConstraintError(f"{text!r}: expected & or | before {tokens[pos]!r}")
        ops.append(tokens[pos])
        pos += 1
    if (pos < len(tokens)) != (closing is not None) or (closing and tokens[pos] != closing):
        raise ConstraintError(f"{text!r}: unbalanced brackets")
    return Group(tuple(items), tuple(ops), closing == "]"), pos + (closing is not None)


def _term(tokens: list[str], pos: int, closing: str | None, text: str) -> tuple[Term, int]:
    token = tokens[pos] if pos < len(tokens) else ""
    if token in ("(", "["):
        if token == "[" and closing == "]":
            raise ConstraintError(f"{text!r}: brackets cannot nest")
        return _expr(tokens, pos + 1, ")" if token == "(" else "]", text)
    if not token or token in ("&", "|", ")", "]") or token.startswith("*"):
        raise ConstraintError(f"{text!r}: a feature name is missing")
    pos += 1
    if pos < len(tokens) and tokens[pos].startswith("*"):
        count = tokens[pos][1:]
        if not count or int(count) <= 0:
            raise ConstraintError(f"{text!r}: a feature count must be a positive number")
        return Feature(token, int(count)), pos + 1
    return Feature(token), pos


def _features(term: Term) -> Iterator[Feature]:
    if isinstance(term, Feature):
        yield term
    else:
        for item in term.items:
            yield from _features(item)


def unknown_features(group: Group, known: Collection[str]) -> list[str]:
    """The features the constraint names that no node has (slurmctld refuses the job for any)."""
    return [f.name for f in _features(group) if f.name not in known]


def node_matches(term: Term, features: Collection[str]) -> bool:
    """Whether a node with these features may be one of the job's (a counted feature: any node may)."""
    if isinstance(term, Feature):
        return bool(term.count) or term.name in features
    return _combine(term, lambda item: node_matches(item, features))


def _combine(group: Group, test: Callable[[Term], bool]) -> bool:
    """The group's items tested and joined left to right, as slurmctld does (no precedence)."""
    result = test(group.items[0])
    for op, item in zip(group.ops, group.items[1:]):
        found = test(item)
        result = (result and found) if op == "&" else (result or found)
    return result


def variants(group: Group) -> list[Group]:
    """The constraint with each matching OR ``[a|b]`` resolved to one of its alternatives: a job's
    nodes must all match one variant."""
    choices = [_alternatives(item) for item in group.items]
    return [Group(tuple(pick), group.ops) for pick in itertools.product(*choices)]


def _alternatives(term: Term) -> list[Term]:
    if isinstance(term, Feature):
        return [term]
    inner = variants(term)
    if not term.matching or "|" not in term.ops:
        return list(inner)
    out: list[Term] = []
    for flat in inner:  # split at each | into AND chains
        start = 0
        for i, op in enumerate((*flat.ops, "|")):
            if op == "|":
                out.append(Group(flat.items[start:i + 1], flat.ops[start:i]))
                start = i + 1
    return out


def counts_misplaced(group: Group) -> bool:
    """Whether a count stands where Slurm 24.11 refuses it (22.05 takes it): 24.11 takes a count only
    on a constraint of one feature (``a*2``) or in brackets of counted features joined by ``&``
    (``[a*1&b*2]``, which may be joined to the rest: ``[a*1&b*2]&c``). Measured on the real 24.11."""
    if len(group.items) == 1 and isinstance(group.items[0], Feature):
        return False
    return any(_counts_misplaced(item) for item in group.items)


def _counts_misplaced(term: Term) -> bool:
    if isinstance(term, Feature):
        return bool(term.count)
    counts = [isinstance(item, Feature) and item.count > 0 for item in term.items]
    if term.matching and any(counts):
        return not all(counts) or "|" in term.ops
    return any(_counts_misplaced(item) for item in term.items)


def counted(group: Group) -> set[str]:
    """The features the constraint counts (``a*2``)."""
    return {f.name for f in _features(group) if f.count}


def nodes_counted(group: Group) -> int:
    """How many nodes the counts ask for at least (``[a*1&b*2]``: 3), as slurmctld then gives the job."""
    return sum(f.count for f in _features(group))


def counts_met(term: Term, node_features: list[Collection[str]]) -> bool:
    """Whether the job's nodes, together, hold the counted features (``a*2``: on at least 2 of them)
    where the constraint needs them (``a*2|b`` is also met by nodes that all have ``b``)."""
    if isinstance(term, Feature):
        have = sum(term.name in features for features in node_features)
        return have >= term.count if term.count else have == len(node_features)
    if not any(f.count for f in _features(term)):
        return all(node_matches(term, features) for features in node_features)
    return _combine(term, lambda item: counts_met(item, node_features))
