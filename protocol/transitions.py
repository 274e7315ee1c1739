"""The rule every state machine here follows: a state changes only through a transition its
table allows.

Each machine (the coordinator's ``ClassicGroupState``, ``ConsumerGroupState``, ``MemberState``
and ``TransactionState``; broker/auth's SASL session and mechanism states) keeps its table as
data — for every state, the states it may be entered from, as Apache Kafka's
``ClassicGroupState.validPreviousStates`` does — and funnels every change through one method
that calls ``check``. A refused transition is a bug, never a client error: it raises
``IllegalStateTransition`` instead of answering.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import TypeVar

S = TypeVar("S", bound=Enum)


class IllegalStateTransition(RuntimeError):
    """A state machine was asked for a transition its table does not list (a bug)."""

    def __init__(self, machine: str, current: Enum, target: Enum) -> None:
        super().__init__(f"{machine}: illegal state transition {current.name} -> {target.name}")
        self.machine = machine
        self.current = current
        self.target = target


def check(machine: str, valid_previous: Mapping[S, frozenset[S]], current: S, target: S) -> S:
    """``target`` if the table lets ``current`` move there; raises IllegalStateTransition otherwise."""
    if current not in valid_previous[target]:
        raise IllegalStateTransition(machine, current, target)
    return target


def valid_transitions(valid_previous: Mapping[S, frozenset[S]]) -> set[tuple[S, S]]:
    """Every (from, to) pair a table allows."""
    return {(prev, target) for target, prevs in valid_previous.items() for prev in prevs}


def from_moves(moves: Mapping[S, frozenset[S]]) -> dict[S, frozenset[S]]:
    """A table written as moves (each state: the states it may go to), in the valid-previous
    form ``check`` reads — for machines whose rules read best forwards (SASL exchanges)."""
    return {target: frozenset(s for s, tos in moves.items() if target in tos) for target in moves}
