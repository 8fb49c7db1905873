"""Proves the fault policy for committed metadata records (Kafka's metadata loading fault
handlers): a controller's image publisher stops on a record it cannot apply, naming the offset;
a broker's skips it with a count and goes on with every other record, in bulk and one by one;
an undecodable batch is skipped whole on a broker; a broker that skipped stops snapshotting.
On live processes: a broker following a Raft quorum skips a bad committed record with one log
line and a metric and keeps serving what follows; a controller stops, exit 1, one line naming
the offsets of the batch it cannot apply."""

from __future__ import annotations

import asyncio
import os
import re
import sys
import urllib.request
import uuid

import pytest

from kraftlog.engine.cli import main as cli
from kraftlog.engine.controller.controller import ImagePublisher, MetadataFaultError
from kraftlog.engine.log.log import Log
from kraftlog.engine.node.localcluster import LocalCluster, wait_until
from kraftlog.engine.node.node import SnapshottingPublisher
from kraftlog.engine.node.raftnode import RaftClient
from kraftlog.engine.records import layout
from kraftlog.engine.records import metadata as codec
from kraftlog.engine.records.batch import build_batch_from_values
from kraftlog.engine.records.wire import crc32c
from kraftlog.raft import wire
from tests.test_node_controller import CLUSTER_ID, NodeCluster


def _topic(name: str) -> bytes:
    return codec.encode_record("TopicRecord", 0, {"Name": name, "TopicId": uuid.uuid4()})


def _orphan_change() -> bytes:
    """Decodes, but names a topic nobody created: replay refuses it."""
    return codec.encode_record("PartitionChangeRecord", 0, {"TopicId": uuid.uuid4(), "PartitionId": 0, "Leader": 1})


BROKEN = None  # stands for a batch whose records section does not parse (CRC still valid)


def _broken_batch(values: list[bytes], base_offset: int) -> bytes:
    """A batch whose first record claims more bytes than the batch holds, CRC restamped: it
    reaches the image as committed bytes (a foreign writer, a bug), not as disk corruption."""
    batch = bytearray(build_batch_from_values(values, base_offset=base_offset))
    batch[layout.HEADER_SIZE] = 0x7E  # the record's length varint: 63 bytes, past the batch end
    crc = crc32c(bytes(batch[layout.ATTRIBUTES_OFFSET:]))
    batch[layout.CRC_OFFSET:layout.CRC_OFFSET + 4] = crc.to_bytes(4, "big")
    return bytes(batch)


def _log(*batches_of_values: list[bytes]) -> list:
    """Committed batches (as the log reads them back), one per list, at consecutive offsets; a
    list that ends with BROKEN becomes a batch that does not decode."""
    raw, offset = b"", 0
    for values in batches_of_values:
        if values[-1] is BROKEN:
            values = values[:-1]
            raw += _broken_batch(values, offset)
        else:
            raw += build_batch_from_values(values, base_offset=offset)
        offset += len(values)
    return list(wire.split_batches(raw))


def _names(publisher: ImagePublisher) -> list[str]:
    return sorted(n for n in ("a", "b", "c", "d") if publisher.image.topics.topic(n) is not None)


def _applied(publisher: ImagePublisher, batches: list, bulk: bool) -> ImagePublisher:
    """``batches`` delivered as raft delivers a run (bulk) or one commit at a time."""
    if bulk:
        publisher.handle_commits(batches)
    else:
        for batch in batches:
            publisher.handle_commit(batch)
    return publisher


BAD_RECORD = ([_topic("a")], [_topic("b"), _orphan_change(), _topic("c")], [_topic("d")])
BAD_BATCH = ([_topic("a")], [_topic("b"), _topic("x"), BROKEN], [_topic("c"), _topic("d")])


@pytest.mark.parametrize("bulk", [True, False], ids=["in-bulk", "one-by-one"])
def test_a_broker_skips_an_unappliable_record_counts_it_and_applies_the_rest(bulk, caplog):
    broker = _applied(ImagePublisher(fatal_faults=False), _log(*BAD_RECORD), bulk)
    assert _names(broker) == ["a", "b", "c", "d"]
    assert broker.apply_errors == 1 and broker.next_offset == 5
    lines = [r.getMessage() for r in caplog.records if "metadata apply error" in r.getMessage()]
    assert len(lines) == 1 and "PartitionChangeRecord at offset 2" in lines[0]


@pytest.mark.parametrize("bulk", [True, False], ids=["in-bulk", "one-by-one"])
def test_a_broker_skips_a_batch_that_does_not_decode_and_applies_every_other_batch(bulk, caplog):
    broker = _applied(ImagePublisher(fatal_faults=False), _log(*BAD_BATCH), bulk)
    # the bad batch holds "b" too: a batch is the unit that decodes or does not
    assert _names(broker) == ["a", "c", "d"]
    assert broker.apply_errors == 1 and broker.next_offset == 5
    lines = [r.getMessage() for r in caplog.records if "metadata apply error" in r.getMessage()]
    assert len(lines) == 1 and "offsets 1-2" in lines[0]


@pytest.mark.parametrize("log_batches", [BAD_RECORD, BAD_BATCH], ids=["record", "batch"])
@pytest.mark.parametrize("bulk", [True, False], ids=["in-bulk", "one-by-one"])
def test_a_controller_stops_at_the_batch_it_cannot_apply_and_names_it(log_batches, bulk):
    controller = ImagePublisher()
    with pytest.raises(MetadataFaultError) as info:
        _applied(controller, _log(*log_batches), bulk)
    assert "offsets 1-" in str(info.value)
    # everything before the fault is applied; nothing after it is
    assert _names(controller) == ["a"] and controller.next_offset == 1


