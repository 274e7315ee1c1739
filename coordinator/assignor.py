"""TDengine's even vnode split, made sticky: the server-side assignor of KIP-848 groups.

TDengine's mnode divides a topic's vnodes evenly over the consumers of a group (4 vnodes,
3 consumers → 2+1+1; 5 consumers → 1+1+1+1 and one idles) and, on a rebalance, moves only
what the new split needs. Here the split runs over every partition of every topic the group
subscribes to, counts differ by at most one between members that could take each other's
partitions, and a partition stays with its current owner unless it must move.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

TopicPartition = tuple[str, int]

#: Names KIP-848 clients may ask for in ``group.remote.assignor``; all map to this assignor.
ASSIGNOR_NAMES = ("uniform", "range")
DEFAULT_ASSIGNOR = "uniform"


def assign(
    members: Iterable[str],
    subscriptions: Mapping[str, Iterable[str]],
    partitions: Mapping[str, int],
    current: Mapping[str, Iterable[TopicPartition]] | None = None,
) -> dict[str, set[TopicPartition]]:
    """Split the partitions of the subscribed topics over ``members`` (in their join order).

    ``subscriptions`` maps a member to the topic names it takes, ``partitions`` a topic to its
    partition count (topics missing from it do not exist), ``current`` the previous assignment
    (kept where the split allows: stickiness).
    """
    order = {m: i for i, m in enumerate(members)}
    subs = {m: set(subscriptions.get(m, ())) for m in order}
    result: dict[str, set[TopicPartition]] = {m: set() for m in order}
    valid = {(t, p) for m in order for t in subs[m] if t in partitions for p in range(partitions[t])}
    owned: set[TopicPartition] = set()
    for m in order:
        for tp in sorted((current or {}).get(m, ())):
            if tp in valid and tp[0] in subs[m] and tp not in owned:
                result[m].add(tp)
                owned.add(tp)
    for tp in sorted(valid - owned):
        eligible = [m for m in order if tp[0] in subs[m]]
        result[min(eligible, key=lambda m: (len(result[m]), order[m]))].add(tp)
    _balance(result, subs, order)
    return result


def _balance(result: dict[str, set[TopicPartition]], subs: dict[str, set[str]], order: dict[str, int]) -> None:
    """Move one partition at a time from the fullest member to an emptier one that can take it.

    Each move lowers the sum of squared counts, so this ends; it stops when no member holds two
    more than another that could take one of its partitions — the even split with fewest moves.
    """
    while True:
        donors = sorted(result, key=lambda m: (-len(result[m]), order[m]))
        receivers = sorted(result, key=lambda m: (len(result[m]), order[m]))
        for donor in donors:
            moved = False
            for receiver in receivers:
                if len(result[donor]) <= len(result[receiver]) + 1:
                    break
                movable = sorted(tp for tp in result[donor] if tp[0] in subs[receiver])
                if movable:
                    tp = movable[-1]
                    result[donor].discard(tp)
                    result[receiver].add(tp)
                    moved = True
                    break
            if moved:
                break
        else:
            return
