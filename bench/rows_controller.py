"""Report row: the active controller fencing a broker that leads 10,000 partitions.

The image is the reference workload shape (10 partitions per topic, RF 3, round-robin replicas)
with 30,000 replicas per broker, so broker 0 leads ~10,000 partitions and follows ~20,000:
1M partitions on 99 brokers with --full, 90,000 on 9 with --quick. One fencing is: find the
broker's partitions in the image's columns, elect and shrink ISRs (replication.fence_changes),
encode the PartitionChangeRecords plus the FenceBrokerRecord, pack them in record batches of
10,000 (the controller's proposals) and replay those into the next image (what every controller
does once they commit). Raft's commit round is not in it.

The peer is the same decision made one partition at a time: a PartitionRegistration per
partition, replication.build_change (Kafka's PartitionChangeBuilder steps), the generic codec per
record, then the same batches and replay.
"""

from __future__ import annotations

from functools import cache

from kraftlog.bench.timing import measure, row
from kraftlog.engine.controller import replication as rp
from kraftlog.engine.image import workload as wl
from kraftlog.engine.image.loader import Loader
from kraftlog.engine.records import batch
from kraftlog.engine.records import metadata as codec

REPLICAS_PER_BROKER = 30_000
RECORDS_PER_BATCH = 10_000  # the controller's max_records_per_batch
FENCED_BROKER = 0
GOAL_S = 0.25  # "well under a second of controller CPU"


def shape_for(quick: bool) -> wl.WorkloadShape:
    return wl.WorkloadShape(topics=9_000 if quick else 100_000, partitions_per_topic=10,
                            replicas_per_broker=REPLICAS_PER_BROKER)


@cache
def base_image(quick: bool):
    values = list(wl.generate(shape_for(quick)))
    region = b"".join(batch.build_batch_from_values(values[i:i + 5000], base_offset=i, timestamp_ms=0)
                      for i in range(0, len(values), 5000))
    return Loader().replay(region)


def _fence_record(image, broker: int) -> bytes:
    return codec.encode_record("FenceBrokerRecord", 0, {"Id": broker, "Epoch": image.cluster.brokers[broker].epoch})


def _replay(image, values: list[bytes]):
    base = image.provenance.offset + 1
    region = b"".join(batch.build_batch_from_values(values[i:i + RECORDS_PER_BATCH], base_offset=base + i,
                                                    timestamp_ms=0)
                      for i in range(0, len(values), RECORDS_PER_BATCH))
    return Loader(image).replay(region)


def fence_bulk(image, broker: int = FENCED_BROKER):
    """Ours: the columnar plan and the template encoder."""
    values = rp.encode_changes(rp.fence_changes(image, broker)) + [_fence_record(image, broker)]
    return _replay(image, values)


def fence_scalar(image, broker: int = FENCED_BROKER):
    """The peer: one PartitionRegistration and one build_change per partition, the generic codec."""
    rules = rp.rules_for(image, remove=broker)
    values = []
    for prow in rp.rows_with_isr_member(image.topics, broker).tolist():
        part = image.topics.registration(prow)
        change = rp.build_change(part, [b for b in part.isr if b != broker], rules)
        if change is not None:
            values.append(codec.encode_record("PartitionChangeRecord", rules.record_version, change))
    values.append(_fence_record(image, broker))
    return _replay(image, values)


def leaderships(image, broker: int = FENCED_BROKER) -> int:
    return len(rp.rows_led_by(image.topics, broker))


def row_fence_move(quick: bool) -> dict:
    image = base_image(quick)
    led = leaderships(image)
    after = fence_bulk(image)
    assert leaderships(after) == 0 and after.cluster.brokers[FENCED_BROKER].fenced
    changes = len(rp.fence_changes(image, FENCED_BROKER))
    median, spread = measure(lambda: fence_bulk(image), repeat=5 if quick else 7)
    peer_median, _ = measure(lambda: fence_scalar(image), repeat=1 if quick else 3)
    partitions = image.topics.partition_count
    return row(
        "controller.fence_move_10k_s", "s", median, spread,
        peer="the same decisions one partition at a time (build_change + generic codec), same replay",
        peer_value=peer_median, higher_is_better=False,
        goal=f"<= {GOAL_S} s to move ~10,000 leaderships off a fenced broker", met=median <= GOAL_S,
        notes=(f"image of {partitions:,} partitions on {len(image.cluster.brokers)} brokers; broker "
               f"{FENCED_BROKER} led {led:,} and was in {changes:,} ISRs: {changes:,} PartitionChangeRecords + "
               f"FenceBrokerRecord, planned, encoded, batched by {RECORDS_PER_BATCH:,} and replayed"),
        **({"scale": partitions} if quick else {}),  # partitions in the image at the quick size
    )


ROWS = {"controller.fence_move_10k_s": row_fence_move}
