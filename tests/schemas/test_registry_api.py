"""The schema registry's API over HTTP against a real gateway process: Confluent's paths,
bodies and error codes. Cases from Karapace's tests/integration/test_schema.py and
test_schema_registry_mode.py (Apache-2.0), ported to plain HTTP."""

from __future__ import annotations

import base64
import itertools
import json
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from google.protobuf import descriptor_pb2, struct_pb2

from gateway.api.schema_registry.media import render
from gateway.http.problem import Problem
from schemas.types.protobuf_text import comparable
from tests.e2e.conftest import Server, start_server

V1 = "application/vnd.schemaregistry.v1+json"
_names = itertools.count()


def unique(prefix: str) -> str:
    return f"{prefix}-{next(_names)}"


def avro_name(prefix: str) -> str:
    return f"{prefix}_{next(_names)}"


def record(name: str, *fields: tuple[str, Any]) -> str:
    """An Avro record schema's text."""
    return json.dumps(
        {"type": "record", "name": name, "fields": [{"name": n, "type": t} for n, t in fields]}
    )


def post(c: httpx.Client, path: str, body: object, **params: str) -> httpx.Response:
    return c.post(path, content=json.dumps(body), headers={"Content-Type": V1}, params=params)


def put(c: httpx.Client, path: str, body: object) -> httpx.Response:
    return c.put(path, content=json.dumps(body), headers={"Content-Type": V1})


def register(c: httpx.Client, subject: str, schema: str, **extra: Any) -> int:
    answer = post(c, f"/subjects/{subject}/versions", {"schema": schema, **extra})
    assert answer.status_code == 200, answer.text
    schema_id: int = answer.json()["id"]
    return schema_id


def error(answer: httpx.Response, status: int, code: int) -> str:
    """The answer is Confluent's error (and a problem document): its message."""
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"].startswith(V1)
    doc = answer.json()
    assert doc["error_code"] == code, doc
    assert doc["status"] == status and doc["detail"] == doc["message"]
    assert doc["type"] and doc["title"]
    message: str = doc["message"]
    return message


def test_register_is_idempotent_and_shares_ids_across_subjects(sr: httpx.Client) -> None:
    a, b = unique("a"), unique("b")
    schema = record(avro_name("R"), ("f", "string"))
    first = register(sr, a, schema)
    assert register(sr, a, schema) == first
    assert register(sr, b, schema) == first
    assert sr.get(f"/subjects/{a}/versions").json() == [1]
    other = register(sr, unique("c"), record(avro_name("R"), ("f", "string")), schemaType="AVRO")
    assert other > first
    versions = sr.get(f"/schemas/ids/{first}/versions").json()
    assert {"subject": a, "version": 1} in versions and {"subject": b, "version": 1} in versions
    subjects = sr.get(f"/schemas/ids/{first}/subjects").json()
    assert a in subjects and b in subjects


def test_versions_latest_and_schema_text(sr: httpx.Client) -> None:
    subject = unique("v")
    assert put(sr, f"/config/{subject}", {"compatibility": "NONE"}).json() == {
        "compatibility": "NONE"
    }
    s1, s2 = record("R", ("a", "int")), record("R", ("b", "string"))
    id1, id2 = register(sr, subject, s1), register(sr, subject, s2)
    for latest in ("latest", "-1"):
        doc = sr.get(f"/subjects/{subject}/versions/{latest}").json()
        assert doc == {"subject": subject, "version": 2, "id": id2, "schema": s2}
    assert sr.get(f"/subjects/{subject}/versions/1/schema").json() == json.loads(s1)
    assert sr.get(f"/schemas/ids/{id1}").json() == {"schema": s1}
    assert sr.get(f"/schemas/ids/{id1}/schema").json() == json.loads(s1)
    looked = post(sr, f"/subjects/{subject}", {"schema": s1})
    assert looked.json() == {"subject": subject, "version": 1, "id": id1, "schema": s1}


