#!/usr/bin/env python3
"""Mutation check of the fault campaign's checker: every check it makes must fail a test of
tests/cluster/test_checker.py when disabled.

For each check site of tests/cluster/checker.py it makes a mutant of the module and runs
test_checker.py against it until a test fails (in this process, in one pytest session that
collects the tests once: the mutant's functions replace the checker's code, the file on disk is
never touched), then lists the mutants no test killed. The sites:

- every `verdict.add(...)` call (a violation the checker reports), replaced by `pass`;
- every disjunct of a condition that guards one (`if a or b: verdict.add(...)`), forced False,
  so that each of the conditions one call serves is tested on its own;
- every source of what one call judges: the operands of the anomalies the workload reported
  (`history.anomalies + history.side.anomalies`, each replaced by `[]`), each feed of the
  divergence reference (`reference.observe(...)`) and of the high watermark reports
  (`events[...].append(...)`), replaced by `pass`.

Usage: .venv/bin/python scripts/mutate_checker.py [-v] [--list]
Exit status 0 when no mutant survives (tests/cluster/test_checker_mutants.py runs it in the
suite: a new check must come with a test that fails without it).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import sys
import time
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pytest

CHECKER = "tests/cluster/checker.py"
# The repository: this script's parent directory's parent (scripts/..), else the working one.
ROOT = Path(__file__).resolve().parent.parent
if not (ROOT / CHECKER).exists():
    ROOT = Path.cwd()
TESTS = "tests/cluster/test_checker.py"


@dataclass(frozen=True)
class Mutant:
    line: int
    label: str
    start: tuple[int, int]  # (line, byte column) of the span replaced
    end: tuple[int, int]
    replacement: str

    @property
    def kinds(self) -> tuple[str, ...]:
        """The kinds of violation the mutant's check reports (in its label's brackets)."""
        if not self.label.startswith("["):
            return ()
        named = self.label[1 : self.label.index("]")].split("/")
        return tuple(n for kind in named for n in (kind, kind.replace("-", "_")))

    def apply(self, source: str) -> str:
        lines = source.encode().splitlines(keepends=True)
        offsets = [0]
        for line in lines:
            offsets.append(offsets[-1] + len(line))
        data = source.encode()
        a = offsets[self.start[0] - 1] + self.start[1]
        b = offsets[self.end[0] - 1] + self.end[1]
        return (data[:a] + self.replacement.encode() + data[b:]).decode()


def _span(node: ast.expr | ast.stmt) -> tuple[tuple[int, int], tuple[int, int]]:
    assert node.end_lineno is not None and node.end_col_offset is not None
    return (node.lineno, node.col_offset), (node.end_lineno, node.end_col_offset)


def _is_add(node: ast.AST) -> bool:
    """verdict.add(...) or self.verdict.add(...)"""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return False
    target = node.func.value
    name = target.id if isinstance(target, ast.Name) else getattr(target, "attr", None)
    return node.func.attr == "add" and name == "verdict"


def _is_feed(node: ast.AST) -> bool:
    """reference.observe(...) or events[...].append(...)"""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return False
    target = node.func.value
    if node.func.attr == "observe":
        return isinstance(target, ast.Name) and target.id == "reference"
    return (
        node.func.attr == "append"
        and isinstance(target, ast.Subscript)
        and isinstance(target.value, ast.Name)
        and target.value.id == "events"
    )


def _kind(call: ast.Call) -> str:
    """The kind of violation a verdict.add call reports ("reported": one the workload gave)."""
    first = call.args[0] if call.args else None
    if isinstance(first, ast.Constant) and isinstance(first.value, str):
        return first.value
    return "reported"


def _adds(stmts: list[ast.stmt]) -> list[ast.Call]:
    return [n for s in stmts for n in ast.walk(s) if isinstance(n, ast.Call) and _is_add(n)]


def _disjuncts(test: ast.expr) -> list[ast.expr]:
    """The operands of every `or` in a condition, through the `and`s and `or`s around it."""
    out: list[ast.expr] = []
    if isinstance(test, ast.BoolOp):
        if isinstance(test.op, ast.Or):
            out += test.values
        for value in test.values:
            out += _disjuncts(value)
    return out


def mutants(source: str) -> list[Mutant]:
    tree = ast.parse(source)
    found: list[Mutant] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and _is_add(node.value):
            assert isinstance(node.value, ast.Call)
            found.append(
                Mutant(node.lineno, f"[{_kind(node.value)}] add -> pass", *_span(node), "pass")
            )
        elif isinstance(node, ast.Expr) and _is_feed(node.value):
            text = ast.unparse(node.value)
            found.append(Mutant(node.lineno, f"feed `{text[:60]}` -> pass", *_span(node), "pass"))
        elif isinstance(node, ast.If) and _adds(node.body):
            kinds = "/".join(sorted({_kind(c) for c in _adds(node.body)}))
            for operand in _disjuncts(node.test):
                text = " ".join(ast.unparse(operand).split())
                found.append(
                    Mutant(
                        operand.lineno,
                        f"[{kinds}] condition `{text[:60]}` -> False",
                        *_span(operand),
                        "False",
                    )
                )
        elif (
            isinstance(node, ast.For)
            and _adds(node.body)
            and isinstance(node.iter, ast.BinOp)
            and isinstance(node.iter.op, ast.Add)
        ):
            kinds = "/".join(sorted({_kind(c) for c in _adds(node.body)}))
            for operand in (node.iter.left, node.iter.right):
                found.append(
                    Mutant(
                        operand.lineno,
                        f"[{kinds}] source `{ast.unparse(operand)}` -> []",
                        *_span(operand),
                        "[]",
                    )
                )
    return sorted(found, key=lambda m: (m.start, m.label))


def _functions(namespace: dict[str, Any], module: str) -> dict[str, types.FunctionType]:
    """Every function and method defined in the module, by qualified name."""
    out: dict[str, types.FunctionType] = {}
    for name, value in namespace.items():
        if isinstance(value, types.FunctionType) and value.__module__ == module:
            out[name] = value
        elif isinstance(value, type) and value.__module__ == module:
            for attr, member in vars(value).items():
                if isinstance(member, types.FunctionType):
                    out[f"{name}.{attr}"] = member
    return out


class Run(Protocol):
    """Runs test_checker.py's tests, those named after one of `kinds` first, up to the first
    that fails; the failed tests' ids."""

    def __call__(self, kinds: tuple[str, ...] = ()) -> list[str]: ...


