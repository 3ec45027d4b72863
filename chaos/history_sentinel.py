"""Redis's history across Sentinel failovers: one sequence of commands stitched from
the append-only files of the primaries, epoch by epoch.

Each epoch has one primary. Its AOF (``appendfsync always``, never rewritten by the
campaign) holds the commands it received as a replica since it last synced (at the
start of the set, or after a full resync, which rewrites a node's AOF: its base file is
then a snapshot of what the history already has, and is ignored), then its own commands
as the primary. So the history is epoch 1's primary's commands, then for each later
epoch: find where the new primary's commands start in the history so far (clock ticks,
a few a second, make commands unique), follow the run the two have in common, and
carry on with the new primary's own commands. The history's commands after that common
run were lost with the old primary: :class:`Stitched` names them, per epoch, for the
report (with ``wait_replicas=1`` no acknowledged grant or fenced write may be among
them; the runner checks the grants, the checker the fenced writes).

``SELECT``, ``MULTI`` and ``EXEC`` are left out (a node writes ``SELECT`` where its own
file needs one; the checker's reader ignores all three).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .history_redis import RedisLayout

Command = list[bytes]
# not history: where a node writes them depends on the node (chaos/history_redis.py
# ignores them too)
_UNPLACED = (b"select", b"multi", b"exec")
_BASE_EMPTY_BYTES = 200  # an empty RDB-preamble base file is smaller


@dataclass(frozen=True)
class EpochLog:
    """One epoch's primary (a node's name) and the commands of its AOF's incremental
    files; ``base_has_data``: its base file is not empty (a snapshot of a full resync)."""

    primary: str
    commands: Sequence[Command]
    base_has_data: bool = False


@dataclass
class Stitched:
    commands: list[Command] = field(default_factory=list)
    # (epoch number from 1, the history's commands lost when that epoch began)
    lost: list[tuple[int, list[Command]]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def lost_commands(self) -> list[Command]:
        return [command for _, commands in self.lost for command in commands]


def _manifest(directory: Path) -> list[tuple[str, int, str]]:
    """(file name, sequence number, type) of each line of ``directory``'s manifest."""
    manifest = next(directory.glob("*.manifest"), None)
    if manifest is None:
        return []
    found = []
    for line in manifest.read_text().splitlines():
        fields = line.split()
        found.append((fields[fields.index("file") + 1], int(fields[fields.index("seq") + 1]),
                      fields[fields.index("type") + 1]))  # fmt: skip
    return found


def current_segment(directory: Path) -> int | None:
    """The sequence number of the AOF's base file in use (a node's segment: a full
    resync starts a new one), None without a manifest."""
    return next((seq for _, seq, kind in _manifest(directory) if kind == "b"), None)


def segment(directory: Path, base: int) -> tuple[list[Path], bool, list[str]]:
    """The incremental files of segment ``base`` of an AOF kept whole (``aof-disable-
    auto-gc yes``: a rewrite keeps the files it replaced, as history): those numbered
    from ``base`` up to the next base. Also whether its base file holds data, and the
    problems found."""
    entries = _manifest(directory)
    bases = sorted(seq for name, seq, _ in entries if ".base." in name)
    if base not in bases:
        return [], False, [f"no AOF base file {base} in {directory}"]
    later = [seq for seq in bases if seq > base]
    end = later[0] if later else None
    files = sorted(
        (seq, directory / name) for name, seq, _ in entries
        if ".incr." in name and seq >= base and (end is None or seq < end)
    )  # fmt: skip
    base_file = next(directory / name for name, seq, _ in entries
                     if ".base." in name and seq == base)  # fmt: skip
    return [path for _, path in files], base_file.stat().st_size > _BASE_EMPTY_BYTES, []


def history_commands(commands: Iterable[Command]) -> list[Command]:
    return [c for c in commands if c and c[0].lower() not in _UNPLACED]


def _common_run(history: Sequence[Command], start: int, commands: Sequence[Command]) -> int:
    run = 0
    limit = min(len(history) - start, len(commands))
    while run < limit and history[start + run] == commands[run]:
        run += 1
    return run


def place(history: Sequence[Command], commands: Sequence[Command]) -> tuple[int, int] | None:
    """(where ``commands`` start in ``history``, how many they follow it): the start with
    the longest common run, the latest of equals; None if their first is nowhere."""
    if not commands:
        return None
    first = commands[0]
    best: tuple[int, int] | None = None
    for start, command in enumerate(history):
        if command == first:
            run = _common_run(history, start, commands)
            if best is None or run >= best[1]:
                best = (start, run)
    return best


def stitch(epochs: Sequence[EpochLog]) -> Stitched:
    """The history of the data set across ``epochs`` (in order), and what each new
    primary lacked of it."""
    out = Stitched()
    for number, epoch in enumerate(epochs, start=1):
        commands = history_commands(epoch.commands)
        if number == 1:
            if epoch.base_has_data:
                out.problems.append(f"epoch 1 ({epoch.primary}): a base file holds data")
            out.commands = commands
            continue
        if not commands:  # nothing since its last sync: the history stands
            continue
        placed = place(out.commands, commands)
        if placed is None:
            unplaced = " (its base file holds data)" if epoch.base_has_data else ""
            out.problems.append(
                f"epoch {number} ({epoch.primary}): its first command {_brief(commands[0])} "
                f"is not in the history so far{unplaced}"
            )
            out.commands += commands
            continue
        start, run = placed
        lost = out.commands[start + run :]
        if lost:
            out.lost.append((number, lost))
        out.commands = out.commands[: start + run] + commands[run:]
    return out


def _brief(command: Command) -> str:
    return " ".join(part[:40].decode(errors="replace") for part in command[:3])


def lost_kinds(commands: Iterable[Command], layout: RedisLayout) -> Counter[str]:
    """The lost commands by what they did (for the report)."""
    kinds: Counter[str] = Counter()
    clock, data = layout.clock_key.encode(), layout.data_key.encode()
    for command in commands:
        name, key = command[0].lower().decode(), command[1] if len(command) > 1 else b""
        if name == "hset" and key == layout.entries_key:
            held = any(json.loads(v).get("h") is True for v in command[3::2])
            kinds["grant" if held else "entry"] += 1
        elif name == "set" and key == data:
            kinds["fenced write"] += 1
        elif name == "set" and key == clock:
            kinds["clock tick"] += 1
        elif key.startswith(layout.lease_prefix):
            kinds[f"lease {name}"] += 1
        else:
            kinds[name] += 1
    return kinds


def lost_grants(commands: Iterable[Command], layout: RedisLayout) -> set[tuple[str, int]]:
    """(entry id, token) of every entry whose grant (its held mark) was lost."""
    grants = set()
    for command in commands:
        if command[0].lower() == b"hset" and command[1] == layout.entries_key:
            for key, value in zip(command[2::2], command[3::2], strict=True):
                doc = json.loads(value)
                if doc.get("h") is True:
                    grants.add((key.decode(), int(doc["t"])))
    return grants
