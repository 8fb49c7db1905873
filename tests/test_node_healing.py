"""Proves that partitions heal on real processes (issue #20, item 5): 3 controllers + 3 brokers
(`kraftlog node run`), topics with replication factor 3 (and 2).

- a rolling restart of the three brokers (the first killed with SIGKILL, the others stopped with
  SIGTERM: controlled shutdown) ends with every partition led by its preferred replica and a full
  ISR: a restarted broker rejoins the ISRs as soon as it is unfenced, and the active controller
  hands preferred leaderships back (a short leader.imbalance.check.interval.seconds here);
- with auto.leader.rebalance.enable=false (set in a properties file, Kafka's key) the ISRs still
  heal but leaderships stay where they moved, until ElectLeaders (PREFERRED, sent to a broker,
  which forwards it) moves them back; a partition left without a leader by two stopped brokers
  while its only other replica was down gets one back through ElectLeaders UNCLEAN.

Timeouts are the defaults or longer (a 6 s broker session), so a loaded machine does not fence a
live broker; every wait polls for the state it needs.
"""

from __future__ import annotations

import asyncio
import datetime
import signal
import sys

import pytest
from kio.schema.elect_leaders.v2 import request as el_req
from kio.schema.elect_leaders.v2 import response as el_resp
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i32

from kraftlog.engine.controller.replication import PREFERRED, UNCLEAN
from tests.test_node_brokers import BROKERS, RACKS, Conns, _all_live, _create
from tests.test_node_controller import NodeCluster, _ask, wait_until

pytestmark = pytest.mark.slow

SESSION_TIMEOUT_MS = 6000
WAIT_S = 60  # a bound for each state to arrive, not a pace


class HealingCluster(NodeCluster):
    """3 controllers (1-3) and 3 brokers (BROKERS); ``settings``: extra properties for every node."""

    def __init__(self, directory: str, settings: dict[str, str]):
        super().__init__(directory, 3, observers=BROKERS)
        self.settings = settings

    def command(self, i: int, listen_fd: int) -> list[str]:
        config = f"{self.directory}/node{i}.properties"
        with open(config, "w") as f:
            f.writelines(f"{k}={v}\n" for k, v in self.settings.items())
        roles = ["--process-roles", "broker", "--rack", RACKS[i]] if i in BROKERS else []
        return [sys.executable, "-m", "kraftlog.engine.cli.main", "node", "run", "--node-id", str(i),
                "--controller-quorum-voters", self.voters_arg, "--dir", self.dir_of(i), "--listen-fd", str(listen_fd),
                "--config", config, "--session-timeout-ms", str(SESSION_TIMEOUT_MS), "--heartbeat-interval-ms", "500",
                *roles]


def _partitions(md) -> dict[tuple[str, int], tuple[int, list[int], set[int]]]:
    """(topic, partition) -> (leader, replicas, ISR) of a Metadata answer."""
    return {(t.name, int(p.partition_index)): (int(p.leader_id), [int(b) for b in p.replica_nodes],
                                                {int(b) for b in p.isr_nodes})
            for t in md.topics for p in t.partitions}


def _healed(parts) -> bool:
    return bool(parts) and all(leader == replicas[0] and isr == set(replicas)
                               for leader, replicas, isr in parts.values())


async def _state(conns: Conns, at: int, predicate, what: str):
    """Poll broker ``at``'s Metadata until ``predicate(partitions)`` holds; the partitions."""
    async def check():
        parts = _partitions(await conns.metadata(at))
        return parts if predicate(parts) else None

    return await wait_until(check, WAIT_S, what)


async def _restart(cluster: HealingCluster, conns: Conns, broker: int, sig: int, *, watch: int):
    """Stop ``broker`` with ``sig``, wait (at broker ``watch``) until it is out of every ISR
    (controlled shutdown, or fenced once its session expired), start it again and wait until it is
    back in every ISR it is a replica of; the partitions then."""
    code = cluster.kill(broker, sig)
    assert code in (0, -signal.SIGKILL), cluster.stderr_of(broker)[-3000:]
    await _state(conns, watch, lambda p: all(broker not in isr for _, _, isr in p.values()),
                 f"broker {broker} out of every ISR")
    cluster.start(broker)
    return await _state(conns, watch, lambda p: all(isr == set(r) for _, r, isr in p.values()),
                        f"broker {broker} back in every ISR")


def _elect(kind: int, partitions: dict[str, list[int]] | None) -> el_req.ElectLeadersRequest:
    named = None if partitions is None else tuple(
        el_req.TopicPartitions(topic=t, partitions=tuple(i32(p) for p in ps)) for t, ps in partitions.items())
    return el_req.ElectLeadersRequest(election_type=i8(kind), topic_partitions=named,
                                      timeout=datetime.timedelta(seconds=30))


def _answers(r: el_resp.ElectLeadersResponse) -> dict[tuple[str, int], ErrorCode]:
    return {(t.topic, int(p.partition_id)): p.error_code for t in r.replica_election_results
            for p in t.partition_result}