def test_a_broker_that_skipped_a_record_writes_no_more_snapshots(caplog):
    class Snapshotter:
        commits = 0

        def on_commit(self, size_bytes):
            self.commits += 1

    broker = SnapshottingPublisher(fatal_faults=False)
    broker.snapshotter = Snapshotter()
    first, *rest = _log(*BAD_RECORD)
    broker.handle_commit(first)
    assert broker.snapshotter.commits == 1
    for batch in rest:
        broker.handle_commit(batch)
    assert broker.snapshotter.commits == 1 and broker.apply_errors == 1
    assert sum("snapshots disabled" in r.getMessage() for r in caplog.records) == 1


# ---- on live processes ----------------------------------------------------------------------------


class _RaftQuorumAndBroker(LocalCluster):
    """Three bare Raft log nodes (`python -m kraftlog.engine.node.raftnode`, which take any record
    over Produce: the Raft API a bad record can come through) and broker 4 (`kraftlog node run
    --process-roles broker`) following their log as an observer."""

    def __init__(self, directory: str):
        super().__init__(directory, 3, observers=(4,))

    def command(self, i: int, listen_fd: int) -> list[str]:
        if i in self.voters:
            return [sys.executable, "-m", "kraftlog.engine.node.raftnode", "--node-id", str(i), "--voters",
                    self.voters_arg, "--dir", self.dir_of(i), "--listen-fd", str(listen_fd),
                    "--cluster-id", CLUSTER_ID]
        return [sys.executable, "-m", "kraftlog.engine.cli.main", "node", "run", "--node-id", str(i),
                "--process-roles", "broker", "--controller-quorum-voters", self.voters_arg, "--dir", self.dir_of(i),
                "--listen-fd", str(listen_fd), "--metrics-port", "0"]


def _get(url: str) -> str:
    return urllib.request.urlopen(url, timeout=30).read().decode()


@pytest.mark.slow
def test_a_live_broker_skips_a_bad_committed_record_and_keeps_serving(tmp_path):
    cluster = _RaftQuorumAndBroker(str(tmp_path))
    try:
        assert cli.main(["storage", "format", "--cluster-id", CLUSTER_ID, "--node-id", "4",
                         "--dir", cluster.dir_of(4)]) == 0
        cluster.start_all()

        async def scenario():
            client = RaftClient(cluster.voters)
            try:
                await client.propose([_topic("a")], timeout_ms=30_000)
                await client.propose([_orphan_change()], timeout_ms=30_000)
                return await client.propose([_topic("c")], timeout_ms=30_000)
            finally:
                await client.close()

        last = asyncio.run(scenario())
        # no controller here, so the broker never passes its initial catch-up and answers no
        # Metadata: its metrics say how far its image got and what it skipped
        async def image_past(offset: int):
            found = re.search(r"metrics on http://[\d.]+:(\d+)/metrics", cluster.stderr_of(4))
            if found is None:
                return None
            metrics = await asyncio.to_thread(_get, f"http://127.0.0.1:{found.group(1)}/metrics")
            image = re.search(r"^kraftlog_image_offset ([\d.e+]+)$", metrics, re.M)
            return image is not None and float(image.group(1)) >= offset and metrics

        metrics = asyncio.run(wait_until(lambda: image_past(last), 60, "the broker's image passing the bad record"))
        assert re.search(r"^kraftlog_metadata_apply_errors_total 1\.0$", metrics, re.M), metrics
        err = cluster.stderr_of(4)
        lines = [line for line in err.splitlines() if "metadata apply error" in line]
        assert len(lines) == 1 and "PartitionChangeRecord at offset" in lines[0], err[-3000:]
        assert cluster.procs[4].poll() is None  # still running
    finally:
        cluster.close()


@pytest.mark.slow
def test_a_controller_stops_on_a_bad_committed_record_with_one_line_naming_it(tmp_path):
    """A single combined node whose log holds a batch that does not decode (written behind its
    back while it was stopped) exits non-zero once it commits that batch, naming its offsets."""
    cluster = NodeCluster(str(tmp_path), 1)
    try:
        cluster.format()
        cluster.start_all()
        cluster.stop_all()  # asserts clean exits
        log = Log.open(os.path.join(cluster.dir_of(1), "__cluster_metadata-0"))
        end, epoch = log.end_offset, log.last_fetched_epoch
        batch = bytearray(_broken_batch([_topic("x"), _topic("y")], end))
        layout.set_partition_leader_epoch(batch, 0, epoch)
        batch[layout.CRC_OFFSET:layout.CRC_OFFSET + 4] = crc32c(bytes(batch[layout.ATTRIBUTES_OFFSET:])).to_bytes(4, "big")
        log.append_as_follower(bytes(batch))
        log.flush()
        log.close()
        cluster.start(1, wait_ready=False)
        assert cluster.procs[1].wait(120) == 1
        err = cluster.stderr_of(1)
        assert "Traceback" not in err
        last = err.strip().splitlines()[-1]
        assert last.startswith("kraftlog node run: error:") and f"offsets {end}-{end + 1} cannot be applied" in last, err
    finally:
        cluster.close()
