"""The client side of KIP-232: a metadata cache that never moves backwards, and offsets committed
with the epochs they were read under.

``MetadataClient`` asks Kafka's Metadata v12 of the least loaded node it knows and caches, per
topic, (topic id, topic epoch) and, per partition, (leader, leader epoch, replicas, isr). Nodes
answer from their own image, and an image can lag (a standby controller, a broker that has not
pulled yet), so an answer may be older than what the client already cached. The rule
(``is_stale``), applied to every partition the client asked about:

    topic epoch first   lower than cached: stale; higher: newer, whatever its partitions say (the
                        topic was re-created or grew); NO_EPOCH (-1) on either side: not compared
    then leader epoch   (same topic epoch) lower than cached: stale

A stale answer is not applied at all (not even its fresh topics or its broker list): the client
asks another node after an exponential backoff (with 20 % jitter, KIP-580) until an answer is
not stale, or raises ``StaleMetadataError`` at the deadline naming what was stale.

A cached topic answered UNKNOWN_TOPIC_OR_PARTITION: deleted, or asked of a node that has not yet
replayed its creation? Our nodes say how recent their image is (tag 10001, the offset of its last
record; see metadata_answer.py). The topic epoch is an offset in the same log, so a node whose
image ends before the cached topic epoch cannot know the topic: stale. A node whose image ends at
or after it has replayed the creation and no longer has the topic: deleted, the topic leaves the
cache. A node that does not say (a Kafka broker) is believed, as Kafka's client does. A topic
never cached and answered unknown is just unknown (``UnknownTopicOrPartitionError`` from
``leader_for``). Either way the client keeps a tombstone (the answering image's offset X): no
incarnation with topic epoch <= X was alive at X, so a lagging node still showing one (a deleted
topic) is stale too, and a topic re-created later (topic epoch > X) is accepted.

Other topic errors: retriable ones are retried like stale answers (MetadataResponseError at the
deadline), others raise MetadataResponseError at once. Unreachable nodes and timeouts put the node
in an exponential reconnect backoff; NoNodeAvailableError when no node answered in time.

``OffsetStore`` keeps a consumer group's committed offsets in a local JSON file, each with its
internal metadata (a versioned JSON string holding the topic and leader epoch); a commit or a seek
whose epochs are older than the committed ones, or whose metadata does not parse, raises
``InvalidInternalMetadataError`` (Kafka's INVALID_INTERNAL_METADATA).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import itertools
import json
import os
import random
import urllib.parse
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12 import request as kmetadata_req

from kraftlog.durable import write_atomically
from kraftlog.engine.protocol.connection import ClientConnection, ClientError
from kraftlog.engine.protocol.metadata_response import NO_EPOCH, EpochMetadataResponse
from kraftlog.errors import CorruptRecordError, KraftlogError
from kraftlog.raft.wire import WireFormatError

API_METADATA, METADATA_VERSION = 3, 12
BACKOFF_JITTER = 0.2  # KIP-580: each backoff is scaled by a random factor in [0.8, 1.2]
RECENT_STALE_KEPT = 16  # stale findings kept for inspection (client.recent_stale)
_TRANSPORT_ERRORS = (OSError, ClientError, WireFormatError, TimeoutError)


# ---- errors ---------------------------------------------------------------------------------------------


class MetadataClientError(KraftlogError):
    """Base of the metadata client's errors."""


class StaleMetadataError(MetadataClientError):
    """Every answer until the deadline was older than the cache (the last one is described)."""

    def __init__(self, stale: Staleness, answers_stale: int):
        where = stale.topic if stale.partition is None else f"{stale.topic}-{stale.partition}"
        super().__init__(
            f"metadata for {where} stayed stale until the deadline ({answers_stale} stale answers): "
            f"cached topic epoch {stale.cached[0]} leader epoch {stale.cached[1]}, last answer "
            f"(from {stale.node}) topic epoch {stale.answered[0]} leader epoch {stale.answered[1]}"
            + (f"; {stale.reason}" if stale.reason else ""))
        self.topic, self.partition, self.node = stale.topic, stale.partition, stale.node
        self.cached_topic_epoch, self.cached_leader_epoch = stale.cached
        self.answered_topic_epoch, self.answered_leader_epoch = stale.answered


class NoNodeAvailableError(MetadataClientError):
    """No node answered before the deadline (each was unreachable, timed out or in backoff)."""


