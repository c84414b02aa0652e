"""A console consumer's calls (`gateway.cli.consumer.call_retrying`) against a real HTTP server:
what a cluster answers while it moves a leader (503, 421) is retried, a refusal is not."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest
from aiohttp import web
from pytest_aiohttp import AiohttpServer

from gateway.cli.client import CommandError
from gateway.cli.consumer import call_retrying

PROBLEM = "application/problem+json"


def problem(status: int, code: str) -> web.Response:
    body = {"title": "refused", "status": status, "detail": f"said {status}", "code": code}
    return web.json_response(body, status=status, content_type=PROBLEM)


async def serving(aiohttp_server: AiohttpServer, answers: list[web.Response]) -> str:
    """A server answering each request with the next of `answers`; its URL."""

    async def handle(request: web.Request) -> web.Response:
        return answers.pop(0)

    app = web.Application()
    app.router.add_get("/records", handle)
    return str((await aiohttp_server(app)).make_url("/records"))


@pytest.mark.parametrize(("status", "code"), [(421, "NOT_LEADER"), (503, "LEADER_NOT_AVAILABLE")])
async def test_a_leader_change_is_waited_out(
    aiohttp_server: AiohttpServer, capsys: pytest.CaptureFixture[str], status: int, code: str
) -> None:
    answers = [problem(status, code), problem(status, code), web.json_response({"records": []})]
    url = await serving(aiohttp_server, answers)
    async with aiohttp.ClientSession() as session:
        got: Any = await call_retrying(session, "GET", url)
    assert got == {"records": []} and answers == []
    assert capsys.readouterr().err.count("retrying") == 1  # said once per outage


async def test_a_refusal_is_not_retried(aiohttp_server: AiohttpServer) -> None:
    answers = [problem(400, "INVALID_REQUEST"), web.json_response({"records": []})]
    url = await serving(aiohttp_server, answers)
    async with aiohttp.ClientSession() as session:
        with pytest.raises(CommandError) as refused:
            await call_retrying(session, "GET", url)
    assert refused.value.status == 400 and len(answers) == 1