def test_invalid_versions_and_unknown_things(sr: httpx.Client) -> None:
    subject = unique("inv")
    register(sr, subject, json.dumps({"type": "string"}))
    for bad in ("0", "-2", "abc", str(2**31)):
        message = error(sr.get(f"/subjects/{subject}/versions/{bad}"), 422, 42202)
        assert f"'{bad}' is not a valid version id" in message
    assert error(sr.get(f"/subjects/{subject}/versions/15"), 404, 40402) == "Version 15 not found."
    missing = unique("missing")
    assert error(sr.get(f"/subjects/{missing}/versions"), 404, 40401) == (
        f"Subject '{missing}' not found."
    )
    error(sr.get(f"/subjects/{missing}/versions/1"), 404, 40401)
    error(sr.get("/schemas/ids/123456789"), 404, 40403)
    error(sr.get("/schemas/ids/invalid"), 404, 404)
    error(sr.get("/nowhere"), 404, 404)


def test_lookup_errors(sr: httpx.Client) -> None:
    subject = unique("look")
    register(sr, subject, json.dumps({"type": "string"}))
    error(post(sr, f"/subjects/{unique('none')}", {"schema": '"string"'}), 404, 40401)
    assert error(post(sr, f"/subjects/{subject}", {"schema": '{"type": "int"}'}), 404, 40403) == (
        "Schema not found"
    )
    error(post(sr, f"/subjects/{subject}", {}), 422, 422)


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({}, 422, 422),  # no schema
        ({"schema": ""}, 422, 42201),  # Karapace: "Empty schema"
        ({"schema": '{"type": "nonsense"}'}, 422, 42201),
        ({"schema": "not json"}, 422, 42201),
        ({"schema": '"string"', "schemaType": "XML"}, 422, 42201),
        ({"schema": 5}, 422, 422),
        ({"schema": '"string"', "unknown": 1}, 422, 422),
        ({"schema": '"string"', "references": "no"}, 422, 422),
        ({"schema": '"string"', "references": [{"name": "x"}]}, 422, 422),
        (
            {"schema": '"string"', "references": [{"name": "x", "subject": "nope", "version": 1}]},
            422,
            42201,
        ),
        ([1, 2], 422, 422),
        ("a string", 422, 422),
    ],
)
def test_bad_register_bodies(sr: httpx.Client, body: object, status: int, code: int) -> None:
    error(post(sr, f"/subjects/{unique('bad')}/versions", body), status, code)


def test_malformed_and_mistyped_bodies(sr: httpx.Client) -> None:
    path = f"/subjects/{unique('bad')}/versions"
    error(sr.post(path, content=b"{not json", headers={"Content-Type": V1}), 400, 400)
    error(
        sr.post(
            path, content=b'{"schema": "\\"string\\""}', headers={"Content-Type": "text/plain"}
        ),
        415,
        415,
    )
    huge = b'{"schema": "' + b"x" * (40 * 1024 * 1024) + b'"}'
    assert sr.post(path, content=huge, headers={"Content-Type": V1}).status_code == 413
    for media in (V1, "application/vnd.schemaregistry+json", "application/json"):
        answer = sr.post(
            path, content=b'{"schema": "\\"string\\""}', headers={"Content-Type": media}
        )
        assert answer.status_code == 200, answer.text


def test_unknown_fields_ignored_when_the_client_says_so(sr: httpx.Client) -> None:
    answer = sr.post(
        f"/subjects/{unique('lenient')}/versions",
        content=json.dumps({"schema": '"string"', "guid": "x"}),
        headers={"Content-Type": V1, "Confluent-Accept-Unknown-Properties": "true"},
    )
    assert answer.status_code == 200, answer.text