class _Runs:
    """A pytest plugin: test_checker.py is collected once, then its loop runs `judge`, which
    runs the tests as often as it needs (against the checker as it is, the control, each
    mutant), each time until one fails."""

    def __init__(self, judge: Callable[[Run], int]) -> None:
        self.judge = judge
        self.failed: list[str] = []
        self.killer: str | None = None  # the test that failed last: tried first the next time
        self.code: int | None = None

    def pytest_runtest_logreport(self, report: Any) -> None:
        if report.failed:
            self.failed.append(report.nodeid)

    def run(self, session: Any, kinds: tuple[str, ...]) -> list[str]:
        """Every test up to the first that fails (first the last one that failed, then those
        named after one of `kinds`, then the rest); the failed tests' ids. A test that fails
        does so whatever ran before it: the order changes how soon a mutant is found out, not
        whether."""
        items = sorted(
            session.items,
            key=lambda item: (
                item.nodeid != self.killer,
                not any(kind in item.nodeid for kind in kinds),
            ),
        )
        self.failed = []
        for item in items:
            item.ihook.pytest_runtest_protocol(item=item, nextitem=None)
            if self.failed:
                self.killer = self.failed[0]
                break
        return self.failed

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: Any) -> bool:
        if session.testsfailed:  # collection errors: judge nothing
            return False
        self.code = self.judge(lambda kinds=(): self.run(session, kinds))
        return True


def in_one_session(judge: Callable[[Run], int], verbose: bool) -> int:
    """`judge(run)` inside one pytest session over test_checker.py, `run()` running its tests
    (stopping at the first failure) and giving the failed tests' ids; judge's exit status."""
    runs = _Runs(judge)
    out = io.StringIO()
    # -s: pytest leaves the process's stdout alone, so the judge's lines reach it as they come.
    args = ["-s", "-p", "no:cacheprovider", str(ROOT / TESTS)]
    with contextlib.ExitStack() as quiet:
        if verbose:
            args += ["-q", "--no-header"]
        else:  # and no traceback formatted for a failure
            args += ["-q", "--tb=no"]
            quiet.enter_context(contextlib.redirect_stdout(out))
            quiet.enter_context(contextlib.redirect_stderr(out))
        code = pytest.main(args, plugins=[runs])
    if runs.code is None:
        raise RuntimeError(f"pytest exited {code} before running the tests:\n{out.getvalue()}")
    return runs.code


@contextlib.contextmanager
def mutated(module: types.ModuleType, source: str) -> Any:
    """The module's functions run the code of `source` (the same module, mutated)."""
    namespace: dict[str, Any] = {"__name__": module.__name__, "__file__": module.__file__}
    exec(compile(source, str(module.__file__), "exec"), namespace)
    originals = _functions(vars(module), module.__name__)
    replaced = _functions(namespace, module.__name__)
    saved = {name: f.__code__ for name, f in originals.items()}
    try:
        for name, f in originals.items():
            new = replaced[name].__code__
            if new.co_freevars != f.__code__.co_freevars:
                raise RuntimeError(f"{name}: free variables differ, cannot swap its code")
            f.__code__ = new
        yield
    finally:
        for name, f in originals.items():
            f.__code__ = saved[name]


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="show pytest's output")
    parser.add_argument("--list", action="store_true", help="list the mutants, run nothing")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    import tests.cluster.checker as checker

    source = (ROOT / CHECKER).read_text()
    found = mutants(source)
    if args.list:
        for m in found:
            print(f"{CHECKER}:{m.line}: {m.label}")
        return 0
    began = time.monotonic()
    stdout = sys.stdout

    def say(*parts: str, end: str = "\n") -> None:
        print(*parts, end=end, file=stdout, flush=True)

    def judge(run: Run) -> int:
        if failed := run():
            say(f"test_checker.py fails on the checker as it is: {failed}")
            return 2
        # A control: the checker that finds nothing must fail the tests, or the swap is broken.
        control = source.replace("    return verdict\n", "    return Verdict()\n", 1)
        with mutated(checker, control):
            if not run():
                say("the control mutant (a checker that reports nothing) survived: swap broken")
                return 2
        survivors = []
        for m in found:
            with mutated(checker, m.apply(source)):
                failed = run(m.kinds)
            say(f"{'killed  ' if failed else 'SURVIVED'} {CHECKER}:{m.line}: {m.label}", end="")
            say(f"  <- {failed[0].split('::')[-1]}" if failed else "")
            if not failed:
                survivors.append(m)
        say(
            f"{len(found)} mutants, {len(found) - len(survivors)} killed, "
            f"{len(survivors)} survived ({time.monotonic() - began:.1f} s)"
        )
        for m in survivors:
            say(f"  survivor: {CHECKER}:{m.line}: {m.label}")
        return 1 if survivors else 0

    return in_one_session(judge, args.verbose)


if __name__ == "__main__":
    sys.exit(main())
