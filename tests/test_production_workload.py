"""Proves the production-shaped workload: its PartitionChangeRecord template writes what the generic
codec writes; a generated log (base + a controller's tail: restarts, an outage, ISR flaps, topic
deletes and re-creates, security records, failovers) applies through the loader without an error
and gives the generic per-record replay's image, with the facts the generator says it left behind
(a re-created name carries only its new configs); `kraftlog gen --shape production` writes it."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from image_summary import full_summary

from kraftlog.engine.image import production as pr
from kraftlog.engine.image import versions
from kraftlog.engine.image import workload as wl
from kraftlog.engine.image.image import MetadataImage
from kraftlog.engine.image.loader import Loader, decode
from kraftlog.engine.image.writer import write_image
from kraftlog.engine.records import batch
from kraftlog.engine.records import metadata as codec

pytestmark = pytest.mark.twin

SHAPE = pr.ProductionShape(wl.WorkloadShape.scaled(3000, replicas_per_broker=300), tail_bytes=4 << 20,
                           duration_ms=1_200_000, seed=5)


@pytest.fixture(scope="module")
def generated():
    return pr.production_log(SHAPE)


def test_the_partition_change_template_writes_what_the_generic_codec_writes():
    rng = np.random.default_rng(3)
    n = 40
    tids = rng.integers(0, 256, (n, 16), dtype=np.uint8)
    pids = rng.integers(0, 5000, n).astype(np.int32)
    leaders = rng.integers(-1, 300, n).astype(np.int32)
    counts = rng.integers(0, 4, n)
    isr = np.where(np.arange(3)[None, :] < counts[:, None], rng.integers(0, 300, (n, 3)), -1).astype(np.int32)
    version = versions.partition_change_record_version(versions.LATEST)
    for with_leader, with_isr in ((True, True), (True, False), (False, True)):
        got = pr.partition_change_values(version, tids, pids, leaders if with_leader else None,
                                         isr if with_isr else None, counts if with_isr else None)
        for i in range(n):
            data = {"TopicId": codec.decode_record(got[i]).data["TopicId"], "PartitionId": int(pids[i])}
            assert bytes(tids[i]) == data["TopicId"].bytes
            if with_leader:
                data["Leader"] = int(leaders[i])
            if with_isr:
                data["Isr"] = isr[i, :counts[i]].tolist()
            assert got[i] == codec.encode_record("PartitionChangeRecord", version, data), (with_leader, with_isr, i)


def test_the_tail_has_every_event_a_controller_writes(generated):
    _, tail, facts = generated
    assert {"NoOpRecord", "BrokerDown", "RegisterBrokerRecord", "Unfence", "AlterPartition", "PreferredElection",
            "IsrShrink", "IsrExpand", "CreateTopics", "RemoveTopicRecord", "ProducerIdsRecord", "Admin",
            "FeatureLevelRecord"} <= set(facts.kinds)
    assert facts.recreated, "some deleted name was created again"
    epochs = {int(e) for e in batch.scan_batches(tail, 0, len(tail), verify_crc=True).partition_leader_epochs}
    assert epochs == {1, 2, 3}  # two controller failovers
    # One batch per controller event: a NoOp every 500 ms of the simulated 1200 s, each alone.
    assert facts.kinds["NoOpRecord"] == SHAPE.duration_ms // pr.NOOP_INTERVAL_MS + 1
    assert facts.batches > facts.kinds["NoOpRecord"]


def test_a_production_log_applies_cleanly_and_equals_the_generic_replay(generated):
    base, tail, facts = generated
    loader = Loader()  # no skip_errors: any inapplicable record fails the test
    loader.replay(base)
    manifests = []
    loader.publishers.append(lambda d, i, m: manifests.append(m))
    image = loader.replay(tail)
    assert manifests[0].skipped_records == 0 and manifests[0].records == facts.records
    # the generic per-record path, the oracle
    delta = MetadataImage.empty().delta()
    for buf in (base, tail):
        cols = decode(buf)
        for i in range(len(cols.offsets)):
            pos, length = int(cols.value_pos[i]), int(cols.value_len[i])
            record = codec.decode_record(cols.data, pos, pos + length)
            delta.replay(record.record_type, record.data, topic_epoch=int(cols.offsets[i]))
    assert full_summary(image) == full_summary(delta.apply())
    # the facts the generator reports
    assert len(image.cluster.brokers) == SHAPE.base.brokers
    assert {b for b, r in image.cluster.brokers.items() if r.fenced} == facts.fenced
    assert not any(r.in_controlled_shutdown for r in image.cluster.brokers.values() if not r.fenced)
    for name, tid in facts.live_topics.items():
        assert image.topics.topic(name).topic_id == tid
    assert all(image.topics.topic(name) is None for name in facts.deleted)
    for name, configs in facts.recreated.items():
        assert dict(image.configs.get((2, name), {})) == configs, name
    assert image.topics.live_topics == SHAPE.base.topics - len(facts.deleted & set(_base_names())) + sum(
        not n.startswith("topic-") for n in facts.live_topics)


def _batches(values: list[bytes], first_offset: int) -> bytes:
    return b"".join(batch.build_batch_from_values(values[i:i + 500], base_offset=first_offset + i)
                    for i in range(0, len(values), 500))


def _base_names() -> list[str]:
    return [wl.topic_name(t) for t in range(SHAPE.base.topics)]


def test_gen_production_writes_a_log_that_loads(tmp_path):
    directory = str(tmp_path / "meta")
    cli = [sys.executable, "-m", "kraftlog.engine.cli.main", "gen", directory, "--partitions", "3000"]
    proc = subprocess.run([*cli, "--shape", "production", "--tail-bytes", "300000", "--checkpoint"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    from kraftlog.engine.image.logload import load_log_dir
    image = load_log_dir(directory)
    assert image.provenance.offset > 1 + 1 + 2 * 3 + 300 * 11  # past the base
    assert "production tail of" in proc.stdout
    bad = subprocess.run([*cli, "--tail-bytes", "5"], capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "--shape production" in bad.stderr


def test_the_tail_rows_are_in_the_bench_report():
    from kraftlog.bench import report

    rows = report.discover().rows
    assert {"image.tail_replay_records_per_s", "image.noop_replay_records_per_s"} <= set(rows)


def test_snapshot_plus_tail_and_any_region_split_give_the_full_replay(generated):
    """The streams and runs the loader forms do not depend on where a region or a snapshot cuts the log."""
    base, tail, facts = generated
    full = Loader()
    full.replay(base)
    expected = full_summary(full.replay(tail))
    snapshot = Loader()
    snapshot.load_snapshot(_batches(write_image(Loader().replay(base)).values, 1), end_offset=SHAPE.base.base_records,
                           epoch=1)
    assert full_summary(snapshot.replay(tail)) == expected
    scan = batch.scan_batches(tail, 0, len(tail), verify_crc=False)
    cuts = [int(p) for p in scan.positions[::37]] + [len(tail)]
    regions = [tail[a:b] for a, b in zip(cuts, cuts[1:], strict=False) if b > a]
    split = Loader()
    split.replay(base)
    assert full_summary(split.replay_regions(regions)) == expected


# Record types a production tail holds, every one replayed from the decoded columns (in bulk runs
# or one by one): the tail must hold each of them, so a kind the generator stops writing is noticed.
COLUMN_REPLAYED = {"NoOpRecord", "TopicRecord", "PartitionRecord", "PartitionChangeRecord",
                   "RegisterBrokerRecord", "BrokerRegistrationChangeRecord", "ProducerIdsRecord", "ConfigRecord",
                   "RemoveTopicRecord", "FeatureLevelRecord", "AccessControlEntryRecord",
                   "RemoveAccessControlEntryRecord", "ClientQuotaRecord",
                   "UserScramCredentialRecord", "DelegationTokenRecord", "RemoveDelegationTokenRecord"}


def test_no_record_of_a_production_tail_takes_the_generic_codec(generated):
    """NoOps are counted, never decoded; creates, partition changes (short events too), broker
    registrations and changes, producer ids, configs, topic deletes, feature levels, ACLs, client
    quotas, SCRAM credentials and delegation tokens replay from the decoded columns: not one record
    of the tail reaches the generic codec (manifest.generic_types is the tripwire: it names any kind
    that falls back)."""
    base, tail, facts = generated
    loader = Loader()
    loader.replay(base)
    manifests = []
    loader.publishers.append(lambda d, i, m: manifests.append(m))
    loader.replay(tail)
    cols = decode(tail)
    in_tail = {codec.BY_API_KEY[k].name for k in np.unique(cols.api_keys).tolist()}
    assert in_tail >= COLUMN_REPLAYED  # the tail really exercises every moved kind
    generic = manifests[0].generic_types
    assert sum(generic.values()) == manifests[0].generic_records
    assert manifests[0].generic_records == 0, generic