class UnknownTopicOrPartitionError(MetadataClientError):
    """The cluster does not have this topic (or the topic has no such partition)."""


class LeaderNotAvailableError(MetadataClientError):
    """The partition exists but has no leader (leader id -1)."""


class MetadataResponseError(MetadataClientError):
    """A topic answered with an error code that retrying did not clear (or that is not retriable)."""


class InvalidInternalMetadataError(KraftlogError):
    """Kafka's INVALID_INTERNAL_METADATA: a committed offset's internal metadata does not parse, has
    an unknown version, or carries epochs older than the ones already committed."""


# ---- the staleness rule (pure) ----------------------------------------------------------------------------


def is_stale(cached: tuple[int, int], answered: tuple[int, int]) -> bool:
    """KIP-232's order of (topic epoch, leader epoch): is ``answered`` older than ``cached``?

    Topic epochs decide when both are known and differ; otherwise leader epochs decide (NO_EPOCH,
    -1, is lower than any real epoch, so an answer without a leader epoch is stale against one)."""
    (cached_topic, cached_leader), (answered_topic, answered_leader) = cached, answered
    if cached_topic != NO_EPOCH and answered_topic != NO_EPOCH and cached_topic != answered_topic:
        return answered_topic < cached_topic
    return answered_leader < cached_leader


class PartitionMetadata(NamedTuple):
    topic: str
    partition: int
    leader: int  # -1: no leader
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    topic_epoch: int  # the topic's, repeated here so one value answers leader_for


@dataclasses.dataclass(frozen=True, slots=True)
class TopicMetadata:
    name: str
    topic_id: uuid.UUID | None
    topic_epoch: int  # NO_EPOCH when the answering node did not send one
    partitions: Mapping[int, PartitionMetadata]  # partition id -> metadata (never edited once cached)


class Staleness(NamedTuple):
    """One stale finding: ``partition`` None means the whole topic (older topic epoch, or unknown
    to a node whose image ends before the topic's creation)."""

    topic: str
    partition: int | None
    cached: tuple[int, int]  # (topic epoch, leader epoch)
    answered: tuple[int, int]
    node: str
    reason: str = ""


@dataclasses.dataclass
class Judgement:
    """What one answer means for the cache: apply ``updates`` (None = the topic was deleted) only
    when nothing is ``stale`` and nothing is in ``errors``."""

    updates: dict[str, TopicMetadata | None] = dataclasses.field(default_factory=dict)
    unknown: set[str] = dataclasses.field(default_factory=set)  # never cached, answered unknown
    absent: dict[str, int] = dataclasses.field(default_factory=dict)  # topic -> image offset it was unknown at
    stale: list[Staleness] = dataclasses.field(default_factory=list)
    errors: dict[str, ErrorCode] = dataclasses.field(default_factory=dict)  # other topic errors


def topic_from_answer(t) -> TopicMetadata:
    """The cache's value for one MetadataResponseTopic without error (kio's type or ours)."""
    topic_epoch = int(getattr(t, "topic_epoch", NO_EPOCH))
    parts = {int(p.partition_index): PartitionMetadata(
        t.name, int(p.partition_index), int(p.leader_id), int(p.leader_epoch), tuple(map(int, p.replica_nodes)),
        tuple(map(int, p.isr_nodes)), topic_epoch) for p in t.partitions}
    return TopicMetadata(t.name, t.topic_id, topic_epoch, parts)


def judge_topic(old: TopicMetadata, new: TopicMetadata, node: str) -> list[Staleness]:
    """The stale findings of ``new`` against the cached ``old`` (empty: ``new`` may replace it)."""
    if old.topic_epoch != NO_EPOCH and new.topic_epoch != NO_EPOCH and old.topic_epoch != new.topic_epoch:
        if new.topic_epoch > old.topic_epoch:
            return []  # re-created or grown: every partition is new
        return [Staleness(old.name, None, (old.topic_epoch, NO_EPOCH), (new.topic_epoch, NO_EPOCH), node,
                          "older topic epoch")]
    if NO_EPOCH in (old.topic_epoch, new.topic_epoch) and old.topic_id != new.topic_id:
        return []  # no topic epochs to compare: a new topic id is a re-created topic (Kafka's rule)
    out = []
    for pid, cached in old.partitions.items():
        answered = new.partitions.get(pid)
        if answered is None:  # a partition cannot vanish while the topic epoch stays
            out.append(Staleness(old.name, pid, (old.topic_epoch, cached.leader_epoch),
                                 (new.topic_epoch, NO_EPOCH), node, "partition missing from the answer"))
        elif is_stale((old.topic_epoch, cached.leader_epoch), (new.topic_epoch, answered.leader_epoch)):
            out.append(Staleness(old.name, pid, (old.topic_epoch, cached.leader_epoch),
                                 (new.topic_epoch, answered.leader_epoch), node, "older leader epoch"))
    return out


