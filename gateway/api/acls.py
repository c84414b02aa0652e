"""Admin routes: ACL bindings (`/v1/acls`, Kafka's CreateAcls/DescribeAcls/DeleteAcls) and
credentials (`/v1/auth/keys`, super users only, with --auth; a secret is shown once); what the
caller is and may do (`/v1/auth/whoami`, and the describe answers' authorized operations,
Kafka's KIP-430); and, between workers, the reading again of what another worker changed."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from gateway.api import all_workers
from gateway.auth.acl import CLUSTER, FIELDS, AclBinding, AclError, ResourceType
from gateway.auth.credentials import KINDS, CredentialError, Kind, new_credential
from gateway.auth.middleware import authorized_operations, principal_of
from gateway.auth.quotas import ANONYMOUS
from gateway.http.params import choice_param, json_object, json_response
from gateway.http.problem import Problem, bad_request
from gateway.state import gateway_of


def add_routes(app: web.Application) -> None:
    app.router.add_get("/v1/acls", list_acls)
    app.router.add_post("/v1/acls", add_acl)
    app.router.add_delete("/v1/acls", remove_acl)
    app.router.add_get("/v1/auth/whoami", whoami)
    app.router.add_get("/v1/auth/keys", list_keys)
    app.router.add_post("/v1/auth/keys", create_key)
    app.router.add_delete("/v1/auth/keys/{key_id}", revoke_key)
    app.router.add_get(all_workers.AUTH_REFRESH, refresh)


def with_authorized_operations(
    request: web.Request, doc: dict[str, Any], resource_type: ResourceType, name: str
) -> dict[str, Any]:
    """A describe answer, with `authorized_operations` when the query asks for them
    (`include_authorized_operations=true`, as Kafka's describe requests do)."""
    asked = choice_param(request, "include_authorized_operations", "false", ("true", "false"))
    if asked == "true":
        doc["authorized_operations"] = list(authorized_operations(request, resource_type, name))
    return doc


async def whoami(request: web.Request) -> web.Response:
    """The caller's principal, whether it is a super user, and what it may do to the cluster,
    so that a client (the console) asks instead of trying: nothing it could not learn by
    trying. With auth off every request is ANONYMOUS and may do everything."""
    auth = gateway_of(request).auth
    principal = principal_of(request)
    return json_response(
        {
            "principal": principal or ANONYMOUS,
            "auth": auth.enabled,
            "super_user": principal is not None and principal in auth.super_users,
            "cluster_authorized_operations": list(
                authorized_operations(request, "cluster", CLUSTER)
            ),
        }
    )


async def _binding(request: web.Request) -> AclBinding:
    doc = await json_object(request, gateway_of(request).settings)
    try:
        return AclBinding.from_dict(doc)
    except AclError as exc:
        raise bad_request(str(exc), "INVALID_ACL") from None


async def list_acls(request: web.Request) -> web.Response:
    """Every binding, or those whose fields equal the query's (e.g. ?principal=alice)."""
    wanted = {k: v for k, v in request.query.items() if k in FIELDS}
    unknown = sorted(set(request.query) - set(FIELDS))
    if unknown:
        raise bad_request(f"unknown filter(s): {', '.join(unknown)}", "INVALID_PARAMETER")
    acls = sorted(gateway_of(request).auth.store.state.acls)
    docs = [b.to_dict() for b in acls]
    return json_response({"acls": [d for d in docs if wanted.items() <= d.items()]})


async def add_acl(request: web.Request) -> web.Response:
    """201 with the binding; 200 if it was there already."""
    binding = await _binding(request)
    created = await gateway_of(request).auth.store.add_acl(binding)
    if created:
        await all_workers.auth_changed(gateway_of(request))
    return json_response(binding.to_dict(), status=201 if created else 200)


async def remove_acl(request: web.Request) -> web.Response:
    binding = await _binding(request)
    if not await gateway_of(request).auth.store.remove_acl(binding):
        raise Problem(404, "ACL_NOT_FOUND", "no such binding", acl=binding.to_dict())
    await all_workers.auth_changed(gateway_of(request))
    return web.Response(status=204)


def _keys_enabled(request: web.Request) -> None:
    if not gateway_of(request).auth.enabled:
        raise Problem(
            403,
            "AUTH_DISABLED",
            "credentials are managed here only with `sluice serve --auth`; offline: "
            "`sluice auth create-key --data-dir DIR --principal NAME`",
        )


async def list_keys(request: web.Request) -> web.Response:
    """Every credential's id, principal, type and creation time; never a hash or secret."""
    _keys_enabled(request)
    records = gateway_of(request).auth.store.state.credentials.records
    return json_response({"keys": [r.public() for r in records]})


async def create_key(request: web.Request) -> web.Response:
    """`{"principal", "type": "api-key"|"basic"}` -> the new credential with its secret, which
    is not stored and cannot be shown again."""
    _keys_enabled(request)
    doc: dict[str, Any] = await json_object(request, gateway_of(request).settings)
    unknown = sorted(set(doc) - {"principal", "type"})
    if unknown:
        raise bad_request(f"unknown field(s): {', '.join(unknown)}", "INVALID_REQUEST")
    kind = doc.get("type", "api-key")
    if kind not in KINDS:
        raise bad_request(f"type must be one of {', '.join(KINDS)}", "INVALID_PARAMETER")
    principal = doc.get("principal")
    if not isinstance(principal, str):
        raise bad_request("principal must be a string", "INVALID_PRINCIPAL")
    try:
        secret, record = new_credential(principal, _kind(kind))
    except CredentialError as exc:
        raise bad_request(str(exc), "INVALID_PRINCIPAL") from None
    await gateway_of(request).auth.store.add_credential(record)
    await all_workers.auth_changed(gateway_of(request))
    return json_response({**record.public(), "secret": secret}, status=201)


def _kind(value: str) -> Kind:
    return "basic" if value == "basic" else "api-key"


async def revoke_key(request: web.Request) -> web.Response:
    _keys_enabled(request)
    key_id = request.match_info["key_id"]
    if not await gateway_of(request).auth.store.remove_credential(key_id):
        raise Problem(404, "KEY_NOT_FOUND", f"no credential has the id {key_id!r}")
    await all_workers.auth_changed(gateway_of(request))
    return web.Response(status=204)


async def refresh(request: web.Request) -> web.Response:
    """Another worker changed the keys or ACLs: read them again (the shared files; in a
    cluster, etcd's latest put of a key, as on an unknown key) before answering 204."""
    await gateway_of(request).auth.store.refresh()
    return web.Response(status=204)