def test_soft_and_permanent_deletes(sr: httpx.Client) -> None:
    """Cases from Karapace's test_schema_versions_deleting, test_schema_delete_latest_version
    and test_schema_hard_delete_version."""
    subject = unique("del")
    put(sr, f"/config/{subject}", {"compatibility": "NONE"})
    id1 = register(sr, subject, record("R", ("a", "int")))
    id2 = register(sr, subject, record("R", ("b", "int")))
    error(sr.delete(f"/subjects/{subject}/versions/1?permanent=true"), 404, 40407)
    assert sr.delete(f"/subjects/{subject}/versions/latest").json() == 2
    assert sr.get(f"/subjects/{subject}/versions").json() == [1]
    assert sr.get(f"/subjects/{subject}/versions", params={"deleted": "true"}).json() == [1, 2]
    assert sr.get(f"/schemas/ids/{id2}/versions").json() == []
    error(sr.delete(f"/subjects/{subject}/versions/2"), 404, 40406)
    assert sr.get(f"/subjects/{subject}/versions/2", params={"deleted": "true"}).json()["id"] == id2
    assert sr.delete(f"/subjects/{subject}/versions/2?permanent=true").json() == 2
    error(sr.get(f"/subjects/{subject}/versions/2", params={"deleted": "true"}), 404, 40402)
    error(sr.get(f"/schemas/ids/{id2}"), 404, 40403)
    error(sr.delete(f"/subjects/{subject}?permanent=true"), 404, 40405)
    assert sr.delete(f"/subjects/{subject}").json() == [1]
    assert subject not in sr.get("/subjects").json()
    assert subject in sr.get("/subjects", params={"deleted": "true"}).json()
    error(sr.delete(f"/subjects/{subject}"), 404, 40404)
    error(sr.get(f"/subjects/{subject}/versions"), 404, 40401)
    assert sr.delete(f"/subjects/{subject}?permanent=true").json() == [1]
    error(sr.delete(f"/subjects/{subject}"), 404, 40401)
    # Ids are never given again: a new schema after the deletes gets a higher one.
    assert register(sr, subject, record("R", ("c", "int"))) > max(id1, id2)
    # Karapace's test_schema_hard_delete_and_recreate: a subject recreated keeps counting.
    assert sr.get(f"/subjects/{subject}/versions").json() == [1]


def test_references_and_referenced_by(sr: httpx.Client) -> None:
    base, user = unique("base"), unique("user")
    name = avro_name("Base")
    register(sr, base, record(name, ("a", "int")))
    child = json.dumps(
        {
            "type": "record",
            "name": avro_name("User"),
            "fields": [{"name": "b", "type": name}],
        }
    )
    refs = [{"name": name, "subject": base, "version": 1}]
    child_id = register(sr, user, child, references=refs)
    assert sr.get(f"/subjects/{base}/versions/1/referencedby").json() == [child_id]
    assert sr.get(f"/schemas/ids/{child_id}").json()["references"] == refs
    assert sr.get(f"/subjects/{user}/versions/1").json()["references"] == refs
    error(sr.delete(f"/subjects/{base}/versions/1"), 422, 42206)
    error(sr.delete(f"/subjects/{base}"), 422, 42206)
    # As Confluent's: the reference is named before the version's state (not 40407).
    error(sr.delete(f"/subjects/{base}/versions/1", params={"permanent": "true"}), 422, 42206)

    # A soft-deleted referrer lets the version be soft-deleted, not permanently: its record
    # still names the version, until it is permanently deleted too.
    assert sr.delete(f"/subjects/{user}").json() == [1]
    assert sr.get(f"/subjects/{base}/versions/1/referencedby").json() == []
    deleted = {"deleted": "true"}
    assert sr.get(f"/subjects/{base}/versions/1/referencedby", params=deleted).json() == [child_id]
    assert sr.delete(f"/subjects/{base}/versions/1").json() == 1
    assert sr.get(f"/subjects/{base}/versions/1/referencedby", params=deleted).json() == [child_id]
    permanent = {"permanent": "true"}
    refused = sr.delete(f"/subjects/{base}/versions/1", params=permanent)
    assert error(refused, 422, 42206) == (
        f"One or more references exist to the schema {{magic=1,keytype=SCHEMA,subject={base},"
        "version=1}."
    )
    error(sr.delete(f"/subjects/{base}", params=permanent), 422, 42206)
    assert sr.delete(f"/subjects/{user}", params=permanent).json() == [1]
    assert sr.get(f"/subjects/{base}/versions/1/referencedby", params=deleted).json() == []
    assert sr.delete(f"/subjects/{base}/versions/1", params=permanent).json() == 1


