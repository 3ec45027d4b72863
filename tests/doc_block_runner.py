"""Runs one documentation block in a process of its own (tests/test_docs_code.py).

Reads a JSON object from stdin: ``blocks`` (the blocks to run in one namespace, in
order: ``source``, ``filename``, ``line``) and ``given`` (names to define first, on
``memory://``). A block with ``await`` (or ``async with``) at top level runs in an event
loop, as in the asyncio REPL; then every block of the run shares that one loop. The
placeholder functions of the examples (``do_work``, ``build_report``...) are defined too,
as coroutine functions when the blocks await. Exits 0 once the last block has run,
without waiting for what the blocks left open (sessions end with the process).
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import json
import os
import sys
import traceback
from types import CodeType
from typing import Any

import semaphore_recipes as sr
import semaphore_recipes.aio

#: the examples' stand-ins for the user's own work: they accept anything
PLACEHOLDERS = ("do_work", "build_report", "run_backup", "index_shard")


def _compile(block: dict[str, Any]) -> CodeType:
    # blank lines in front: a traceback names the line of the document
    text = "\n" * (block["line"] - 1) + block["source"]
    code: CodeType = compile(text, block["filename"], "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    return code


def _placeholders(awaited: bool) -> dict[str, Any]:
    def work(*args: Any, **kwargs: Any) -> str:
        return "the report"

    async def async_work(*args: Any, **kwargs: Any) -> str:
        return "the report"

    return {name: async_work if awaited else work for name in PLACEHOLDERS}


def _given_sync(names: list[str], ns: dict[str, Any]) -> None:
    for name in names:
        if name == "backend":
            ns["backend"] = sr.connect("memory://")
        elif name == "sem":
            ns["sem"] = ns["backend"].semaphore("db-pool", capacity=10)
        elif name == "permit":
            ns["permit"] = ns["sem"].acquire()
        else:
            raise ValueError(f"unknown given name {name!r}")


async def _given_async(names: list[str], ns: dict[str, Any]) -> None:
    for name in names:
        if name == "backend":
            ns["backend"] = await sr.aio.connect("memory://")
        elif name == "sem":
            ns["sem"] = ns["backend"].semaphore("db-pool", capacity=10)
        elif name == "permit":
            ns["permit"] = await ns["sem"].acquire()
        else:
            raise ValueError(f"unknown given name {name!r}")


def main() -> None:
    spec = json.load(sys.stdin)
    codes = [_compile(block) for block in spec["blocks"]]
    awaited = any(code.co_flags & inspect.CO_COROUTINE for code in codes)
    ns: dict[str, Any] = {"__name__": "__main__", **_placeholders(awaited)}
    if not awaited:
        _given_sync(spec["given"], ns)
        for code in codes:
            exec(code, ns)
        return

    async def run() -> None:
        await _given_async(spec["given"], ns)
        for code in codes:
            result = eval(code, ns)  # a coroutine when the block awaits
            if inspect.iscoroutine(result):
                await result

    asyncio.run(run())


if __name__ == "__main__":
    try:
        main()
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    sys.stdout.flush()
    os._exit(0)
