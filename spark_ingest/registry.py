"""The driver's reads of a Confluent-compatible schema registry, over its HTTP API.

Each topic's values are typed with the subject `<topic>-value` (TopicNameStrategy): every
version of it, soft-deleted ones too (records written with them are still in the log), each
with the schemas it references. What is read becomes the run's plan (`to_json`), so a rerun
after a crash types its records with exactly the versions the interrupted run saw.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from spark_ingest.errors import IngestError
from spark_ingest.typed_values import Version

MEDIA_TYPE = "application/vnd.schemaregistry.v1+json"
TIMEOUT_S = 30.0
SUBJECT_NOT_FOUND = 40401


def subject_of(topic: str) -> str:
    return f"{topic}-value"


def get(url: str, path: str) -> Any:
    """The JSON answer of GET `url` + `path`; IngestError with the registry's own message."""
    request = urllib.request.Request(url.rstrip("/") + path, headers={"Accept": MEDIA_TYPE})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:
            return json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        body = exc.read()
        try:
            error = json.loads(body)
            code, message = int(error["error_code"]), str(error["message"])
        except (ValueError, KeyError, TypeError):
            code, message = exc.code, body[:200].decode("utf-8", "replace")
        raise RegistryError(code, f"schema registry {url}: GET {path}: {message}") from exc
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise IngestError(f"schema registry {url}: GET {path}: {exc}") from exc


class RegistryError(IngestError):
    """An error answer of the registry, with its Confluent error code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def _quoted(subject: str) -> str:
    return urllib.parse.quote(subject, safe="")


def version(url: str, subject: str, number: int) -> dict[str, Any]:
    found: dict[str, Any] = get(url, f"/subjects/{_quoted(subject)}/versions/{number}?deleted=true")
    return found


def references(url: str, doc: dict[str, Any], chain: tuple[str, ...]) -> list[tuple[str, str]]:
    """The schemas a version references, each after its own, dependencies first: the name the
    referencing schema gives it (a Protobuf import path) and its text."""
    found_refs: list[tuple[str, str]] = []
    for ref in doc.get("references") or []:
        key = f"{ref['subject']}/{ref['version']}"
        if key in chain:
            raise IngestError(f"schema registry {url}: references loop through {key}")
        found = version(url, str(ref["subject"]), int(ref["version"]))
        found_refs += references(url, found, (*chain, key))
        found_refs.append((str(ref["name"]), str(found["schema"])))
    return found_refs


def subject_versions(url: str, topic: str) -> list[Version]:
    """Every version of the topic's value subject, oldest first."""
    subject = subject_of(topic)
    try:
        numbers = get(url, f"/subjects/{_quoted(subject)}/versions?deleted=true")
    except RegistryError as exc:
        if exc.code == SUBJECT_NOT_FOUND:
            raise IngestError(f"schema registry {url} has no subject {subject}") from exc
        raise
    versions: list[Version] = []
    for number in sorted(int(n) for n in numbers):
        doc = version(url, subject, number)
        refs = references(url, doc, (f"{subject}/{number}",))
        versions.append(
            Version(
                subject,
                number,
                int(doc["id"]),
                str(doc["schema"]),
                tuple(text for _, text in refs),
                str(doc.get("schemaType", "AVRO")),
                tuple(name for name, _ in refs),
            )
        )
    return versions


def fetch(url: str, topics: tuple[str, ...]) -> dict[str, list[Version]]:
    """The versions of each topic's value subject."""
    return {topic: subject_versions(url, topic) for topic in topics}


def to_json(found: dict[str, list[Version]]) -> str:
    """The versions as the run's plan stores them."""
    return json.dumps(
        {
            "registry": {
                topic: [
                    {
                        "subject": v.subject,
                        "version": v.version,
                        "id": v.schema_id,
                        "schema": v.text,
                        "references": list(v.references),
                        "schema_type": v.schema_type,
                        "reference_names": list(v.reference_names),
                    }
                    for v in versions
                ]
                for topic, versions in sorted(found.items())
            }
        },
        sort_keys=True,
    )


def from_json(text: str) -> dict[str, list[Version]]:
    """The versions a plan stored (`to_json`)."""
    try:
        stored = json.loads(text)["registry"]
        return {
            topic: [
                Version(
                    str(v["subject"]),
                    int(v["version"]),
                    int(v["id"]),
                    str(v["schema"]),
                    tuple(str(r) for r in v["references"]),
                    str(v["schema_type"]),
                    # plans stored before the names were kept have none
                    tuple(str(r) for r in v.get("reference_names", ())),
                )
                for v in versions
            ]
            for topic, versions in stored.items()
        }
    except (ValueError, KeyError, TypeError) as exc:
        raise IngestError(
            f"the unfinished run's stored registry versions are malformed: {exc}"
        ) from exc
