"""Karapace's tests/integration/test_schema_avro_references.py (Apache-2.0), ported to plain
HTTP against a real gateway process: Avro schemas registered with references, looked up,
read back, checked and evolved. Every case of the file is ported. Referencedby and the
refusal (42206) to delete a referenced version are in test_registry_api.py
(test_references_and_referenced_by) and test_referenced_versions_cannot_be_deleted below."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.schemas.test_registry_api import error, post, register, unique

COUNTRY = {
    "type": "record",
    "name": "Country",
    "namespace": "com.netapp",
    "fields": [{"name": "name", "type": "string"}, {"name": "code", "type": "string"}],
}
ADDRESS = {
    "type": "record",
    "name": "Address",
    "namespace": "com.netapp",
    "fields": [
        {"name": "street", "type": "string"},
        {"name": "city", "type": "string"},
        {"name": "postalCode", "type": "string"},
        {"name": "country", "type": "Country"},
    ],
}
JOB = {
    "type": "record",
    "name": "Job",
    "namespace": "com.netapp",
    "fields": [{"name": "title", "type": "string"}, {"name": "salary", "type": "double"}],
}


def person(age: str = "int", name: str = "Person", job: bool = True) -> dict[str, Any]:
    fields = [
        {"name": "name", "type": "string"},
        {"name": "age", "type": age},
        {"name": "address", "type": "Address"},
    ]
    return {
        "type": "record",
        "name": name,
        "namespace": "com.netapp",
        "fields": [*fields, {"name": "job", "type": "Job"}] if job else fields,
    }


def address_refs(prefix: str) -> list[dict[str, Any]]:
    return [{"name": "country.avsc", "subject": f"{prefix}country", "version": 1}]


def person_refs(prefix: str) -> list[dict[str, Any]]:
    return [
        {"name": "address.avsc", "subject": f"{prefix}address", "version": 1},
        {"name": "job.avsc", "subject": f"{prefix}job", "version": 1},
    ]


def fill(sr: httpx.Client) -> tuple[str, int]:
    """Karapace's basic_avro_references_fill_test: country, address (referencing country, and
    found by a lookup with its references), job, person (referencing address and job); the
    subjects' prefix and person's id."""
    prefix = unique("refs") + "-"
    register(sr, f"{prefix}country", json.dumps(COUNTRY))
    address = {
        "schemaType": "AVRO",
        "schema": json.dumps(ADDRESS),
        "references": address_refs(prefix),
    }
    address_id = register(
        sr,
        f"{prefix}address",
        json.dumps(ADDRESS),
        schemaType="AVRO",
        references=address_refs(prefix),
    )
    found = post(sr, f"/subjects/{prefix}address", address)
    assert found.status_code == 200, found.text
    assert found.json()["id"] == address_id and {"subject", "version", "schema"} <= set(
        found.json()
    )
    register(sr, f"{prefix}job", json.dumps(JOB))
    person_id = register(
        sr, f"{prefix}person", json.dumps(person()), references=person_refs(prefix)
    )
    return prefix, person_id


def test_basic_avro_references(sr: httpx.Client) -> None:
    """Karapace's test_basic_avro_references (Karapace gives the schema back compact; Sluice
    gives it back as registered, so the JSON it parses to is compared)."""
    prefix, person_id = fill(sr)
    doc = sr.get(f"/subjects/{prefix}person/versions/latest").json()
    assert json.loads(doc.pop("schema")) == person()
    assert doc == {
        "id": person_id,
        "references": person_refs(prefix),
        "subject": f"{prefix}person",
        "version": 1,
    }


def test_avro_references_compatibility(sr: httpx.Client) -> None:
    """Karapace's test_avro_references_compatibility: int to long is compatible, long to string
    (here int to string) is not. Karapace lists the reasons unasked; Confluent (and Sluice)
    with verbose=true."""
    prefix, _ = fill(sr)
    path = f"/compatibility/subjects/{prefix}person/versions/latest"
    for age, ok in (("long", True), ("string", False)):
        body = {
            "schemaType": "AVRO",
            "schema": json.dumps(person(age)),
            "references": person_refs(prefix),
        }
        assert post(sr, path, body).json() == {"is_compatible": ok}
        verbose = post(sr, path, body, verbose="true").json()
        assert verbose["is_compatible"] is ok and bool(verbose["messages"]) is not ok


@pytest.mark.parametrize("union", [False, True])
def test_avro_union_references(sr: httpx.Client, union: bool) -> None:
    """Karapace's test_avro_union_references (a record with a union field) and
    test_avro_union_references2 (a union of two records), both using referenced types."""
    prefix, _ = fill(sr)
    if union:
        schema: Any = [person(), person(name="UnemployedPerson", job=False)]
    else:
        child = {
            "type": "record",
            "name": "child",
            "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int"}],
        }
        schema = person(name="Person2")
        schema["fields"].append({"name": "children", "type": ["null", child]})
    register(sr, f"{prefix}person2", json.dumps(schema), references=person_refs(prefix))


def test_avro_incompatible_name_references(sr: httpx.Client) -> None:
    """Karapace's test_avro_incompatible_name_references: Address renamed is incompatible. The
    message is Sluice's (Confluent's wording, not Karapace's); it names the record."""
    prefix, _ = fill(sr)
    renamed = ADDRESS | {"name": "ChangedAddress"}
    answer = post(
        sr,
        f"/subjects/{prefix}address/versions",
        {"schemaType": "AVRO", "schema": json.dumps(renamed), "references": address_refs(prefix)},
    )
    assert "Address" in error(answer, 409, 409)


def test_referenced_versions_cannot_be_deleted(sr: httpx.Client) -> None:
    """The registry keeps what a live schema references (Confluent's rule, which Karapace
    shares): a referenced version is not deleted, softly or as a subject (42206); once the
    referrer is deleted, it is."""
    prefix, person_id = fill(sr)
    assert sr.get(f"/subjects/{prefix}job/versions/1/referencedby").json() == [person_id]
    error(sr.delete(f"/subjects/{prefix}job/versions/1"), 422, 42206)
    error(sr.delete(f"/subjects/{prefix}job"), 422, 42206)
    assert sr.delete(f"/subjects/{prefix}person").json() == [1]
    assert sr.get(f"/subjects/{prefix}job/versions/1/referencedby").json() == []
    assert sr.delete(f"/subjects/{prefix}job/versions/1").json() == 1
