"""Quota routes (`/v1/quotas`, Kafka's DescribeClientQuotas and AlterClientQuotas): a
principal's produce and fetch byte rates and request rate, or `<default>`'s for every
principal without its own. Stored where the ACLs are, so every node enforces them."""

from __future__ import annotations

from aiohttp import web

from gateway.api import all_workers
from gateway.auth.quotas import FIELD_OF, KINDS, Quota, QuotaError, check_entity
from gateway.http.params import json_object, json_response
from gateway.http.problem import Problem, bad_request
from gateway.state import gateway_of


def add_routes(app: web.Application) -> None:
    app.router.add_get("/v1/quotas", list_quotas)
    app.router.add_get("/v1/quotas/{principal}", describe_quota)
    app.router.add_put("/v1/quotas/{principal}", set_quota)
    app.router.add_delete("/v1/quotas/{principal}", remove_quota)


def _entity(request: web.Request) -> str:
    try:
        return check_entity(request.match_info["principal"])
    except QuotaError as exc:
        raise bad_request(str(exc), "INVALID_PARAMETER") from None


async def list_quotas(request: web.Request) -> web.Response:
    """Every configured quota, `<default>` included, by principal."""
    quotas = gateway_of(request).auth.store.state.quotas
    return json_response(
        {"quotas": [{"principal": name, **quotas[name].to_dict()} for name in sorted(quotas)]}
    )


async def describe_quota(request: web.Request) -> web.Response:
    """A principal's own quota (null when it has none) and the rates it is held to, its own
    or `<default>`'s."""
    entity = _entity(request)
    auth = gateway_of(request).auth
    own = auth.store.state.quotas.get(entity)
    rates = auth.quotas.rates(entity)
    return json_response(
        {
            "principal": entity,
            "quota": None if own is None else own.to_dict(),
            "effective": {FIELD_OF[kind]: rates.get(kind) for kind in KINDS},
        }
    )


async def set_quota(request: web.Request) -> web.Response:
    """Replace the principal's quota: the body names the rates (null or absent: none of its
    own, `<default>`'s applies)."""
    entity = _entity(request)
    doc = await json_object(request, gateway_of(request).settings)
    try:
        quota = Quota.from_dict(doc)
    except QuotaError as exc:
        raise bad_request(str(exc), "INVALID_QUOTA") from None
    if quota.empty:
        raise bad_request(
            "a quota needs at least one rate; DELETE /v1/quotas/{principal} removes one",
            "INVALID_QUOTA",
        )
    await gateway_of(request).auth.store.set_quota(entity, quota)
    await all_workers.auth_changed(gateway_of(request))
    return json_response({"principal": entity, **quota.to_dict()})


async def remove_quota(request: web.Request) -> web.Response:
    entity = _entity(request)
    if not await gateway_of(request).auth.store.remove_quota(entity):
        raise Problem(404, "QUOTA_NOT_FOUND", f"principal {entity!r} has no quota of its own")
    await all_workers.auth_changed(gateway_of(request))
    return web.Response(status=204)
