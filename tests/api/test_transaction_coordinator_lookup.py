"""A transaction call whose coordinator cannot be found here: sent on to the node named (the
forwarding middleware) unless it was forwarded here already, else answered 503
COORDINATOR_NOT_AVAILABLE with Retry-After, never a misdirected 421. The cluster test
(tests/cluster/test_transactions.py) shows the first begins through a node that is not the
controller; the cases here are each way a lookup can fail, whatever the timing."""

from __future__ import annotations

import pytest
from aiohttp.test_utils import make_mocked_request

from gateway.api.problems import problem_of
from gateway.api.transactions import _at_coordinator
from replication.errors import LeaderNotAvailable, NotController, NotLeader
from replication.node_contract import FORWARDED_BY

FAILURES = [
    NotLeader("node 2 leads __transaction_state-7", 2),
    NotController("__transaction_state does not exist yet; the controller (node 0) makes it"),
    LeaderNotAvailable("__transaction_state-7 has no leader on this node yet; retry shortly"),
]


@pytest.mark.parametrize("failure", FAILURES, ids=lambda e: type(e).__name__)
def test_a_forwarded_call_that_finds_no_coordinator_here_answers_503(failure: Exception) -> None:
    request = make_mocked_request("POST", "/v1/transactions/tx", headers={FORWARDED_BY: "1"})
    with pytest.raises(Exception) as caught, _at_coordinator(request, "tx"):
        raise failure
    problem = problem_of(caught.value, "POST", "/v1/transactions/tx")
    assert (problem.status, problem.code) == (503, "COORDINATOR_NOT_AVAILABLE")
    assert problem.headers == {"Retry-After": "1"}
    assert str(failure) in problem.detail and "'tx'" in problem.detail


@pytest.mark.parametrize("failure", FAILURES[:2], ids=lambda e: type(e).__name__)
def test_a_clients_call_goes_on_to_the_node_named(failure: Exception) -> None:
    request = make_mocked_request("POST", "/v1/transactions/tx")
    with pytest.raises(type(failure)), _at_coordinator(request, "tx"):
        raise failure
