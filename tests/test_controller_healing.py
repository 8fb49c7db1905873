"""Proves that partitions heal (issue #20, item 5), in-process on hand-made images
(engine/controller/replication.py, controller.py):

- an unfenced broker rejoins the ISR of every partition with a leader it is a replica of (the
  unfencing record first, elections of offline partitions next, then the expansions); a partition
  whose ISR is only a fenced broker keeps it and gets no leader from a broker outside the ISR;
- the bulk expansion equals the partition builder's (build_change) on the same partitions;
- preferred-leader election moves leadership to a preferred replica that is live and in the ISR,
  never to one that is fenced or outside the ISR; the per-broker imbalance percentage decides
  which brokers are rebalanced, as Kafka's checkAndTriggerAutoLeaderRebalance;
- ElectLeaders' per-partition answers (preferred and unclean) follow Kafka's electLeader, and
  the controller writes them and answers unknown partitions; off the active controller every
  named partition answers NOT_CONTROLLER, and v0/v1 requests and answers convert;
- the heal pass of the active controller (ISR expansion then preferred elections) leaves every
  partition led by its preferred replica with a full ISR.
"""

from __future__ import annotations

import asyncio
import datetime

import numpy as np
from kio.schema.elect_leaders.v2 import request as el_req
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i32

from kraftlog.engine.controller import replication as rp
from kraftlog.engine.controller.controller import Controller, ControllerConfig, ImagePublisher
from kraftlog.engine.records import metadata as codec
from kraftlog.raft.aio.driver import DriverConfig
from tests.test_controller_partitions import _image, _InstantDriver, _strip


def _active(image, **config) -> tuple[Controller, ImagePublisher, _InstantDriver]:
    publisher = ImagePublisher()
    publisher.loader.image = image
    publisher.next_offset = image.provenance.offset + 1
    driver = _InstantDriver(publisher, DriverConfig())
    controller = Controller(1, None, driver, publisher, ControllerConfig(**config))
    publisher.leader = (1, 1)
    return controller, publisher, driver


def _state(image) -> list[tuple[int, tuple[int, ...], tuple[int, ...]]]:
    return [(p.leader, tuple(p.isr), tuple(p.replicas)) for p in image.topics.partitions_of("t")]


def test_unfenced_broker_rejoins_isrs_after_the_unfencing_record():
    """Broker 1 comes back: it rejoins the ISR where a leader exists, revives the partition whose
    ISR it is the last member of, and stays out of the one whose ISR is only fenced broker 3."""
    image = _image([((1, 2, 3), (2, 3), 2),      # led by 2: 1 rejoins
                    ((1, 2), (1,), -1),           # offline, 1 the last ISR member: 1 leads again
                    ((1, 3), (3,), -1),           # offline, ISR only fenced 3: no unclean election
                    ((2, 3), (2, 3), 2)],         # 1 absent: untouched
                   brokers={1: "fenced", 2: "live", 3: "fenced"})
    controller, _, _ = _active(image)
    records = [codec.decode_record(v) for v in controller._unfence_records(image.cluster.brokers[1])]
    assert records[0].record_type == "BrokerRegistrationChangeRecord" and records[0].data["Fenced"] == -1
    changes = [{k: v for k, v in r.data.items() if k == "PartitionId" or (k == "Leader" and v != -2)
                or (k == "Isr" and v is not None)} for r in records[1:]]
    assert changes == [{"PartitionId": 1, "Leader": 1}, {"PartitionId": 0, "Isr": [2, 3, 1]}]