def test_a_subject_referencing_itself_is_deleted_whole(sr: httpx.Client) -> None:
    """As Confluent's: a subject's own references do not hold its delete, softly or
    permanently; one of its versions alone still is held."""
    subject = unique("selfref")
    name = avro_name("Base")
    assert put(sr, f"/config/{subject}", {"compatibility": "NONE"}).status_code == 200
    register(sr, subject, record(name, ("a", "int")))
    derived = record(avro_name("Derived"), ("base", name))
    register(sr, subject, derived, references=[{"name": name, "subject": subject, "version": 1}])
    error(sr.delete(f"/subjects/{subject}/versions/1"), 422, 42206)
    assert sr.delete(f"/subjects/{subject}").json() == [1, 2]
    assert sr.delete(f"/subjects/{subject}", params={"permanent": "true"}).json() == [1, 2]
    error(sr.get(f"/subjects/{subject}/versions", params={"deleted": "true"}), 404, 40401)


def test_config_global_and_per_subject(sr: httpx.Client) -> None:
    """Cases from Karapace's test_config and test_get_config_unknown_subject."""
    subject = unique("cfg")
    assert sr.get("/config").json() == {"compatibilityLevel": "BACKWARD"}
    assert sr.get(f"/config/{subject}", params={"defaultToGlobal": "true"}).json() == {
        "compatibilityLevel": "BACKWARD"
    }
    error(sr.get(f"/config/{subject}"), 404, 40408)
    error(
        put(sr, "/config", {"compatibility": "nope"}),
        422,
        42203,
    )
    error(put(sr, "/config", {"compatibility": 1}), 422, 422)
    changed = put(sr, f"/config/{subject}", {"compatibility": "full_transitive"})
    assert changed.json() == {"compatibility": "FULL_TRANSITIVE"}
    assert sr.get(f"/config/{subject}").json() == {"compatibilityLevel": "FULL_TRANSITIVE"}
    assert sr.delete(f"/config/{subject}").json() == {"compatibilityLevel": "FULL_TRANSITIVE"}
    error(sr.delete(f"/config/{subject}"), 404, 40408)


def test_modes(sr: httpx.Client) -> None:
    """Cases from Karapace's test_schema_registry_mode.py."""
    subject = unique("mode")
    assert sr.get("/mode").json() == {"mode": "READWRITE"}
    error(sr.get(f"/mode/{subject}"), 404, 40409)
    assert sr.get(f"/mode/{subject}", params={"defaultToGlobal": "true"}).json() == {
        "mode": "READWRITE"
    }
    error(
        put(sr, f"/mode/{subject}", {"mode": "SIDEWAYS"}),
        422,
        42204,
    )
    assert put(sr, f"/mode/{subject}", {"mode": "READONLY"}).json() == {"mode": "READONLY"}
    error(post(sr, f"/subjects/{subject}/versions", {"schema": '"string"'}), 422, 42205)
    assert sr.delete(f"/mode/{subject}").json() == {"mode": "READONLY"}
    register(sr, subject, '"string"')
    # IMPORT: only on an empty subject (unless forced); then ids and versions as given.
    error(
        put(sr, f"/mode/{subject}", {"mode": "IMPORT"}),
        422,
        42205,
    )
    error(post(sr, f"/subjects/{subject}/versions", {"schema": '"int"', "id": 9000}), 422, 42205)
    imported = unique("imported")
    assert put(sr, f"/mode/{imported}", {"mode": "IMPORT"}).status_code == 200
    assert register(sr, imported, '"long"', id=90001, version=7) == 90001
    assert sr.get(f"/subjects/{imported}/versions").json() == [7]
    error(
        post(sr, f"/subjects/{imported}/versions", {"schema": '"double"', "id": 90001}), 422, 42205
    )
    sr.delete(f"/mode/{imported}")
    assert register(sr, unique("after"), record(avro_name("R"), ("x", "int"))) > 90001


