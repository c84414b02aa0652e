"""Every route the app serves has an access rule, and every rule a route and a place in the
OpenAPI contract, whose 401 and 403 answers it declares: no route is forgotten; and what an
authorized-operations answer asks about covers every operation a route checks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gateway.app import build_app
from gateway.auth.acl import RESOURCE_OPERATIONS
from gateway.auth.route_operations import ROUTES, access, route_template
from gateway.settings import Settings
from openapi import SPEC

CONTRACT: dict[str, Any] = yaml.safe_load(SPEC.read_text())


def _app_routes(tmp_path: Path) -> set[tuple[str, str]]:
    """(method, template) of every route; a REST Proxy path's trailing-slash twin counts as
    the path (both must be served)."""
    app = build_app(Settings(data_dir=tmp_path, auth=True))
    return {
        (route.method, route_template(route.resource.canonical))
        for route in app.router.routes()
        if route.method != "HEAD" and route.resource is not None
    }


def test_every_route_has_an_access_rule_and_every_rule_a_route(tmp_path: Path) -> None:
    assert _app_routes(tmp_path) == set(ROUTES)


def test_head_follows_get() -> None:
    assert access("HEAD", "/v1/topics") == access("GET", "/v1/topics")
    assert access("GET", "/nowhere") is None


def test_a_rest_proxy_path_with_a_trailing_slash_has_the_paths_rule() -> None:
    assert access("GET", "/topics/{topic}/") == access("GET", "/topics/{topic}") is not None


def test_the_contract_declares_what_each_rule_can_answer() -> None:
    for (method, path), rule in ROUTES.items():
        operation = CONTRACT["paths"][path][method.lower()]
        declared = operation["responses"]
        if rule.audience == "public":
            assert "401" not in declared, path
            continue
        assert "401" in declared, (method, path)
        can_deny = (
            rule.audience in ("super_user", "internal")
            or rule.needs
            or (rule.also and not rule.also.startswith("lists only"))
        )
        assert ("403" in declared) == bool(can_deny), (method, path)


def test_authorized_operations_cover_every_operation_a_route_checks() -> None:
    """A caller told its authorized operations (KIP-430) is told of each one a route may
    refuse it: those the rules check, and create on a topic or the cluster (a topic's
    creation, checked by its handler)."""
    checked = {
        (need.resource_type, need.operation) for rule in ROUTES.values() for need in rule.needs
    }
    checked |= {("topic", "create"), ("cluster", "create")}
    listed = {(kind, op) for kind, ops in RESOURCE_OPERATIONS.items() for op in ops}
    assert checked <= listed, sorted(checked - listed)
