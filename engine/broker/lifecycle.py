"""The broker role's lifecycle (KIP-500): register with the active controller, heartbeat, get
unfenced once caught up, and leave through a controlled shutdown.

    Offline -> Starting -> Recovery (registered, fenced, catching up) -> Running (caught up and
    unfenced by the controller) -> PendingControlledShutdown (the controller moves leaderships
    away) -> ShuttingDown -> Offline

The broker itself is a Raft *observer* of the metadata log (node.py): it fetches committed
records from the voters, keeps them (and its snapshots) in its own directory, and replays them
into its image. This module only talks to the controller, with Kafka's requests:

    BrokerRegistration v4   broker id, cluster id, a fresh incarnation id per process, the
                            listeners, supported features, rack, log dir ids. The answer is the
                            broker epoch (the offset of the RegisterBrokerRecord).
    BrokerHeartbeat v1      every ``heartbeat_interval_ms`` with the offset of the last record this
                            broker has applied; the controller unfences it once that reaches its
                            epoch, and fences it when heartbeats stop for the session timeout.

Which controller: the Raft leader this observer last heard of (the active controller), else the
voters in turn. NOT_CONTROLLER, a lost connection or a timeout moves to the next. A heartbeat
answered STALE_BROKER_EPOCH or BROKER_ID_NOT_REGISTERED (the controller lost or replaced our
registration) registers again. DUPLICATE_BROKER_REGISTRATION (an earlier process with this id is
still within its session) is retried with backoff until that session expires.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import uuid
from dataclasses import dataclass

from kio.schema.broker_heartbeat.v1 import request as kheartbeat_req
from kio.schema.broker_heartbeat.v1 import response as kheartbeat_resp
from kio.schema.broker_registration.v4 import request as kregister_req
from kio.schema.broker_registration.v4 import response as kregister_resp
from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32, i64, u16

from kraftlog.engine.protocol.apis import API_BROKER_HEARTBEAT, API_BROKER_REGISTRATION
from kraftlog.engine.protocol.controller_channel import ControllerChannel, Listener, Retry, stop_task

log = logging.getLogger("kraftlog.broker")

class BrokerState(enum.Enum):
    """Kafka's BrokerState names."""

    NOT_RUNNING = "NotRunning"
    STARTING = "Starting"
    RECOVERY = "Recovery"
    RUNNING = "Running"
    PENDING_CONTROLLED_SHUTDOWN = "PendingControlledShutdown"
    SHUTTING_DOWN = "ShuttingDown"


@dataclass(frozen=True)
class BrokerConfig:
    heartbeat_interval_ms: int = 2000  # Kafka's broker.heartbeat.interval.ms
    request_timeout_ms: int = 2000  # one request to one controller
    retry_backoff_ms: int = 100  # after a failed attempt, doubling up to retry_backoff_max_ms
    retry_backoff_max_ms: int = 2000
    controlled_shutdown_timeout_ms: int = 30_000  # give up waiting for leaderships to move
    # ... or sooner, when no controller has answered for this long: with the quorum gone (say, the
    # whole cluster stopping at once) there is nobody to move leaderships, so waiting buys nothing
    controlled_shutdown_unreachable_ms: int = 1500