def test_schema_types_and_listing(sr: httpx.Client) -> None:
    assert sorted(sr.get("/schemas/types").json()) == ["AVRO", "JSON", "PROTOBUF"]
    prefix = unique("listing")
    for n in range(3):
        register(
            sr, f"{prefix}-{n}", json.dumps({"type": "enum", "name": "E", "symbols": [f"S{n}"]})
        )
    listed = sr.get("/subjects", params={"subjectPrefix": prefix}).json()
    assert listed == [f"{prefix}-{n}" for n in range(3)]
    assert sr.get(
        "/subjects", params={"subjectPrefix": prefix, "offset": "1", "limit": "1"}
    ).json() == [f"{prefix}-1"]
    error(sr.get("/subjects", params={"deleted": "maybe"}), 400, 400)


def test_subject_names_with_slashes(sr: httpx.Client) -> None:
    """Karapace's test_schema_lifecycle with "test_sche/ma_lifecycle"."""
    schema_id = register(sr, "with%2Fslash", '"boolean"')
    assert sr.get("/subjects/with%2Fslash/versions/1").json()["subject"] == "with/slash"
    assert "with/slash" in sr.get(f"/schemas/ids/{schema_id}/subjects").json()


def test_compatibility_endpoint_errors(sr: httpx.Client) -> None:
    """Cases from Karapace's test_compatibility_to_non_existent_schema_version_returns_404."""
    subject = unique("compat")
    register(sr, subject, record("R", ("a", "int")))
    path = f"/compatibility/subjects/{subject}/versions"
    body = {"schema": record("R", ("a", "int"))}
    assert post(sr, f"{path}/latest", body).json() == {"is_compatible": True}
    assert post(sr, f"{path}/1", body, verbose="true").json() == {
        "is_compatible": True,
        "messages": [],
    }
    error(post(sr, f"{path}/2", body), 404, 40402)
    # As Confluent's: no version to check against is compatible; a version named is 40402.
    nothing = f"/compatibility/subjects/{unique('no')}/versions"
    assert post(sr, f"{nothing}/latest", body).json() == {"is_compatible": True}
    error(post(sr, f"{nothing}/1", body), 404, 40402)
    error(post(sr, f"{path}/latest", {"schema": '{"type": "nonsense"}'}), 422, 42201)
    error(post(sr, f"{path}/zero", body), 422, 42202)


@pytest.mark.parametrize(
    ("level", "added_ok", "removed_ok"),
    [
        ("NONE", True, True),
        ("BACKWARD", False, True),
        ("BACKWARD_TRANSITIVE", False, True),
        ("FORWARD", True, False),
        ("FORWARD_TRANSITIVE", True, False),
        ("FULL", False, False),
        ("FULL_TRANSITIVE", False, False),
    ],
)
def test_each_compatibility_level(
    sr: httpx.Client, level: str, added_ok: bool, removed_ok: bool
) -> None:
    """Cases from Karapace's test_record_schema_compatibility_backward/_forward: a field added
    without a default breaks backward compatibility (new readers, old data), a field removed
    that has no default breaks forward compatibility (old readers, new data)."""
    name = avro_name("R")
    one, two = record(name, ("a", "int")), record(name, ("a", "int"), ("b", "int"))
    for old, new, ok in ((one, two, added_ok), (two, one, removed_ok)):
        subject = unique(f"level-{level.lower()}")
        assert put(sr, f"/config/{subject}", {"compatibility": level}).status_code == 200
        register(sr, subject, old)
        check = post(sr, f"/compatibility/subjects/{subject}/versions", {"schema": new})
        assert check.json()["is_compatible"] is ok, check.text
        answer = post(sr, f"/subjects/{subject}/versions", {"schema": new})
        if ok:
            assert answer.status_code == 200, answer.text
        else:
            assert "incompatible" in error(answer, 409, 409)


