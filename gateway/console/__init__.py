"""The web console's static assets (HTML, CSS, JavaScript modules), shipped as package data and
served by gateway.api.console; imports nothing of Sluice."""

from __future__ import annotations

from pathlib import Path

STATIC = Path(__file__).resolve().parent / "static"
# The console's routes: public even with --auth (the page asks for credentials itself and
# sends them with each /v1 call; the assets hold no data).
INDEX_ROUTE = "/console"
SLASHED_ROUTE = "/console/"  # redirected to the page: its files are relative to /console
ASSET_ROUTE = "/console/{asset}"
ROUTES = frozenset({INDEX_ROUTE, SLASHED_ROUTE, ASSET_ROUTE})