def test_bulk_expansion_equals_the_partition_builder():
    """expansion_changes (numpy) writes what build_change writes for each partition's grown ISR."""
    rng = np.random.default_rng(7)
    specs = []
    for _ in range(200):
        replicas = [int(b) for b in rng.permutation(6)[:3]]
        isr = [b for b in replicas if rng.random() < 0.6] or replicas[:1]
        leader = next((b for b in isr if b in (0, 1, 3, 5)), -1)  # a leader is live, as in a real image
        specs.append((tuple(replicas), tuple(isr), leader))
    image = _image(specs, brokers={0: "live", 1: "live", 2: "fenced", 3: "live", 4: "shutdown", 5: "live"})
    rules = rp.rules_for(image)
    rows = rp.rows_missing_live_replicas(image.topics, rules.acceptable)
    bulk = sorted(_strip(rp.expansion_changes(image.topics, rows, rules).records()), key=lambda d: d["PartitionId"])
    scalar = []
    for part in image.topics.partitions_of("t"):
        grown = list(part.isr) + [b for b in part.replicas if b not in part.isr and rules.is_acceptable(b)]
        data = rp.build_change(part, grown, rules)
        if data is not None and part.leader >= 0:  # offline partitions elect on unfencing instead
            scalar.append({k: v for k, v in data.items() if k != "TopicId"})
    assert bulk == scalar and len(bulk) > 50


def test_preferred_election_and_the_imbalance_percentage():
    """Only a live preferred replica in the ISR takes leadership back; a broker whose preferred
    partitions are led elsewhere at or below the percentage is left alone."""
    image = _image([((1, 2), (1, 2), 2),        # 1 preferred, in ISR: moves back
                    ((1, 2), (2,), 2),           # 1 not in the ISR: stays
                    ((3, 2), (3, 2), 2),         # 3 fenced: stays
                    ((2, 1), (2, 1), 2)],        # already preferred
                   brokers={1: "live", 2: "live", 3: "fenced"})
    assert _strip(rp.preferred_changes(image).records()) == [{"PartitionId": 0, "Leader": 1}]
    assert rp.imbalanced_brokers(image.topics, 10).tolist() == [1, 3]
    # broker 1 preferred for 10 partitions, leads 9: 10% is not above 10%
    ten = _image([((1, 2), (1, 2), 2)] + [((1, 2), (1, 2), 1)] * 9, brokers={1: "live", 2: "live"})
    assert rp.imbalanced_brokers(ten.topics, 10).tolist() == []
    assert rp.imbalanced_brokers(ten.topics, 5).tolist() == [1]


def test_elect_one_answers_as_kafka():
    """PREFERRED: not needed when the preferred leads, not available when it is outside the ISR
    or fenced; UNCLEAN: not needed with a leader, the ISR's live member first, else any live
    replica alone in the ISR, else not available."""
    image = _image([((1, 2), (1, 2), 1), ((1, 2), (2,), 2), ((2, 1), (2, 1), 1), ((3, 1), (3,), -1),
                    ((3, 2), (3,), -1), ((3,), (3,), -1)],
                   brokers={1: "live", 2: "live", 3: "fenced"})
    rules = rp.rules_for(image)
    parts = image.topics.partitions_of("t")

    def answer(i, kind):
        data, error = rp.elect_one(parts[i], kind, rules)
        return error or {k: v for k, v in data.items() if k in ("Leader", "Isr")}

    assert answer(0, rp.PREFERRED) == "election_not_needed"
    assert answer(1, rp.PREFERRED) == "preferred_leader_not_available"
    assert answer(2, rp.PREFERRED) == {"Leader": 2}
    assert answer(0, rp.UNCLEAN) == "election_not_needed"
    assert answer(3, rp.UNCLEAN) == {"Leader": 1, "Isr": [1]}
    assert answer(4, rp.UNCLEAN) == {"Leader": 2, "Isr": [2]}
    assert answer(5, rp.UNCLEAN) == "eligible_leaders_not_available"


def _elect(kind: int, partitions: dict[str, list[int]] | None) -> el_req.ElectLeadersRequest:
    named = None if partitions is None else tuple(
        el_req.TopicPartitions(topic=t, partitions=tuple(i32(p) for p in ps)) for t, ps in partitions.items())
    return el_req.ElectLeadersRequest(election_type=i8(kind), topic_partitions=named,
                                      timeout=datetime.timedelta(seconds=5))