class MetadataCache:
    """Topic name -> TopicMetadata; changed only by ``apply`` of a judgement without findings, so
    every cached (topic epoch, leader epoch) pair only moves forward.

    Tombstones keep a deleted (or never seen) topic from coming back through a lagging node: a
    node whose image at offset X lacks a topic proves that no incarnation with topic epoch <= X
    was alive at X, so a later answer showing one (from a node behind X) is stale."""

    def __init__(self):
        self.topics: dict[str, TopicMetadata] = {}
        self.tombstones: dict[str, int] = {}  # topic -> highest image offset known to lack it

    def judge(self, answer, asked: Iterable[str], node: str) -> Judgement:
        """Judge a Metadata answer for the topics ``asked`` (others in it are ignored)."""
        j = Judgement()
        by_name = {t.name: t for t in answer.topics}
        image_offset = int(getattr(answer, "metadata_offset", NO_EPOCH))
        for name in asked:
            t = by_name.get(name)
            old = self.topics.get(name)
            if t is None:
                j.errors[name] = ErrorCode.unknown_server_error  # the node left out a topic we asked
            elif t.error_code == ErrorCode.none:
                new = topic_from_answer(t)
                found = judge_topic(old, new, node) if old is not None else self._judge_revival(new, node)
                j.stale.extend(found)
                if not found:
                    j.updates[name] = new
            elif t.error_code == ErrorCode.unknown_topic_or_partition:
                self._judge_unknown(j, name, old, image_offset, node)
            else:
                j.errors[name] = ErrorCode(t.error_code)
        return j

    def _judge_revival(self, new: TopicMetadata, node: str) -> list[Staleness]:
        dead_at = self.tombstones.get(new.name)
        if dead_at is None or new.topic_epoch == NO_EPOCH or new.topic_epoch > dead_at:
            return []
        return [Staleness(new.name, None, (NO_EPOCH, NO_EPOCH), (new.topic_epoch, NO_EPOCH), node,
                          f"the topic was absent at offset {dead_at}, after this incarnation's epoch")]

    @staticmethod
    def _judge_unknown(j: Judgement, name: str, old: TopicMetadata | None, image_offset: int, node: str) -> None:
        if old is not None and NO_EPOCH not in (image_offset, old.topic_epoch) and image_offset < old.topic_epoch:
            j.stale.append(Staleness(name, None, (old.topic_epoch, NO_EPOCH), (NO_EPOCH, NO_EPOCH), node,
                                     f"the node's image ends at offset {image_offset}, before the topic's "
                                     f"epoch {old.topic_epoch}"))
            return
        if old is None:
            j.unknown.add(name)
        else:
            j.updates[name] = None  # the node has replayed the creation and lost the topic: deleted
        if image_offset != NO_EPOCH:
            j.absent[name] = image_offset

    def apply(self, j: Judgement) -> None:
        assert not j.stale and not j.errors, "only a clean judgement is applied"
        for name, topic in j.updates.items():
            if topic is None:
                self.topics.pop(name, None)
            else:
                self.topics[name] = topic
        for name, offset in j.absent.items():
            self.tombstones[name] = max(offset, self.tombstones.get(name, NO_EPOCH))


# ---- the client ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class MetadataClientStats:
    answers_accepted: int = 0  # applied to the cache
    answers_stale: int = 0  # refused by the staleness rule (nothing applied)
    answers_with_errors: int = 0  # a topic error other than unknown topic (nothing applied)
    requests_failed: int = 0  # connection refused/lost, timed out, undecodable


@dataclasses.dataclass(eq=False)
class _Node:
    address: tuple[str, int]
    node_id: int | None  # None: a bootstrap address
    conn: ClientConnection | None = None
    in_flight: int = 0
    failures: int = 0  # consecutive transport failures (sets the reconnect backoff)
    blocked_until_s: float = 0.0

    @property
    def label(self) -> str:
        host, port = self.address
        return f"{host}:{port}" if self.node_id is None else f"node {self.node_id} ({host}:{port})"


