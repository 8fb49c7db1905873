"""Proves the cluster benchmark rows (bench/rows_cluster.py) measure what they claim, at small
sizes: the expected Metadata answer is the workload's own assignment (checked against an image
replayed from the workload's records), the answer check refuses a wrong leader or epoch, the
restart row times a real broker that loaded its snapshot, and the CreateTopics row creates real
topics on a real 3-controller quorum beside the Produce peer. Both rows are registered with the
report."""

from __future__ import annotations

import dataclasses

import pytest
from kio.schema.metadata.v12 import request as md_req
from kio.static.primitive import i32

from kraftlog.bench import report as harness
from kraftlog.bench import rows_cluster as rc
from kraftlog.engine.broker.metadata_answer import answer_metadata
from kraftlog.engine.image import workload as wl
from kraftlog.engine.image.loader import Loader
from kraftlog.engine.records import batch


def _image(shape: wl.WorkloadShape):
    values = list(wl.generate(shape))
    return Loader().replay(b"".join(batch.build_batch_from_values(values[i:i + 1000], base_offset=i)
                                    for i in range(0, len(values), 1000)))


def _ask(image, name: str):
    req = md_req.MetadataRequest(topics=(md_req.MetadataRequestTopic(topic_id=None, name=name),),
                                 allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    return answer_metadata(image, req, cluster_id=rc.CLUSTER_ID, controller_id=1)


def test_expected_answer_is_the_replayed_image_and_wrong_answers_are_refused():
    """expected_topic (from the workload's assignment) equals what the replayed image answers; a
    changed leader, leader epoch or a missing partition makes answer_matches refuse it."""
    shape = wl.WorkloadShape.scaled(2000)
    image = _image(shape)
    for t in (0, shape.topics // 2, shape.topics - 1):
        want = rc.expected_topic(shape, t)
        view = image.topics.topic(want.name)
        assert view is not None and view.topic_id == want.topic_id
        got = sorted((p.partition_id, p.leader, p.leader_epoch, tuple(p.replicas), tuple(p.isr))
                     for p in image.topics.partitions_of(want.name))
        assert tuple(got) == want.partitions
        assert rc.answer_matches(_ask(image, want.name), want)

    want = rc.expected_topic(shape, 7)
    md = _ask(image, want.name)
    topic = md.topics[0]
    first = topic.partitions[0]
    for changed in (dataclasses.replace(first, leader_id=i32(int(first.leader_id) + 1)),
                    dataclasses.replace(first, leader_epoch=i32(5))):
        wrong = dataclasses.replace(md, topics=(dataclasses.replace(topic, partitions=(changed, *topic.partitions[1:])),))
        assert not rc.answer_matches(wrong, want)
    short = dataclasses.replace(md, topics=(dataclasses.replace(topic, partitions=topic.partitions[1:]),))
    assert not rc.answer_matches(short, want)
    assert not rc.answer_matches(_ask(image, wl.topic_name(8)), want)


def test_both_rows_are_registered_with_the_report():
    """`kraftlog bench --only broker.restart_1m_s` (and the controller row) find these rows."""
    rows = harness.discover().rows
    assert rows["broker.restart_1m_s"] is rc.broker_restart
    assert rows["broker.restart_1m_tail_s"] is rc.broker_restart_tail
    assert rows["controller.create_topics_per_s"] is rc.create_topics


@pytest.mark.slow
def test_restart_row_times_a_broker_that_loaded_its_snapshot():
    """One restart of a broker on a 10,000-partition image beside the one-topic peer: the row keeps
    the contract, READY comes before the right answer, and the broker's log says it loaded its
    snapshot (so the answer came from the image, not from a fetch)."""
    r = harness.check_row(rc.restart_row(10_000, 1), "broker.restart_1m_s")
    assert r["scale"] == 10_000 and r["runs"] == 1
    assert 0 < r["ready_s"] <= r["value"] < rc.ANSWER_TIMEOUT_S
    assert 0 < r["peer_ready_s"] <= r["peer_value"] < rc.ANSWER_TIMEOUT_S
    assert r["snapshot_load_ms"] is not None and r["snapshot_load_ms"] >= 0
    assert r["import_s"] > 0 and r["interpreter_s"] > 0
    assert r["ratio"] == pytest.approx(r["peer_value"] / r["value"])


@pytest.mark.slow
def test_tail_restart_row_waits_for_the_tail_beside_the_restart_without_it():
    """The tail row on a 10,000-partition image: the broker's log holds the 20 MiB production tail
    after its snapshot (hundred thousand records and more), every timed answer is the controller's
    and at the tail's end (so the tail was replayed, not just the snapshot loaded), and the peer is
    the same restart without the tail."""
    r = harness.check_row(rc.restart_tail_row(10_000, 1), "broker.restart_1m_tail_s")
    assert r["scale"] == 10_000 and r["tail_bytes"] == rc.TAIL_BYTES and r["tail_records"] > 100_000
    assert 0 < r["ready_s"] <= r["value"] < rc.ANSWER_TIMEOUT_S and 0 < r["peer_value"] < rc.ANSWER_TIMEOUT_S
    assert r["answer_after_ready_s"] > 0 and r["snapshot_load_ms"] is not None
    assert r["ratio"] == pytest.approx(r["peer_value"] / r["value"])


def test_a_tail_restart_answer_counts_only_at_the_tail_end():
    """answered_right refuses the right topic from an image short of the tail's end."""
    cluster = rc.TailRestartCluster.__new__(rc.TailRestartCluster)
    shape = wl.WorkloadShape.scaled(1000)
    image = _image(shape)
    cluster.want, cluster.want_known = rc.expected_topic(shape, 7), True
    md = _ask(image, wl.topic_name(7))
    cluster.tail_end = int(md.metadata_offset) + 1
    assert cluster.answered_right(md)
    cluster.tail_end += 1
    assert not cluster.answered_right(md)
    cluster.tail_end -= 1
    cluster.want = rc.expected_topic(shape, 8)
    assert not cluster.answered_right(md)


@pytest.mark.slow
def test_create_topics_row_creates_topics_and_runs_the_produce_peer():
    """One run of 2 CreateTopics requests (200 topics) and the same records through Produce on 3
    controllers + 3 brokers; every created topic is then on every broker (met)."""
    r = harness.check_row(rc.create_topics_row(1, 2), "controller.create_topics_per_s")
    assert r["met"] is True
    assert r["topics_per_run"] == 2 * rc.REQUEST_TOPICS
    assert r["value"] > 0 and r["peer_value"] > 0
    assert r["partitions_per_s"] == pytest.approx(r["value"] * rc.PARTITIONS_PER_TOPIC)
    assert r["ratio"] == pytest.approx(r["value"] / r["peer_value"])
