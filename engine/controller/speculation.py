"""The active controller replays its own writes once.

Before the active controller proposes records it replays them onto its image (validation.py's
``check_records``: it never proposes what it could not replay). It used to throw that replay away
and, once the records committed, decode and replay the same bytes again: on a CreateTopics run
the second replay was ~1/5 of the active controller's CPU. Kafka's QuorumController replays a
write once, when it appends it, and never again at commit. Here the check's replay is kept, as a
*speculation*: the delta and the image it gives, with the offsets the records will have. When the
records commit, ImagePublisher (controller.py) publishes that image instead of replaying.

A speculation is only a cache: whenever it is not certain to equal what the replay of the
committed bytes would give, it is dropped and the commit is replayed as on any other node. It is
certain when all of these hold:

    chain       each speculation was checked against the image of the one before it (the first:
                against the published image, at the publisher's next offset); ``add`` refuses
                any other, and the check's base image is ``tail_image``
    offsets     the records' offsets were predicted as the leader's log end plus what its driver
                had queued (RaftDriver.append_point) and the committed batches cover exactly the
                speculated ranges, from the publisher's next offset on
    epoch       every committed batch carries the leader epoch the records were proposed in: in
                Raft an (offset, epoch) pair names one entry, so these are the proposed records
    no failure  no proposal of the chain failed (a failed append shifts the offsets of later
                proposals onto records other than the ones speculated: the failure drops the
                chain from its future's callback, which asyncio runs before any later network
                event, and ``take`` checks again)
    no change   no leader change, snapshot load or held transaction came in between

The image published is the speculation's with the provenance the commit gives (its last offset,
epoch and the batch's maxTimestamp, which the leader set at append time). Each speculation is
published on its own, in order, with its own delta, even when one delivery commits several.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from kraftlog.engine.image.image import MetadataDelta, MetadataImage, Provenance
from kraftlog.engine.image.loader import LoadManifest
from kraftlog.engine.records.layout import MAX_TIMESTAMP_OFFSET


@dataclass(frozen=True, slots=True)
class Speculation:
    """Records proposed at offsets [base_offset, end_offset) in ``epoch``, and their replay."""

    base_offset: int
    end_offset: int
    epoch: int
    delta: MetadataDelta
    image: MetadataImage
    manifest: LoadManifest
    futures: tuple[asyncio.Future, ...]

    def failed(self) -> bool:
        return any(f.done() and (f.cancelled() or f.exception() is not None) for f in self.futures)


class SpeculationChain:
    """The active controller's speculations not yet committed, oldest first (module docstring)."""

    def __init__(self) -> None:
        self._chain: deque[Speculation] = deque()
        self.adopted = 0  # speculations published instead of replayed
        self.dropped = 0  # speculations dropped (their commits replayed)

    def __len__(self) -> int:
        return len(self._chain)

    def tail_image(self, published: MetadataImage) -> MetadataImage:
        """The image the next write is checked against: the last speculation's, else ``published``."""
        return self._chain[-1].image if self._chain else published

    def add(self, spec: Speculation, next_offset: int) -> None:
        """Keep ``spec`` if it continues the chain (from ``next_offset``, the publisher's, when the
        chain is empty); else drop the chain, ``spec`` with it."""
        expected = self._chain[-1].end_offset if self._chain else next_offset
        if spec.base_offset != expected or spec.end_offset <= spec.base_offset:
            self.clear()
            self.dropped += 1
            return
        self._chain.append(spec)
        for future in spec.futures:
            future.add_done_callback(self._on_proposal_done)

    def _on_proposal_done(self, future: asyncio.Future) -> None:
        if future.cancelled() or future.exception() is not None:
            self.clear()

    def clear(self) -> None:
        self.dropped += len(self._chain)
        self._chain.clear()

    def take(self, batches: Sequence, next_offset: int) -> list[tuple[Speculation, Provenance]] | None:
        """The speculations committed by ``batches`` (consecutive committed batches starting at
        ``next_offset``), each with the provenance of its last record, to publish in order; None
        (and the chain dropped) unless they are certain to equal the batches' replay."""
        chain = self._chain
        end = batches[-1].next_offset
        count = 0
        for spec in chain:
            if spec.end_offset > end:
                break
            count += 1
        taken = [chain[k] for k in range(count)]
        certain = (count > 0 and batches[0].base_offset == next_offset == taken[0].base_offset
                   and taken[-1].end_offset == end
                   and all(b.epoch == taken[0].epoch and not b.control for b in batches)
                   and all(s.epoch == taken[0].epoch and not s.failed() for s in taken))
        if not certain:
            self.clear()
            return None
        for _ in range(count):
            chain.popleft()
        self.adopted += count
        return [(s, Provenance(s.end_offset - 1, s.epoch, _max_timestamp_ms(_holding(batches, s.end_offset - 1))))
                for s in taken]


def adopted_image(spec: Speculation, provenance: Provenance) -> MetadataImage:
    return dataclasses.replace(spec.image, provenance=provenance)


def _holding(batches: Sequence, offset: int):
    """The batch of ``batches`` (consecutive, ascending) that holds ``offset``."""
    for b in batches:
        if b.base_offset <= offset < b.next_offset:
            return b
    raise ValueError(f"offset {offset} is in none of the batches")


def _max_timestamp_ms(batch) -> int:
    """A record batch v2's maxTimestamp (int64 at byte 35 of its header, engine/records/layout.py)."""
    return int.from_bytes(bytes(batch.raw[MAX_TIMESTAMP_OFFSET:MAX_TIMESTAMP_OFFSET + 8]), "big", signed=True)