class MetadataClient:
    """Metadata for the topics a caller uses, refreshed from the least loaded node, never older
    than what was already cached (see the module docstring). One asyncio loop; not thread-safe.

    ``learn_nodes``: add the brokers listed in accepted answers to the nodes asked (Kafka's
    behaviour); False asks only ``bootstrap`` (e.g. controllers answering for brokers that do not
    serve Metadata). ``rng``: ties between equally loaded nodes and backoff jitter (seed it in tests).
    """

    def __init__(self, bootstrap: Sequence[tuple[str, int]], *, refresh_backoff_ms: int = 100,
                 refresh_backoff_max_ms: int = 1000, request_timeout_ms: int = 3000,
                 refresh_timeout_ms: int = 10_000, learn_nodes: bool = True, rng: random.Random | None = None,
                 ssl_context=None):
        if not bootstrap:
            raise ValueError("at least one bootstrap address is needed")
        self.ssl_context = ssl_context  # mutual TLS (engine/node/tls.py client_context), or None
        if not 0 < refresh_backoff_ms <= refresh_backoff_max_ms:
            raise ValueError("need 0 < refresh_backoff_ms <= refresh_backoff_max_ms")
        self.refresh_backoff_ms, self.refresh_backoff_max_ms = refresh_backoff_ms, refresh_backoff_max_ms
        self.request_timeout_ms, self.refresh_timeout_ms = request_timeout_ms, refresh_timeout_ms
        self.learn_nodes = learn_nodes
        self._rng = rng or random.Random()
        self._nodes: dict[tuple[str, int], _Node] = {(h, int(p)): _Node((h, int(p)), None) for h, p in bootstrap}
        self._cache = MetadataCache()
        self.stats = MetadataClientStats()
        self.recent_stale: collections.deque[Staleness] = collections.deque(maxlen=RECENT_STALE_KEPT)
        self.addresses: dict[int, tuple[str, int]] = {}  # broker id -> address, from accepted answers

    # -- reading the cache --------------------------------------------------------------------------------

    def cached(self, topic: str, partition: int | None = None) -> TopicMetadata | PartitionMetadata | None:
        """The cached topic (``partition`` None) or partition, or None; never asks the cluster."""
        t = self._cache.topics.get(topic)
        if t is None or partition is None:
            return t
        return t.partitions.get(partition)

    def cached_topics(self) -> list[str]:
        return sorted(self._cache.topics)

    @property
    def nodes(self) -> list[tuple[str, int]]:
        return list(self._nodes)

    # -- asking -------------------------------------------------------------------------------------------

    async def refresh(self, topics: Iterable[str], *, timeout_ms: int | None = None,
                      node: tuple[str, int] | None = None) -> Judgement:
        """Ask until an answer for ``topics`` is neither stale nor in error, apply it, return its
        judgement (``unknown``: topics the cluster does not have). ``node``: ask this address first
        (added to the nodes if new). Raises StaleMetadataError, MetadataResponseError or
        NoNodeAvailableError at the deadline (``timeout_ms``, default ``refresh_timeout_ms``)."""
        names = tuple(dict.fromkeys(topics))
        loop = asyncio.get_running_loop()
        deadline_s = loop.time() + (self.refresh_timeout_ms if timeout_ms is None else timeout_ms) / 1000
        first = None if node is None else self._node_at(node)
        avoid: set[tuple[str, int]] = set()  # nodes that answered stale in this refresh: ask others first
        last: Judgement | Exception | None = None  # the last failure, for the error at the deadline
        last_stale: Staleness | None = None  # reported first: the most telling reason
        stale_answers = 0
        for attempt in itertools.count():  # ends at the deadline (_backoff_s returns None)
            target = first if attempt == 0 and first is not None else self._least_loaded(loop.time(), avoid)
            if target is not None:
                result = await self._attempt(target, names, deadline_s)
                if isinstance(result, Judgement) and not result.stale and not result.errors:
                    return result
                if isinstance(result, Judgement) and result.stale:
                    avoid.add(target.address)
                    last_stale, stale_answers = result.stale[0], stale_answers + 1
                last = result
            wait_s = self._backoff_s(attempt, loop.time(), deadline_s)
            if wait_s is None:
                break
            await asyncio.sleep(wait_s)
        raise self._give_up(names, last_stale or last, stale_answers)

    async def _attempt(self, target: _Node, names: tuple[str, ...], deadline_s: float) -> Judgement | Exception:
        """One request: the judgement of its answer (applied when clean) or the transport error."""
        try:
            answer = await self._ask(target, names, deadline_s)
        except _TRANSPORT_ERRORS as exc:
            self.stats.requests_failed += 1
            return exc
        judgement = self._cache.judge(answer, names, target.label)
        if judgement.stale:
            self.stats.answers_stale += 1
            self.recent_stale.extend(judgement.stale)
        elif judgement.errors:
            self.stats.answers_with_errors += 1
            if not all(code.retriable for code in judgement.errors.values()):
                raise self._give_up(names, judgement, 0)  # retrying cannot help
        else:
            self._cache.apply(judgement)
            self.stats.answers_accepted += 1
            if self.learn_nodes:
                await self._learn(answer.brokers)
        return judgement

    def _backoff_s(self, attempt: int, now_s: float, deadline_s: float) -> float | None:
        """Seconds to wait before the next attempt, or None when the deadline comes first."""
        base_ms = min(self.refresh_backoff_ms * (1 << min(attempt, 30)), self.refresh_backoff_max_ms)
        wait_s = base_ms * self._rng.uniform(1 - BACKOFF_JITTER, 1 + BACKOFF_JITTER) / 1000
        blocked = [n.blocked_until_s for n in self._nodes.values()]
        wait_s = max(wait_s, min(blocked) - now_s)  # every node in reconnect backoff: wait for the first
        return None if now_s + wait_s >= deadline_s else wait_s

    def _give_up(self, names: tuple[str, ...], last, stale_answers: int) -> MetadataClientError:
        if isinstance(last, Staleness):
            return StaleMetadataError(last, stale_answers)
        if isinstance(last, Judgement):
            errors = ", ".join(f"{n}: {c.name}" for n, c in sorted(last.errors.items()))
            return MetadataResponseError(f"metadata for {', '.join(names)} answered with errors ({errors})")
        return NoNodeAvailableError(f"no node answered Metadata for {', '.join(names)} before the deadline "
                                    f"(nodes: {', '.join(n.label for n in self._nodes.values())}; last error: "
                                    f"{type(last).__name__}: {last})")

    async def leader_for(self, topic: str, partition: int, *, timeout_ms: int | None = None) -> PartitionMetadata:
        """The partition's cached metadata (leader, leader epoch, ...), refreshed first when it is not
        cached or has no leader. UnknownTopicOrPartitionError / LeaderNotAvailableError otherwise."""
        p = self.cached(topic, partition)
        if p is None or p.leader < 0:
            await self.refresh([topic], timeout_ms=timeout_ms)
            p = self.cached(topic, partition)
        if p is None:
            t = self.cached(topic)
            raise UnknownTopicOrPartitionError(
                f"topic {topic!r} is not in the cluster" if t is None
                else f"topic {topic!r} has no partition {partition} ({len(t.partitions)} partitions)")
        if p.leader < 0:
            raise LeaderNotAvailableError(f"{topic}-{partition} has no leader (leader epoch {p.leader_epoch})")
        return p

    # -- nodes and connections ------------------------------------------------------------------------------

    def _node_at(self, address: tuple[str, int]) -> _Node:
        key = (address[0], int(address[1]))
        if key not in self._nodes:
            self._nodes[key] = _Node(key, None)
        return self._nodes[key]

    def _least_loaded(self, now_s: float, avoid: set[tuple[str, int]]) -> _Node | None:
        """Fewest requests in flight among nodes not in reconnect backoff (preferring ones not in
        ``avoid``); ties broken at random. None: every node is in backoff."""
        ready = [n for n in self._nodes.values() if n.blocked_until_s <= now_s]
        preferred = [n for n in ready if n.address not in avoid] or ready
        if not preferred:
            return None
        low = min(n.in_flight for n in preferred)
        return self._rng.choice([n for n in preferred if n.in_flight == low])

    async def _learn(self, brokers) -> None:
        """Replace the learned nodes with the brokers of an accepted answer (bootstrap ones stay)."""
        self.addresses = {int(b.node_id): (b.host, int(b.port)) for b in brokers}
        listed = {a: i for i, a in self.addresses.items()}
        for address, n in list(self._nodes.items()):
            if n.node_id is not None and address not in listed and n.in_flight == 0:
                del self._nodes[address]
                if n.conn is not None:
                    await n.conn.close()
        for address, broker_id in listed.items():
            if address not in self._nodes:
                self._nodes[address] = _Node(address, broker_id)

    async def _ask(self, n: _Node, names: tuple[str, ...], deadline_s: float) -> EpochMetadataResponse:
        loop = asyncio.get_running_loop()
        timeout_s = max(0.0, min(self.request_timeout_ms / 1000, deadline_s - loop.time()))
        n.in_flight += 1
        try:
            if n.conn is None or not n.conn.alive:
                n.conn = ClientConnection(*n.address, ssl_context=self.ssl_context)
                await asyncio.wait_for(n.conn.open(), timeout_s)
            body = kmetadata_req.MetadataRequest(
                topics=tuple(kmetadata_req.MetadataRequestTopic(topic_id=None, name=t) for t in names),
                allow_auto_topic_creation=False, include_topic_authorized_operations=False)
            answer = await asyncio.wait_for(n.conn.request(API_METADATA, METADATA_VERSION, body,
                                                           EpochMetadataResponse), timeout_s)
        except _TRANSPORT_ERRORS:
            await self._fail(n, loop.time())
            raise
        finally:
            n.in_flight -= 1
        n.failures = 0
        return answer

    async def _fail(self, n: _Node, now_s: float) -> None:
        """Drop the node's connection and keep it out of the choice for an exponential backoff."""
        n.failures += 1
        backoff_ms = min(self.refresh_backoff_ms * (1 << min(n.failures - 1, 30)), self.refresh_backoff_max_ms)
        n.blocked_until_s = now_s + backoff_ms / 1000
        conn, n.conn = n.conn, None
        if conn is not None:
            await conn.close()

    async def close(self) -> None:
        for n in self._nodes.values():
            conn, n.conn = n.conn, None
            if conn is not None:
                await conn.close()

    async def __aenter__(self) -> MetadataClient:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()


