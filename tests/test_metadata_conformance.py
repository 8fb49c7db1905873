"""Proves kraftlog's hand-written schema table (engine/records/schema_table.py) states exactly the
facts of Kafka's JSON schemas: every metadata record and KRaft control record, its apiKey (or
control type), validVersions, flexibleVersions, and every field, nested ones included, with its
type, versions, nullableVersions, taggedVersions, tag and default.

The JSON is read at test time from ../shared/kafka-schemas (or $KRAFTLOG_KAFKA_SCHEMAS); a missing
folder fails the test. The JSON is interpreted here with this file's own small helpers, not with
the parser under test.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import uuid
from pathlib import Path

import pytest

from kraftlog.engine.records import schema as table

OPEN = 0x7FFF
# The five KRaft control records, by their JSON file's message name, with Kafka's ControlRecordType
# numbers (from the DESIGN: LEADER_CHANGE 2, SNAPSHOT_HEADER 3, SNAPSHOT_FOOTER 4, KRAFT_VERSION 5,
# KRAFT_VOTERS 6).
CONTROL_MESSAGES = {"LeaderChangeMessage": (2, "LEADER_CHANGE"), "SnapshotHeaderRecord": (3, "SNAPSHOT_HEADER"),
                    "SnapshotFooterRecord": (4, "SNAPSHOT_FOOTER"), "KRaftVersionRecord": (5, "KRAFT_VERSION"),
                    "VotersRecord": (6, "KRAFT_VOTERS")}


def schemas_dir() -> Path:
    env = os.environ.get("KRAFTLOG_KAFKA_SCHEMAS")
    path = Path(env) if env else Path(__file__).resolve().parents[2] / "shared" / "kafka-schemas"
    if not (path / "metadata").is_dir() or not (path / "message").is_dir():
        pytest.fail(f"Kafka JSON schemas not found at {path} (set KRAFTLOG_KAFKA_SCHEMAS)")
    return path


def strip_comments(text: str) -> str:
    """Drop // comments (to the end of the line) that are outside JSON strings."""
    out, in_string, i = [], False, 0
    while i < len(text):
        c = text[i]
        if in_string:
            out.append(c)
            if c == "\\":
                out.append(text[i + 1])
                i += 1
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
            out.append(c)
        elif text.startswith("//", i):
            while i < len(text) and text[i] != "\n":
                i += 1
            continue
        else:
            out.append(c)
        i += 1
    return "".join(out)


def load_all() -> dict[str, dict]:
    """Every JSON schema under the folder (any depth), by message name."""
    specs = {}
    for path in sorted(schemas_dir().glob("**/*.json")):
        spec = json.loads(strip_comments(path.read_text(encoding="utf-8")))
        spec["_file"] = path.name
        specs[spec["name"]] = spec
    return specs


def json_versions(text: str | None) -> tuple[int, int] | None:
    if text is None or text == "none":
        return None
    if text.endswith("+"):
        return int(text[:-1]), OPEN
    if "-" in text:
        lo, hi = text.split("-")
        return int(lo), int(hi)
    return int(text), int(text)


def json_default(jf: dict):
    """The value Kafka's generator gives a field with this JSON (explicit or implicit default)."""
    t, raw = jf["type"], jf.get("default")
    if raw == "null":
        return None
    if t.startswith("[]"):
        assert not raw, f"{jf['name']}: unexpected array default {raw!r}"
        return ()
    if t in ("int8", "int16", "int32", "int64", "uint16", "uint32"):
        return int(raw, 16) if raw and raw.startswith("0x") else int(raw or 0)
    if t == "bool":
        return raw == "true"
    if t == "float64":
        return float(raw or 0)
    if t == "string":
        return raw or ""
    if t == "bytes":
        return b""
    if t == "uuid":
        return uuid.UUID(bytes=base64.urlsafe_b64decode(raw + "==")) if raw else uuid.UUID(int=0)
    return table.STRUCT_DEFAULT


def compare_fields(where: str, jfields: list[dict], ours: tuple, commons: dict[str, list]) -> list[str]:
    """Every difference between the JSON fields and the table's, as readable lines."""
    problems = []
    jnames = [jf["name"] for jf in jfields]
    onames = [f.name for f in ours]
    if jnames != onames:
        return [f"{where}: fields {onames} != JSON {jnames}"]
    for jf, f in zip(jfields, ours, strict=True):
        at = f"{where}.{f.name}"
        tag = jf.get("tag")
        expected = {
            "type": jf["type"],
            "versions": json_versions(jf["versions"]),
            "nullable_versions": json_versions(jf.get("nullableVersions")),
            "tagged_versions": json_versions(jf.get("taggedVersions")),
            "tag": None if tag is None else int(tag),
            "default": json_default(jf),
        }
        for attr, want in expected.items():
            got = getattr(f, attr)
            if got != want or type(got) is not type(want):
                problems.append(f"{at}: {attr} is {got!r}, JSON says {want!r}")
        element = jf["type"][2:] if jf["type"].startswith("[]") else jf["type"]
        nested = jf.get("fields")
        if nested is None and element in commons:
            nested = commons[element]
        problems += compare_fields(at, nested or [], f.fields, commons)
    return problems