@pytest.mark.parametrize(("level", "ok"), [("BACKWARD", True), ("BACKWARD_TRANSITIVE", False)])
def test_transitive_levels_check_every_version(sr: httpx.Client, level: str, ok: bool) -> None:
    """Karapace's test_transitive_compatibility: a field dropped, then added back with another
    type and a default, reads the previous version's data but not the first's."""
    name, subject = avro_name("T"), unique("transitive")
    put(sr, f"/config/{subject}", {"compatibility": level})
    register(sr, subject, record(name, ("a", "int"), ("z", "int")))
    register(sr, subject, record(name, ("z", "int")))
    again = json.dumps(
        {
            "type": "record",
            "name": name,
            "fields": [
                {"name": "z", "type": "int"},
                {"name": "a", "type": "string", "default": "x"},
            ],
        }
    )
    answer = post(sr, f"/subjects/{subject}/versions", {"schema": again})
    assert (answer.status_code == 200) is ok, answer.text


def test_a_restarted_node_rebuilds_its_view_from_the_topic(tmp_path: Path) -> None:
    """Everything the registry knows is in `_schemas`: after a restart the subjects, levels,
    soft deletes and the next id are as they were."""
    data = tmp_path / "data"
    first = start_server(data)
    with httpx.Client(base_url=f"{first.url}/schema-registry") as c:
        put(c, "/config", {"compatibility": "FULL"})
        ids = [register(c, f"kept-{n}", record(f"K{n}", ("a", "int"))) for n in range(3)]
        c.delete("/subjects/kept-1")
    assert first.stop() == 0
    again = start_server(data)
    try:
        with httpx.Client(base_url=f"{again.url}/schema-registry") as c:
            assert c.get("/config").json() == {"compatibilityLevel": "FULL"}
            assert c.get("/subjects").json() == ["kept-0", "kept-2"]
            assert c.get("/subjects", params={"deleted": "true"}).json() == [
                "kept-0",
                "kept-1",
                "kept-2",
            ]
            assert c.get("/schemas/ids/" + str(ids[2])).json()["schema"] == record(
                "K2", ("a", "int")
            )
            assert register(c, "kept-3", record("K3", ("a", "int"))) == max(ids) + 1
    finally:
        assert again.stop() == 0


@pytest.mark.parametrize(
    ("accept", "media"),
    [
        (None, V1),
        ("application/json", "application/json"),
        ("text/html, image/gif, image/jpeg, *; q=.2, */*; q=.2", V1),
        (
            "application/vnd.schemaregistry.v2+json; q=0.1, "
            "application/vnd.schemaregistry+json; q=0.9",
            "application/vnd.schemaregistry+json",
        ),
        ("application/*", V1),
        ("*/does_not_matter", V1),
        ("*", V1),
        ("*/*", V1),
        ("application/vnd.schemaregistry.v2+json", None),
        ("text/*", None),
        ("application/octet-stream", None),
    ],
)
def test_accept_negotiation(gateway: Server, accept: str | None, media: str | None) -> None:
    """Karapace's test_http_headers."""
    headers = {} if accept is None else {"Accept": accept}
    answer = httpx.get(f"{gateway.url}/schema-registry/subjects", headers=headers)
    if media is None:
        error(answer, 406, 406)
    else:
        assert answer.status_code == 200
        assert answer.headers["content-type"] == media


def test_body_media_types(sr: httpx.Client) -> None:
    """Karapace's test_http_headers: octet-stream and a charset are taken; text/html is not."""
    level = json.dumps({"compatibility": "NONE"})
    subject = unique("media")
    for media in ("application/octet-stream", f"{V1}; charset=utf-8"):
        answer = sr.put(f"/config/{subject}", content=level, headers={"Content-Type": media})
        assert answer.json() == {"compatibility": "NONE"}
        assert answer.headers["content-type"] == V1
    error(
        sr.put(f"/config/{subject}", content=level, headers={"Content-Type": "text/html"}), 415, 415
    )