@pytest.fixture
def cluster(tmp_path):
    yield from HealingCluster(str(tmp_path), {"leader.imbalance.check.interval.seconds": "1"}).running()


def test_rolling_restart_ends_with_preferred_leaders_and_full_isrs(cluster):
    """The first item of the module docstring."""

    async def scenario():
        conns = Conns(cluster)
        try:
            await wait_until(lambda: _all_live(conns, 101, set(BROKERS)), WAIT_S, "three live brokers")
            names = [f"h{n:02d}" for n in range(20)]
            await _create(conns, names, 3, 3)
            await _state(conns, 101, lambda p: len(p) == 60 and _healed(p), "60 partitions, preferred and full")
            for broker, sig in zip(BROKERS, (signal.SIGKILL, signal.SIGTERM, signal.SIGTERM), strict=True):
                await _restart(cluster, conns, broker, sig, watch=next(b for b in BROKERS if b != broker))
            # every leadership back on its preferred replica (the restarts moved them away)
            parts = await _state(conns, 101, _healed, "every partition led by its preferred replica")
            assert len(parts) == 60
            for b in BROKERS:  # every broker sees the healed state, not only one
                await _state(conns, b, _healed, f"broker {b} sees the healed state")
        finally:
            await conns.close()

    asyncio.run(scenario())
    assert "preferred leader election" in "".join(cluster.stderr_of(i) for i in (1, 2, 3))


def test_elect_leaders_preferred_and_unclean_through_a_broker(tmp_path):
    """The second item of the module docstring."""
    cluster = HealingCluster(str(tmp_path), {"auto.leader.rebalance.enable": "false",
                                             "leader.imbalance.check.interval.seconds": "1"})
    try:
        cluster.format()
        cluster.start_all()

        async def scenario():
            conns = Conns(cluster)
            try:
                await wait_until(lambda: _all_live(conns, 101, set(BROKERS)), WAIT_S, "three live brokers")
                await _create(conns, [f"p{n}" for n in range(10)], 3, 3)
                await _state(conns, 103, lambda p: len(p) == 30 and _healed(p), "30 partitions, preferred")
                # 101 restarted: its leaderships move away and stay away
                parts = await _restart(cluster, conns, 101, signal.SIGTERM, watch=103)
                moved = {k for k, (leader, replicas, _) in parts.items() if replicas[0] == 101}
                assert moved and all(parts[k][0] != 101 for k in moved), parts

                r = await _ask(await conns.get(102), 43, 2, _elect(PREFERRED, None), el_resp.ElectLeadersResponse, 40)
                assert r.error_code == ErrorCode.none
                assert set(_answers(r)) == moved and set(_answers(r).values()) == {ErrorCode.none}
                await _state(conns, 103, _healed, "preferred leaders after ElectLeaders")
                r = await _ask(await conns.get(102), 43, 2, _elect(PREFERRED, {"p0": [0], "nope": [0]}),
                               el_resp.ElectLeadersResponse, 40)
                assert _answers(r) == {("p0", 0): ErrorCode.election_not_needed,
                                       ("nope", 0): ErrorCode.unknown_topic_or_partition}

                # RF 2: a partition on brokers 101 and 102 (placement is round-robin over 101, 102,
                # 103, so one of three consecutive partitions is). Stop 101, then 102 (the last
                # ISR member: the partition keeps ISR [102] without a leader), start 101 again: it
                # is not in the ISR, so only an unclean election gives the partition a leader
                await _create(conns, ["rf2"], 3, 2)
                parts = await _state(conns, 103, lambda p: len(p) == 33, "rf2 created")
                key = next(k for k, (_, replicas, _) in parts.items() if k[0] == "rf2" and set(replicas) == {101, 102})
                cluster.kill(101, signal.SIGTERM)
                await _state(conns, 103, lambda p: p[key][2] == {102}, "rf2 ISR without 101")
                cluster.kill(102, signal.SIGTERM)
                await _state(conns, 103, lambda p: p[key][0] == -1, "rf2 without a leader")
                cluster.start(101)
                await wait_until(lambda: _all_live(conns, 103, {101, 103}), WAIT_S, "broker 101 live again")
                parts = _partitions(await conns.metadata(103))
                assert parts[key][0] == -1 and parts[key][2] == {102}  # no clean leader: 101 is outside the ISR
                r = await _ask(await conns.get(103), 43, 2, _elect(UNCLEAN, {"rf2": [key[1]]}),
                               el_resp.ElectLeadersResponse, 40)
                assert _answers(r) == {key: ErrorCode.none}
                parts = await _state(conns, 103, lambda p: p[key][0] == 101, "rf2 led by 101")
                assert parts[key][2] == {101}
                cluster.start(102)
                await _state(conns, 103, lambda p: p[key][2] == {101, 102}, "102 back in the rf2 ISR")
            finally:
                await conns.close()

        asyncio.run(scenario())
    finally:
        cluster.close()