def compare_record(spec: dict, ours: table.RecordSchema) -> list[str]:
    where = f"{spec['_file']} ({spec['name']})"
    problems = []
    if ours.name != spec["name"]:
        problems.append(f"{where}: name {ours.name}")
    if spec["type"] == "metadata" and ours.api_key != spec["apiKey"]:
        problems.append(f"{where}: apiKey {ours.api_key}, JSON says {spec['apiKey']}")
    if ours.valid_versions != json_versions(spec["validVersions"]):
        problems.append(f"{where}: validVersions {ours.valid_versions}, JSON says {spec['validVersions']}")
    flex = json_versions(spec["flexibleVersions"])
    if ours.flexible_from != (None if flex is None else flex[0]):
        problems.append(f"{where}: flexible from {ours.flexible_from}, JSON says {spec['flexibleVersions']}")
    commons = {c["name"]: c["fields"] for c in spec.get("commonStructs", [])}
    return problems + compare_fields(ours.name, spec["fields"], ours.fields, commons)


def test_schema_folder_is_found_and_holds_the_records():
    """The JSON folder is there and holds the metadata records and the five control messages."""
    specs = load_all()
    assert sum(s["type"] == "metadata" for s in specs.values()) >= 20
    assert set(CONTROL_MESSAGES) <= set(specs)


def test_missing_schema_folder_fails_rather_than_skips(monkeypatch, tmp_path):
    """Pointing the env var at an empty folder makes the test helpers fail the test, not skip it."""
    monkeypatch.setenv("KRAFTLOG_KAFKA_SCHEMAS", str(tmp_path))
    with pytest.raises(pytest.fail.Exception):
        schemas_dir()


def test_every_metadata_record_in_the_json_is_in_the_table_and_nothing_else():
    """The table has exactly the metadata records of the JSON folder, by name and by apiKey."""
    specs = {n: s for n, s in load_all().items() if s["type"] == "metadata"}
    assert set(table.RECORD_TYPES) == set(specs)
    assert {s["apiKey"]: n for n, s in specs.items()} == {k: s.name for k, s in table.BY_API_KEY.items()}


def test_metadata_records_match_the_json():
    """Every metadata record: apiKey, versions, flexible versions and every field fact match."""
    specs = load_all()
    problems = []
    for name, ours in table.RECORD_TYPES.items():
        problems += compare_record(specs[name], ours)
    assert problems == []


def test_control_records_match_the_json():
    """The five control records: control type, versions and every field (common structs resolved)."""
    specs = load_all()
    assert {s.name: (t, s.json_type) for t, s in table.CONTROL_TYPES.items()} == CONTROL_MESSAGES
    problems = []
    for ours in table.CONTROL_TYPES.values():
        assert specs[ours.name]["type"] == "data"
        problems += compare_record(specs[ours.name], ours)
    assert problems == []


def test_the_comparison_catches_a_drifted_fact():
    """A table entry with one wrong fact (a default, a tag, a nested type) is reported."""
    specs = load_all()
    ours = table.RECORD_TYPES["PartitionChangeRecord"]
    leader = ours.field("Leader")
    drifted = dataclasses.replace(ours, fields=tuple(
        dataclasses.replace(f, default=-1, tag=9) if f is leader else f for f in ours.fields))
    problems = compare_record(specs["PartitionChangeRecord"], drifted)
    assert any("Leader: tag" in p for p in problems) and any("Leader: default" in p for p in problems)

    voters = table.CONTROL_TYPES[6]
    outer = voters.field("Voters")
    port = next(f for f in outer.fields if f.name == "Endpoints").fields[2]
    bad_port = dataclasses.replace(port, type="int16")
    endpoints = next(f for f in outer.fields if f.name == "Endpoints")
    bad = dataclasses.replace(voters, fields=(voters.fields[0], dataclasses.replace(outer, fields=tuple(
        dataclasses.replace(endpoints, fields=(*endpoints.fields[:2], bad_port)) if f is endpoints else f
        for f in outer.fields))))
    assert compare_record(specs["VotersRecord"], bad) == [
        "VotersRecord.Voters.Endpoints.Port: type is 'int16', JSON says 'uint16'"]


def test_comment_stripping_keeps_slashes_inside_strings():
    """// inside a JSON string survives; a trailing // comment does not."""
    assert json.loads(strip_comments('{"a": "x//y"} // note\n')) == {"a": "x//y"}
