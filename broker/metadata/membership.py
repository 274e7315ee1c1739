"""Who is in the cluster, as the handlers and SHOW DNODES read it: `Members`, the role, and
`LocalMembership`, a broker in no cluster — a cluster of one — so those readers have one code
path (issue 27). On a cluster broker/cluster/membership.py implements it from etcd.

Rules of the cluster of one: this broker is alone in the view and it is the controller (epoch
0); the cluster id is the configured one; there is no etcd, so `refresh()` reads nothing and
the `on_change` callbacks never fire; its last read is always now. The view holds no address
for it: its readers answer each client with the address of the listener it came in on.
`start` takes the broker's address once its listeners are bound (a cluster's membership
registers it in etcd then).

It lives here, beside the view, so handlers, broker/cluster and the server all import it
without an import cycle.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from tmqgate.broker.metadata.view import BrokerInfo, ClusterView
from tmqgate.protocol import clock


class Members(Protocol):
    """What the handlers and SHOW DNODES read of the cluster's membership."""

    @property
    def view(self) -> ClusterView: ...

    @property
    def cluster_id(self) -> str | None: ...  # None: not read from etcd yet

    @property
    def revision(self) -> int: ...  # the newest etcd revision read (DescribeQuorum's high watermark)

    @property
    def read_ms(self) -> int: ...  # when (wall clock ms) the view was last read

    @property
    def on_change(self) -> list[Callable[[], None]]: ...  # called after each read of the view

    @property
    def advertised(self) -> tuple[str, int]: ...  # this broker's address (its first listener's), once started

    async def start(self, advertised: tuple[str, int], facts: dict[str, int]) -> None: ...  # join, once listening

    async def refresh(self) -> bool: ...

    async def catch_up(self) -> None: ...  # a round now if the cluster changed since the last (cheap check)

    def mark(self) -> tuple[int, ...]: ...  # the cluster-wide changes queued here so far (before a request)

    # after it: False when its changes did not reach the cluster in time
    async def settle(self, mark: tuple[int, ...]) -> bool: ...

    def leaving(self) -> None: ...  # the broker's shutdown began: it decides nothing for the cluster any more

    async def stop(self) -> None: ...  # leave the cluster (at the broker's shutdown)


class LocalMembership:
    """See the module docstring."""

    revision = 0

    def __init__(self, node_id: int, cluster_id: str) -> None:
        self.view = ClusterView({node_id: BrokerInfo(node_id, "", 0)}, controller_id=node_id, controller_epoch=0)
        self.cluster_id: str | None = cluster_id
        self.on_change: list[Callable[[], None]] = []
        self.advertised: tuple[str, int] = ("", 0)

    @property
    def read_ms(self) -> int:
        return clock.now_ms()

    async def start(self, advertised: tuple[str, int], facts: dict[str, int]) -> None:
        self.advertised = advertised

    async def refresh(self) -> bool:
        return True

    async def catch_up(self) -> None:
        return None

    def mark(self) -> tuple[int, ...]:
        return ()

    async def settle(self, mark: tuple[int, ...]) -> bool:
        return True

    def leaving(self) -> None:
        return None

    async def stop(self) -> None:
        return None