# ---- committed offsets with their epochs ------------------------------------------------------------------

INTERNAL_METADATA_VERSION = 1
OFFSETS_FILE_VERSION = 1


class CommittedOffset(NamedTuple):
    offset: int
    topic_epoch: int
    leader_epoch: int


def encode_internal_metadata(topic_epoch: int, leader_epoch: int) -> str:
    """The internal metadata string stored beside an offset: ``{"version":1,"topic_epoch":..,
    "leader_epoch":..}`` (versioned so a later layout is recognised, not misread)."""
    return json.dumps({"version": INTERNAL_METADATA_VERSION, "topic_epoch": int(topic_epoch),
                       "leader_epoch": int(leader_epoch)}, separators=(",", ":"))


def parse_internal_metadata(text: str, where: str) -> tuple[int, int]:
    """(topic epoch, leader epoch) from an internal metadata string; InvalidInternalMetadataError
    naming ``where`` and what is wrong otherwise."""
    try:
        doc = json.loads(text)
    except (TypeError, ValueError) as exc:
        raise InvalidInternalMetadataError(f"internal metadata of {where} is not JSON ({exc}): {text!r}") from None
    if not isinstance(doc, dict) or "version" not in doc:
        raise InvalidInternalMetadataError(f"internal metadata of {where} has no version: {text!r}")
    if type(doc["version"]) is not int or doc["version"] != INTERNAL_METADATA_VERSION:
        raise InvalidInternalMetadataError(f"internal metadata of {where} has unknown version {doc['version']!r} "
                                           f"(known: {INTERNAL_METADATA_VERSION})")
    epochs = (doc.get("topic_epoch"), doc.get("leader_epoch"))
    if not all(type(e) is int and e >= NO_EPOCH for e in epochs):
        raise InvalidInternalMetadataError(f"internal metadata of {where} has no valid epochs: {text!r}")
    return epochs