def test_subject_allowed_chars(sr: httpx.Client) -> None:
    """Karapace's test_subject_allowed_chars."""
    prefix = unique("chars")
    for suffix in ['"', "{", ":", "}", "'"]:
        subject = f"{prefix}{suffix}"
        answer = sr.post(
            f"/subjects/{quote(subject, safe='')}/versions",
            content=json.dumps({"schema": json.dumps({"type": "string"})}),
            headers={"Content-Type": V1},
        )
        assert answer.status_code == 200, (subject, answer.text)
        assert subject in sr.get("/subjects", params={"subjectPrefix": prefix}).json()


def test_schema_version_numbering(sr: httpx.Client) -> None:
    """Karapace's test_schema_version_numbering: a subject deleted and recreated numbers on."""
    subject, name = unique("numbering"), avro_name("N")
    first = record(name, ("first_name", "string"))
    register(sr, subject, first)
    put(sr, f"/config/{subject}", {"compatibility": "FORWARD"})
    register(sr, subject, record(name, ("first_name", "string"), ("last_name", "string")))
    assert sr.get(f"/subjects/{subject}/versions").json() == [1, 2]
    assert sr.delete(f"/subjects/{subject}").json() == [1, 2]
    register(sr, subject, first)
    assert sr.get(f"/subjects/{subject}/versions").json() == [3]


def test_schema_json_subject_comparison(sr: httpx.Client) -> None:
    """Karapace's test_schema_json_subject_comparison: the same JSON Schema with its members
    in another order is the same schema."""
    subject = unique("json-cmp")
    text = '{"type": "string", "value": "int"}'
    schema_id = register(sr, subject, text, schemaType="JSON")
    reordered = {"schemaType": "JSON", "schema": '{"value": "int", "type": "string"}'}
    found = post(sr, f"/subjects/{subject}", reordered).json()
    assert found == {
        "subject": subject, "version": 1, "id": schema_id, "schema": text, "schemaType": "JSON"
    }  # fmt: skip
    assert register(sr, unique("json-cmp"), reordered["schema"], schemaType="JSON") == schema_id


def test_three_subjects_sharing_a_schema(sr: httpx.Client) -> None:
    """Karapace's test_schema_three_subjects_sharing_schema."""
    schema = record(avro_name("Shared"), ("a", "string"))
    subjects = [unique("share") for _ in range(3)]
    ids = {register(sr, s, schema) for s in subjects}
    assert len(ids) == 1
    (schema_id,) = ids
    assert sorted(sr.get(f"/schemas/ids/{schema_id}/subjects").json()) == sorted(subjects)
    sr.delete(f"/subjects/{subjects[0]}")
    remaining = sr.get(f"/schemas/ids/{schema_id}/subjects").json()
    assert sorted(remaining) == sorted(subjects[1:])
    with_deleted = sr.get(f"/schemas/ids/{schema_id}/subjects", params={"deleted": "true"})
    assert sorted(with_deleted.json()) == sorted(subjects)


def test_a_write_that_reached_a_deposed_writer_is_retriable() -> None:
    """The writer moved while a write was forwarded to it: its NotLeader (421, not retried by
    confluent-kafka) answers 503 with Confluent's forwarding code and Retry-After."""
    answer = render(Problem(421, "NOT_LEADER", "node 2 leads _schemas-0", leader=2))
    assert answer.status == 503 and answer.headers["Retry-After"] == "1"
    assert answer.body is not None
    doc = json.loads(bytes(answer.body))  # type: ignore[arg-type]
    assert doc["error_code"] == 50003 and doc["status"] == 503


