"""The registry at the root of its own port (--schema-registry-port), for clients that cannot
take a path in its URL: the same routes, credentials and forwarding as under the prefix."""

from __future__ import annotations

import ssl

from aiohttp import web

from gateway.api.forwarding import forwarding_middleware
from gateway.api.problems import problem_middleware
from gateway.api.schema_registry import routes
from gateway.api.schema_registry.media import AT_ROOT, PREFIX
from gateway.auth.middleware import AUTH, ROUTE_PREFIX, auth_middleware
from gateway.state import GATEWAY, Gateway


def build_app(gateway: Gateway) -> web.Application:
    """The registry's routes at the root, over the node's gateway state."""
    settings = gateway.settings
    app = web.Application(
        client_max_size=settings.max_request_bytes,
        middlewares=[
            problem_middleware,
            *([auth_middleware] if settings.auth else []),
            forwarding_middleware,
        ],
        handler_args={"auto_decompress": False},
    )
    app[AT_ROOT] = True
    app[ROUTE_PREFIX] = PREFIX
    app[GATEWAY] = gateway
    app[AUTH] = gateway.auth
    routes.add_routes(app)
    return app


async def serve(gateway: Gateway, port: int, context: ssl.SSLContext | None) -> web.AppRunner:
    """Listen on `port` (shared by the workers of one machine; with TLS as the gateway's port
    is); the runner to clean up."""
    runner = web.AppRunner(build_app(gateway), access_log=None)
    await runner.setup()
    settings = gateway.settings
    site = web.TCPSite(
        runner, settings.host, port, ssl_context=context, reuse_port=settings.workers > 1
    )
    await site.start()
    return runner
