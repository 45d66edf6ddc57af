"""``tools/campaign travel``: whether each device call's parts fit the 64 MiB that one call sends.

A call to the GPU machine sends the working tree (tracked and untracked-not-ignored files), the repository's
``.git`` (the records made there name its commit, so it goes too; it is counted here, whether or not the tool
counts it) and the paths the call carries: one ``.device-carry*`` part of ``../shared/tools/device-pack``, and
what ``--carry`` names for every call (an unfinished run's checkpoints). A part that does not fit makes the call
fail before it starts, so this is checked here, before the first call, and says what ``--max-mib`` to pack with.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

from domains.errors import UserError
from harness.suites.pack import MIB

SEND_LIMIT_MIB = 64.0  # one call's working tree plus what it carries (the device tool's limit)
MARGIN_MIB = 2.0  # room for the records and logs a session adds between packing and its calls
CARRY_PREFIX = ".device-carry"


def folder_bytes(path: Path) -> int:
    """The bytes of every file under ``path`` (links counted as links, as they travel)."""
    if path.is_file() or path.is_symlink():
        return path.lstat().st_size
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() or p.is_symlink())


def tree_bytes(repo: Path) -> int:
    """The tracked and untracked-not-ignored files that a call sends."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=repo,
                                capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise UserError(f"{repo} is not a git checkout: {exc}") from exc
    files = (repo / os.fsdecode(name) for name in listed.split(b"\0") if name)
    return sum(p.lstat().st_size for p in files if p.is_symlink() or p.exists())


def travel(repo: Path, carried: list[str], limit_mib: float = SEND_LIMIT_MIB, margin_mib: float = MARGIN_MIB) -> int:
    """Print what each call sends and whether it fits; 0 when every part fits, 1 when one does not."""
    parts = sorted(repo.glob(CARRY_PREFIX + "*"), key=lambda p: (len(p.name), p.name))
    if not parts:
        raise UserError(f"no {CARRY_PREFIX}* folder in {repo}: pack first with ../shared/tools/device-pack")
    for name in carried:
        if not (repo / name).exists():
            raise UserError(f"--carry {name}: no such path in {repo}")
    base = {"working tree": tree_bytes(repo), ".git": folder_bytes(repo / ".git") if (repo / ".git").is_dir() else 0,
            **{name: folder_bytes(repo / name) for name in carried}}
    most = limit_mib - margin_mib
    print(f"the most one call should send: {most:g} MiB ({limit_mib:g} less {margin_mib:g} spare)")
    for what, size in base.items():
        print(f"  {what:<22} {size / MIB:6.1f} MiB  every call")
    every_call = sum(base.values()) / MIB
    room = most - every_call
    over = []
    for part in parts:
        size = folder_bytes(part) / MIB
        total = every_call + size
        verdict = "fits" if total <= most else f"OVER by {total - most:.1f} MiB"
        print(f"  {part.name:<22} {size:6.1f} MiB  the call sends {total:5.1f} MiB: {verdict}")
        if total > most:
            over.append(part.name)
    if room < 1:
        print(f"error: the tree alone leaves {room:.1f} MiB for a part; carry less (--carry) or make the tree smaller",
              file=sys.stderr)
        return 1
    if over:
        print(f"error: {', '.join(over)} will not fit one call: pack again with "
              f"../shared/tools/device-pack --max-mib {math.floor(room)} ...", file=sys.stderr)
        return 1
    print(f"every part fits; a part may hold up to {math.floor(room)} MiB (device-pack --max-mib {math.floor(room)})")
    return 0