class BrokerLifecycle:
    """Registration and heartbeats of one broker process, as an asyncio task (``start``/``stop``)."""

    def __init__(self, node_id: int, cluster_id: str, publisher, voters: dict[int, tuple[str, int]], *,
                 listeners: list[Listener], features: list[tuple[str, int, int]], rack: str | None,
                 log_dirs: tuple[uuid.UUID, ...] = (), config: BrokerConfig | None = None, ssl_context=None):
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.publisher = publisher  # engine.controller.controller.ImagePublisher: image, next_offset, leader
        self.voters = voters
        self.listeners = listeners
        self.features = features
        self.rack = rack
        self.log_dirs = log_dirs
        self.config = config or BrokerConfig()
        self.incarnation_id = uuid.uuid4()
        self.state = BrokerState.NOT_RUNNING
        self.broker_epoch = -1
        self.fenced = True
        self.caught_up = False
        # set once the controller first says our metadata caught up (Kafka's initialCatchUpFuture):
        # until then the node answers no client Metadata from the image it restarted with
        self.initial_catch_up = asyncio.Event()
        self.heartbeats = 0
        self._want_shut_down = False
        self._shut_down_allowed = asyncio.Event()
        self._unfenced = asyncio.Event()
        self.channel = ControllerChannel(voters, publisher, self.config.request_timeout_ms, ssl_context=ssl_context)
        self._unreachable_since: float | None = None  # loop time of the first failure in a row
        self._task: asyncio.Task | None = None

    # -- lifecycle -----------------------------------------------------------------------------------

    def start(self) -> None:
        self.state = BrokerState.STARTING
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def wait_unfenced(self) -> None:
        await self._unfenced.wait()

    async def controlled_shutdown(self) -> bool:
        """Ask the controller to move our leaderships away and let us go; True once it agreed,
        False when it did not within ``controlled_shutdown_timeout_ms`` (or we never registered)."""
        if self._task is None or self.broker_epoch < 0:
            return False
        self.state = BrokerState.PENDING_CONTROLLED_SHUTDOWN
        self._want_shut_down = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.controlled_shutdown_timeout_ms / 1000
        unreachable_s = self.config.controlled_shutdown_unreachable_ms / 1000
        while not self._shut_down_allowed.is_set():
            if loop.time() >= deadline:
                log.warning("controlled shutdown not confirmed within %d ms; stopping anyway",
                            self.config.controlled_shutdown_timeout_ms)
                return False
            since = self._unreachable_since
            if since is not None and loop.time() - since >= unreachable_s:
                log.warning("no controller answered for %d ms; stopping without a controlled shutdown",
                            self.config.controlled_shutdown_unreachable_ms)
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._shut_down_allowed.wait(), 0.05)
        return True

    async def stop(self) -> None:
        self.state = BrokerState.SHUTTING_DOWN
        await stop_task(self._task)
        await self.channel.close()
        self.state = BrokerState.NOT_RUNNING

    # -- the loop ----------------------------------------------------------------------------------------

    async def _run(self) -> None:
        backoff_ms = self.config.retry_backoff_ms
        while True:
            try:
                if self.broker_epoch < 0:
                    await self._register()
                    backoff_ms = self.config.retry_backoff_ms
                    self._unreachable_since = None
                    # the first heartbeat at once (Kafka's BrokerLifecycleManager after a
                    # registration): its answer says whether we caught up, and until it does
                    # a restarted broker answers no client Metadata
                    continue
                await self._heartbeat()
                backoff_ms = self.config.retry_backoff_ms
                self._unreachable_since = None
                if self.broker_epoch >= 0 and not self._shut_down_allowed.is_set():
                    # while catching up or shutting down, ask again sooner: both wait on the controller
                    quick = self.fenced or self._want_shut_down
                    await asyncio.sleep((self.config.heartbeat_interval_ms / (8 if quick else 1)) / 1000)
                elif self._shut_down_allowed.is_set():
                    return
            except Retry as exc:
                if self._unreachable_since is None:
                    self._unreachable_since = asyncio.get_running_loop().time()
                log.info("%s; retrying in %d ms", exc, backoff_ms)
                await asyncio.sleep(backoff_ms / 1000)
                backoff_ms = min(backoff_ms * 2, self.config.retry_backoff_max_ms)

    async def _register(self) -> None:
        req = kregister_req.BrokerRegistrationRequest(
            broker_id=i32(self.node_id), cluster_id=self.cluster_id, incarnation_id=self.incarnation_id,
            listeners=tuple(kregister_req.Listener(name=li.name, host=li.host, port=u16(li.port),
                                                   security_protocol=i16(li.security_protocol))
                            for li in self.listeners),
            features=tuple(kregister_req.Feature(name=n, min_supported_version=i16(lo), max_supported_version=i16(hi))
                           for n, lo, hi in self.features),
            rack=self.rack, log_dirs=self.log_dirs)
        resp = await self.channel.ask(API_BROKER_REGISTRATION, 4, req, kregister_resp.BrokerRegistrationResponse)
        if resp.error_code is not ErrorCode.none:
            raise Retry(f"registration refused by controller {self.channel.controller_id}: {resp.error_code.name}")
        self.broker_epoch = int(resp.broker_epoch)
        self.state = BrokerState.RECOVERY
        self.fenced = True
        log.info("registered with controller %d: broker epoch %d", self.channel.controller_id, self.broker_epoch)

    async def _heartbeat(self) -> None:
        req = kheartbeat_req.BrokerHeartbeatRequest(
            broker_id=i32(self.node_id), broker_epoch=i64(self.broker_epoch),
            current_metadata_offset=i64(self.publisher.next_offset - 1), want_fence=False,
            want_shut_down=self._want_shut_down)
        resp = await self.channel.ask(API_BROKER_HEARTBEAT, 1, req, kheartbeat_resp.BrokerHeartbeatResponse)
        code = resp.error_code
        if code in (ErrorCode.stale_broker_epoch, ErrorCode.broker_id_not_registered):
            log.warning("controller answered %s to our heartbeat: registering again", code.name)
            self.broker_epoch = -1
            self._set_fenced(True)
            raise Retry("registration lost")
        if code is not ErrorCode.none:
            raise Retry(f"heartbeat refused by controller {self.channel.controller_id}: {code.name}")
        self.heartbeats += 1
        self.caught_up = resp.is_caught_up
        if self.caught_up:
            self.initial_catch_up.set()
        self._set_fenced(resp.is_fenced)
        if self._want_shut_down and resp.should_shut_down:
            self.state = BrokerState.SHUTTING_DOWN
            self._shut_down_allowed.set()

    def _set_fenced(self, fenced: bool) -> None:
        if fenced != self.fenced:
            log.info("broker %d is now %s", self.node_id, "fenced" if fenced else "unfenced")
        self.fenced = fenced
        if fenced:
            self._unfenced.clear()
            if self.state is BrokerState.RUNNING:
                self.state = BrokerState.RECOVERY
        else:
            self._unfenced.set()
            if self.state is BrokerState.RECOVERY:
                self.state = BrokerState.RUNNING