def _is_entry(e) -> bool:
    return (isinstance(e, dict) and isinstance(e.get("topic"), str) and type(e.get("partition")) is int
            and type(e.get("offset")) is int and e["offset"] >= 0 and isinstance(e.get("metadata"), str))


class OffsetStore:
    """One consumer group's committed offsets in ``directory/<group, %-quoted>.offsets.json``,
    replaced atomically (kraftlog.durable) on every commit. Layout::

        {"version": 1, "group": "<group>",
         "offsets": [{"topic": "t", "partition": 0, "offset": 42, "metadata": "<internal metadata>"}, ...]}

    The file is read once, at open: CorruptRecordError (with the path, and the position when the
    JSON does not parse) if it is not this layout; an entry whose internal metadata does not parse
    raises InvalidInternalMetadataError when that partition is used."""

    def __init__(self, directory: str | os.PathLike, group: str):
        self.group = group
        self.path = os.path.join(os.fspath(directory), urllib.parse.quote(group, safe="") + ".offsets.json")
        self._entries: dict[tuple[str, int], tuple[int, str]] = {}  # (topic, partition) -> (offset, metadata)
        with contextlib.suppress(FileNotFoundError), open(self.path, "rb") as f:
            self._entries = self._decode(f.read())

    def _decode(self, raw: bytes) -> dict[tuple[str, int], tuple[int, str]]:
        try:
            doc = json.loads(raw)
        except ValueError as exc:
            raise CorruptRecordError(f"offsets file of group {self.group!r} is not JSON: {exc}", path=self.path,
                                     position=getattr(exc, "pos", None)) from None
        if not isinstance(doc, dict) or doc.get("version") != OFFSETS_FILE_VERSION:
            raise CorruptRecordError(f"offsets file of group {self.group!r} is not version {OFFSETS_FILE_VERSION}",
                                     path=self.path)
        entries = doc.get("offsets")
        if not isinstance(entries, list):
            raise CorruptRecordError(f"offsets file of group {self.group!r} has no offsets list", path=self.path)
        out = {}
        for e in entries:
            if not _is_entry(e):
                raise CorruptRecordError(f"offsets file of group {self.group!r} has a malformed entry: {e!r}",
                                         path=self.path)
            out[(e["topic"], e["partition"])] = (e["offset"], e["metadata"])
        return out

    def _committed_epochs(self, topic: str, partition: int) -> tuple[int, int] | None:
        entry = self._entries.get((topic, partition))
        if entry is None:
            return None
        return parse_internal_metadata(entry[1], f"the offset committed for {topic}-{partition} in {self.path}")

    def _check_not_older(self, topic: str, partition: int, epochs: tuple[int, int], what: str) -> None:
        committed = self._committed_epochs(topic, partition)
        if committed is not None and is_stale(committed, epochs):
            raise InvalidInternalMetadataError(
                f"{what} {topic}-{partition} with topic epoch {epochs[0]} leader epoch {epochs[1]}, older than "
                f"the committed topic epoch {committed[0]} leader epoch {committed[1]} (group {self.group!r})")

    def commit(self, topic: str, partition: int, offset: int, *, topic_epoch: int, leader_epoch: int) -> None:
        """Store ``offset`` read under these epochs (durable when this returns)."""
        if offset < 0:
            raise ValueError(f"offset {offset} < 0")
        self._check_not_older(topic, partition, (topic_epoch, leader_epoch), "commit for")
        self._entries[(topic, partition)] = (offset, encode_internal_metadata(topic_epoch, leader_epoch))
        self._write()

    def seek(self, topic: str, partition: int, offset: int, metadata: str) -> CommittedOffset:
        """Check a position obtained elsewhere (an offset and its internal metadata string, as
        Kafka's OffsetAndMetadata carries it) against the committed one, and return it parsed;
        InvalidInternalMetadataError if the metadata does not parse or its epochs are older."""
        epochs = parse_internal_metadata(metadata, f"the seek to {topic}-{partition} offset {offset}")
        self._check_not_older(topic, partition, epochs, "seek to")
        return CommittedOffset(offset, *epochs)

    def fetch_committed(self, topic: str, partition: int) -> CommittedOffset | None:
        """(offset, topic epoch, leader epoch) committed for the partition, or None."""
        entry = self._entries.get((topic, partition))
        if entry is None:
            return None
        return CommittedOffset(entry[0], *self._committed_epochs(topic, partition))

    def _write(self) -> None:
        doc = {"version": OFFSETS_FILE_VERSION, "group": self.group,
               "offsets": [{"topic": t, "partition": p, "offset": o, "metadata": m}
                           for (t, p), (o, m) in sorted(self._entries.items())]}
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        write_atomically(self.path, json.dumps(doc, separators=(",", ":")).encode())