def test_elect_leaders_writes_elections_and_answers_per_partition():
    """ElectLeaders through the controller: named partitions get one answer each (unknown ones
    UNKNOWN_TOPIC_OR_PARTITION); with none named, only partitions whose election was needed."""
    image = _image([((1, 2), (1, 2), 2), ((2, 1), (2, 1), 2), ((1, 2), (2,), 2)],
                   brokers={1: "live", 2: "live"})

    async def scenario():
        controller, publisher, _ = _active(image)
        r = await controller.elect_leaders(_elect(rp.PREFERRED, {"t": [0, 1, 7], "nope": [0]}))
        got = {(t.topic, int(p.partition_id)): p.error_code for t in r.replica_election_results
               for p in t.partition_result}
        assert r.error_code == ErrorCode.none
        assert got == {("t", 0): ErrorCode.none, ("t", 1): ErrorCode.election_not_needed,
                       ("t", 7): ErrorCode.unknown_topic_or_partition,
                       ("nope", 0): ErrorCode.unknown_topic_or_partition}
        assert [p.leader for p in publisher.image.topics.partitions_of("t")] == [1, 2, 2]
        r = await controller.elect_leaders(_elect(rp.PREFERRED, None))
        everything = [(t.topic, int(p.partition_id), p.error_code) for t in r.replica_election_results
                      for p in t.partition_result]
        assert everything == [("t", 2, ErrorCode.preferred_leader_not_available)]

    asyncio.run(scenario())


def test_heal_pass_restores_full_isrs_and_preferred_leaders():
    """After a rolling restart left ISRs shrunk and leaders moved, one heal pass writes the
    expansions, then the preferred elections: every partition is led by its first replica with
    every replica in its ISR; with auto.leader.rebalance.enable=false only the ISRs heal."""
    specs = [((1, 2, 3), (3,), 3), ((2, 3, 1), (3, 1), 3), ((3, 1, 2), (3,), 3), ((1, 3, 2), (3, 2), 2)]
    brokers = {1: "live", 2: "live", 3: "live"}

    async def scenario(enabled: bool):
        controller, publisher, _ = _active(_image(specs, brokers=brokers), auto_leader_rebalance_enable=enabled)
        async with controller.executor.exclusive():
            await controller._heal()
        return _state(publisher.image)

    healed = asyncio.run(scenario(True))
    assert all(leader == replicas[0] and set(isr) == set(replicas) for leader, isr, replicas in healed), healed
    isr_only = asyncio.run(scenario(False))
    assert [leader for leader, _, _ in isr_only] == [3, 3, 3, 2]
    assert all(set(isr) == set(replicas) for _, isr, replicas in isr_only)


def test_elect_leaders_off_the_active_controller_and_at_older_versions():
    """A controller that is not active answers NOT_CONTROLLER at the top and on every named
    partition (v0 has no top-level error); v0 requests (no ElectionType) are PREFERRED elections,
    and answers convert back to v0 and v1."""
    from kraftlog.engine.protocol import older_versions as ov
    from kraftlog.engine.protocol.apis import API_ELECT_LEADERS, CONTROLLER_APIS

    image = _image([((1, 2), (1, 2), 2)], brokers={1: "live", 2: "live"})

    async def standby():
        controller, publisher, _ = _active(image)
        publisher.leader = (2, 1)  # someone else leads
        return await controller.elect_leaders(_elect(rp.UNCLEAN, {"t": [0]}))

    r = asyncio.run(standby())
    assert r.error_code == ErrorCode.not_controller
    assert _answers_of(r) == {("t", 0): ErrorCode.not_controller}
    v0 = ov.from_served(r, ov.response_type(API_ELECT_LEADERS, 0))
    assert not hasattr(v0, "error_code") and _answers_of(v0) == {("t", 0): ErrorCode.not_controller}

    from kio.schema.elect_leaders.v0 import request as el_v0

    old = el_v0.ElectLeadersRequest(topic_partitions=(el_v0.TopicPartitions(topic="t", partitions=(i32(0),)),),
                                    timeout=datetime.timedelta(seconds=1))
    served = ov.to_served(API_ELECT_LEADERS, old, CONTROLLER_APIS[API_ELECT_LEADERS][1])
    assert int(served.election_type) == rp.PREFERRED and served.topic_partitions[0].partitions == (0,)


def _answers_of(r) -> dict[tuple[str, int], ErrorCode]:
    return {(t.topic, int(p.partition_id)): p.error_code for t in r.replica_election_results for p in t.partition_result}