def test_format_serialized_gives_a_protobuf_schema_as_its_descriptor(sr: httpx.Client) -> None:
    subject = unique("proto")
    proto = 'syntax = "proto3";\nmessage Tick { int64 at = 1; }\n'
    registered = post(
        sr, f"/subjects/{subject}/versions", {"schema": proto, "schemaType": "PROTOBUF"}
    )
    schema_id = registered.json()["id"]
    assert sr.get(f"/schemas/ids/{schema_id}").json()["schema"] == proto
    serialized = sr.get(f"/schemas/ids/{schema_id}", params={"format": "serialized"}).json()
    descriptor = base64.b64decode(serialized["schema"], validate=True)
    assert b"Tick" in descriptor and serialized["schemaType"] == "PROTOBUF"
    latest = sr.get(f"/subjects/{subject}/versions/latest", params={"format": "serialized"})
    assert latest.json()["schema"] == serialized["schema"]
    again = post(
        sr,
        f"/subjects/{subject}/versions",
        {"schema": serialized["schema"], "schemaType": "PROTOBUF"},
    )
    assert again.json()["id"] == schema_id, "the serialized form is the same schema"
    elsewhere = unique("proto")
    assert register(sr, elsewhere, serialized["schema"], schemaType="PROTOBUF") == schema_id
    assert sr.get(f"/schemas/ids/{schema_id}").json()["schema"] == proto, "the text it had"
    assert sr.get(f"/subjects/{elsewhere}/versions/1").json()["schema"] == proto
    avro_subject = unique("avro")
    avro = record(avro_name("Plain"), ("n", "int"))
    avro_id = post(sr, f"/subjects/{avro_subject}/versions", {"schema": avro}).json()["id"]
    plain = sr.get(f"/schemas/ids/{avro_id}", params={"format": "serialized"}).json()
    assert plain["schema"] == avro, "only Protobuf has a serialized form"


def test_a_protobuf_schema_registered_serialized_reads_back_as_proto_text(sr: httpx.Client) -> None:
    """confluent-kafka's ProtobufSerializer registers its generated module's descriptor in
    base64; as Confluent's registry does, the registry answers it as .proto text (every read:
    a version, by id, the text alone, listings, lookup), a text that is the same schema, and
    as the descriptor with format=serialized."""
    descriptor = base64.b64encode(struct_pb2.DESCRIPTOR.serialized_pb).decode("ascii")
    subject = unique("struct")
    schema_id = register(sr, subject, descriptor, schemaType="PROTOBUF")
    text = sr.get(f"/subjects/{subject}/versions/1").json()["schema"]
    assert "message Struct {" in text and "map<string, Value> fields = 1;" in text
    assert "oneof kind {" in text and "enum NullValue {" in text
    assert sr.get(f"/schemas/ids/{schema_id}").json()["schema"] == text
    assert sr.get(f"/schemas/ids/{schema_id}/schema").text == text
    assert sr.get(f"/subjects/{subject}/versions/latest/schema").text == text
    listed = sr.get("/schemas", params={"subjectPrefix": subject}).json()
    assert [version["schema"] for version in listed] == [text]
    looked = post(sr, f"/subjects/{subject}", {"schema": descriptor, "schemaType": "PROTOBUF"})
    assert looked.json()["id"] == schema_id and looked.json()["schema"] == text
    assert register(sr, subject, text, schemaType="PROTOBUF") == schema_id, "the same schema"
    served = sr.get(f"/subjects/{subject}/versions/1", params={"format": "serialized"}).json()
    file = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(served["schema"]))
    assert [m.name for m in file.message_type] == ["Struct", "Value", "ListValue"]
    generated = descriptor_pb2.FileDescriptorProto.FromString(struct_pb2.DESCRIPTOR.serialized_pb)
    assert comparable(file, []) == comparable(generated, [])


def test_a_descriptor_with_no_proto_text_is_an_invalid_schema(sr: httpx.Client) -> None:
    file = descriptor_pb2.FileDescriptorProto(name="x.proto", syntax="editions")
    file.edition = descriptor_pb2.EDITION_2023
    file.message_type.add(name="M")
    body = {"schema": base64.b64encode(file.SerializeToString()).decode(), "schemaType": "PROTOBUF"}
    refused = post(sr, f"/subjects/{unique('editions')}/versions", body)
    assert "has no .proto text" in error(refused, 422, 42201)
