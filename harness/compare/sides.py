"""The two sides of ``harness compare``: which records each side is, and the checks that a side is one result.

A side is a results folder, or the records of one version, commit or tag in it (``FOLDER@NAME``, or ``--results
DIR`` and ``NAME``). Per group (:func:`harness.groups.command_key`) a side is the records of its newest code, failed
ones too. A side must be *one* result per group: two records of one seed that disagree, seeds that ran different
code (the commits of records without a source digest) or configs or read different data (:func:`refuse_mixed`), or
two codes that cannot be ordered in time (the same commit date, version and last finish time) are refused, never
averaged into one mean or chosen between by their digests.
Where a side's text reads two ways (a folder named ``runs@v1`` beside ``runs``; with ``--results``, a folder named
like a version or tag in it; a tag and a branch of one name; a commit git knows that also begins another code's
source digest; a prefix of two commits of records without a digest), it is refused rather than guessed.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from domains.base import Domain
from domains.errors import UserError
from domains.files import hash_jsonable
from harness.groups import (
    Group,
    code_class,
    code_classes,
    code_order,
    command_key,
    group_name,
    group_of,
    group_records,
)
from harness.numbers import fmt
from harness.records import RunRecord, load_record_files, utc_iso
from harness.run.model_file import MODELS
from harness.version import resolve_commit

# What runs write into their results folder beside the records and logs: live tracking (harness/run/tracking.py)
# and the models of --save-model (harness/run/model_file.py). The JSON they hold is no record left unread; hidden
# folders (the runs' scratch, .work) are skipped too.
RUN_FOLDERS = ("tb", "wandb", "mlruns", MODELS)


@dataclass
class Side:
    """One side of a comparison: its name and every record of it (failed ones too).

    Per group (:func:`command_key`) the side is its newest code (:func:`code_classes`), chosen among all its
    records of the group, failed ones too: a newer code that failed is the side's result, and never gives way to
    an older code's completed records. What the rule leaves out is said (:meth:`warnings`): a branch committed
    before another code of its folder loses to it there, and the gate must not judge other code unseen."""

    label: str
    records: list[RunRecord]
    folder: str = ""  # the folder the side's records were read from, as given ("" where not known)
    read: int = 0  # how many records that folder holds (the side's are those of its NAME, where one is given)
    notices: list[str] = field(default_factory=list)  # warnings on what the side left out, for stderr and report
    current: dict[str, list[RunRecord]] = field(init=False)  # key -> the records of the group's newest code
    shadowed: dict[str, list[str]] = field(init=False)  # key -> the labels of the group's older codes, if any
    newest: str = field(init=False)  # the side's newest code class, over all its groups
    newest_record: RunRecord = field(init=False)  # the newest code's last record: its commit, where no digest

    def __post_init__(self) -> None:
        self.newest = code_classes(self.records)[-1]
        self.newest_record = max((r for r in self.records if code_class(r) == self.newest),
                                 key=lambda r: (r.code_time(), utc_iso(r.finished_at), r.code))
        by_key: dict[str, list[RunRecord]] = {}
        for record in self.records:
            by_key.setdefault(command_key(record), []).append(record)
        self.current, self.shadowed = {}, {}
        for key, members in by_key.items():
            order = code_order(members)
            *older, newest = sorted(order, key=lambda c: (order[c], c))
            tied = [c for c in older if order[c] == order[newest]]
            if tied:  # which code is the side's result would be the digests' alphabetical order: not the gate's
                digests = ", ".join(c.removeprefix("src:")[:12] for c in sorted((*tied, newest)))
                raise UserError(
                    f"'{self.label}': which code is newest cannot be told for {members[0].domain} / "
                    f"{members[0].dataset} / {members[0].method} / {members[0].loss}: the source digests "
                    f"{digests} have the same commit date, version and last finish time; compare one of "
                    "them by name (FOLDER@<first digits of its source digest>)"
                )
            self.current[key] = [r for r in members if code_class(r) == newest]
            if older:
                labels = {code_class(r): r.code_label() for r in members}
                self.shadowed[key] = sorted({labels[c] for c in older})

    def groups(self) -> dict[str, Group]:
        chosen = [r for members in self.current.values() for r in members]
        return {command_key(g.records[-1]): g for g in group_records(chosen, key=command_key, keep_empty=True)}

    def failed_groups(self) -> dict[str, Group]:
        """Match key -> a group without values for each group whose newest code only failed (no completed record):
        :meth:`groups` (completed records) has no such group, and a group that vanished would be judged by nothing
        on the baseline's side, or pass unseen on the candidate's."""
        domains: dict[str, Domain | None] = {}
        return {
            key: group_of(sorted(members, key=lambda r: (utc_iso(r.finished_at), r.run_id)), domains)
            for key, members in self.current.items() if not any(r.status == "completed" for r in members)
        }

    def failed(self) -> dict[str, set[int]]:
        """Match key -> the seeds that only failed (no completed record of the seed) in the group's newest code."""
        out: dict[str, set[int]] = {}
        for key, members in self.current.items():
            done = {r.seed for r in members if r.status == "completed"}
            seeds = {r.seed for r in members if r.status == "failed"} - done
            if seeds:
                out[key] = seeds
        return out

    def older_code(self) -> dict[str, str]:
        """Match key -> the label of the group's newest code, where that is not the side's newest code (a folder
        that keeps several versions: the side's newest code did not run these groups, an older one did). Records
        without a source digest are one class per version, which may hold several commits: there the commit is
        all that tells their code apart, so a group that only another commit of the newest class ran is older
        code too (judged as its own by naming it: ``FOLDER@<commit>``, which takes a commit's clean and edited
        trees alike, as this does)."""
        legacy = not self.newest.startswith("src:")
        return {
            key: members[0].code_label()
            for key, members in self.current.items()
            if code_class(members[0]) != self.newest
            or (legacy and self.newest_record.commit not in {r.commit for r in members})
        }

    def other_codes(self, group: Group) -> list[str]:
        """The labels of the side's codes, of any of its groups, other than the code of ``group``'s records."""
        own = {code_class(r) for r in group.records}
        return sorted({r.code_label() for r in self.records if code_class(r) not in own})

    def newest_label(self) -> str:
        return self.newest_record.code_label()

    def judged_codes(self) -> list[str]:
        """The codes whose records the side judged (:func:`code_name`), newest last."""
        return _code_names([r for members in self.current.values() for r in members])

    def warnings(self) -> list[str]:
        """What the side left out, one line each: records of other codes, records in subfolders."""
        return [w for w in (self.left_out(), *self.notices) if w]

    def left_out(self) -> str:
        """One line on the side's records that the newest-code rule left out (older codes of its groups), with the
        hint to judge one of them; "" when none. A branch committed before the other records' commit loses to them
        in one folder, so the reader must see which code the gate judged and which it did not."""
        used = {id(r) for members in self.current.values() for r in members}
        dropped = [r for r in self.records if id(r) not in used]
        if not dropped:
            return ""
        order = code_order(dropped)
        newest = max(dropped, key=lambda r: (order[code_class(r)], code_class(r)))
        return (f"'{self.label}' left out {len(dropped)} record(s) of other code(s): {'; '.join(_code_names(dropped))} "
                "(each group uses its newest code, by commit date); to judge one, name it: "
                f"{self.folder or self.label}@{code_hint(newest)}")


def code_name(record: RunRecord) -> str:
    """A code as its records name it: version, short commit (``+dirty``) and short source digest, those it has."""
    digest = record.software.get("source_digest")
    dirty = "+dirty" if record.software.get("git_dirty") else ""
    parts = [f"version {record.version}"]
    if record.commit:
        parts.append(f"commit {record.commit[:7]}{dirty}")
    if isinstance(digest, str) and digest:
        parts.append(f"digest {digest[:12]}")
    return " / ".join(parts)


def _code_names(records: list[RunRecord]) -> list[str]:
    """The codes of ``records`` (:func:`code_name`, one per code class), oldest first."""
    order = code_order(records)
    names = {code_class(r): code_name(r) for r in records}
    return [names[c] for c in sorted(order, key=lambda c: (order[c], c))]


def code_hint(record: RunRecord) -> str:
    """The NAME of ``FOLDER@NAME`` that selects the code of ``record`` (:func:`select`): its source digest's first
    digits, else its version (a record without a digest is of its version's code)."""
    digest = record.software.get("source_digest")
    return digest[:12] if isinstance(digest, str) and digest else record.version


def refuse_report_among_records(option: str, report: str, folders: list[tuple[str, Path]]) -> None:
    """UserError when ``report`` is a ``.json`` file at the top level of one of ``folders`` ((its name in the
    message, the folder)): every later read of that folder (the gate's next run, the pages) would take the report
    for a run record, and refuse it."""
    if Path(report).suffix != ".json":
        return
    parent = Path(report).resolve().parent
    for name, folder in folders:
        if parent == folder.resolve():
            raise UserError(f"{option} {report} is among the records of {name}, where a .json report would be read "
                            "as a run record (and refused); write it elsewhere, or as .md")


def nested_records(folder: Path) -> list[Path]:
    """The ``*.json`` files below the top level of a results folder, outside the runs' own folders
    (:data:`RUN_FOLDERS`, hidden ones): records there are never read (:func:`load_record_files` reads the top level),
    and a side whose groups sit in a subfolder would be judged without them."""
    found = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in RUN_FOLDERS)
        if Path(root) != folder:
            found += [Path(root) / f for f in sorted(files) if f.endswith(".json") and not f.startswith(".")]
    return found


def select(records: list[RunRecord], name: str, where: str) -> list[RunRecord]:
    """The records of the code ``name`` names: a version, else a commit, tag or branch git resolves, and the records
    whose commit or source digest it begins (at least 4 hex digits). UserError when none or several codes match."""
    chosen = [r for r in records if r.version == name]
    commit = None if chosen else resolve_commit(name)
    if commit is not None:
        _refuse_ambiguous_ref(name)
        chosen = [r for r in records if r.commit == commit]
    # A version or git's commit that also begins other records' commit or source digest names them too.
    taken = {id(r) for r in chosen}
    chosen = chosen + [r for r in _prefixed(records, name) if id(r) not in taken]
    # Records without a source digest are one code class per version, which several commits may share: there the
    # commit tells codes apart (a prefix of two commits names two), its clean and edited trees alike.
    codes = sorted({(code_class(r), None if r.code.startswith("src:") else r.commit): r for r in chosen}.items(),
                   key=lambda item: (item[0][0], item[0][1] or ""))
    if len(codes) > 1:  # e.g. a commit's own records and an edited tree's: the gate would judge only the newest
        named = "; ".join(
            f"{r.code_label()} (version {r.version}, source digest {str(r.software.get('source_digest') or '-')[:12]})"
            for _, r in codes
        )
        raise UserError(
            f"'{name}' is ambiguous in {where}: it names {len(codes)} codes ({named}); name one by a "
            "prefix of its source digest (without one, of its commit)"
        )
    if chosen:
        return chosen
    versions = sorted({r.version for r in records})
    commits = sorted({r.commit[:8] for r in records if r.commit})
    digests = sorted({str(r.software["source_digest"])[:12] for r in records if r.software.get("source_digest")})
    raise UserError(
        f"no records of version, commit or tag '{name}' in {where}; present: versions "
        f"{', '.join(versions) or 'none'}; commits {', '.join(commits[:12]) or 'none'}"
        f"{' ...' if len(commits) > 12 else ''}; source digests {', '.join(digests[:12]) or 'none'}"
        f"{' ...' if len(digests) > 12 else ''} (a commit that left the code a run executes as it was runs nothing "
        "new: its runs are the records of that code, named by a prefix of its source digest)"
    )


def _prefixed(records: list[RunRecord], name: str) -> list[RunRecord]:
    """The records whose commit or source digest starts with ``name``, where it can be their first digits (at least
    4 hex digits); [] otherwise."""
    prefix = name.lower()
    if len(prefix) < 4 or any(c not in "0123456789abcdef" for c in prefix):
        return []
    return [r for r in records
            if (r.commit or "").startswith(prefix) or str(r.software.get("source_digest") or "").startswith(prefix)]


def _refuse_ambiguous_ref(name: str) -> None:
    """UserError when ``name`` is a tag and a branch (or a remote branch) that point at different commits: git
    reads the tag and says so only in a warning, and the gate would judge a code the user may not have meant."""
    kinds = {kind: resolve_commit(f"refs/{kind}/{name}") for kind in ("tags", "heads", "remotes")}
    named = {kind: commit for kind, commit in kinds.items() if commit}
    if len(set(named.values())) > 1:
        raise UserError(
            f"'{name}' is ambiguous in git: it names the commits "
            + ", ".join(f"{commit[:8]} (refs/{kind}/{name})" for kind, commit in named.items())
            + "; name one by its full ref or commit"
        )


def folder_and_name(text: str, results: str | None, role: str) -> tuple[str | None, str]:
    """``FOLDER``, ``FOLDER@NAME`` or (with ``--results``) ``NAME`` as (folder, name). A folder whose own name
    holds an ``@`` is that folder; where both readings name a folder (``runs@v1`` and ``runs``), UserError."""
    whole = Path(text).is_dir()
    if "@" not in text:
        return (text, "") if whole or not results else (results, text)
    folder, _, name = text.rpartition("@")
    if not name and not whole:  # "runs@" would silently mean the whole folder, every code of it
        raise UserError(f"--{role} '{text}': FOLDER@NAME needs a NAME after @")
    if whole and folder and Path(folder).is_dir():
        raise UserError(
            f"--{role} '{text}' is ambiguous: it is a folder, and also the folder '{folder}' with the "
            f"name '{name}'; rename one of the folders"
        )
    if whole:
        return text, ""
    if not (folder and Path(folder).is_dir()):
        return (results, text) if results else (folder or None, name)
    return folder, name


def load_side(text: str, results: str | None, role: str, cache: dict[Path, list[RunRecord]]) -> Side:
    """A side from ``FOLDER``, ``FOLDER@NAME`` or (with ``--results``) ``NAME``."""
    folder, name = folder_and_name(text, results, role)
    if folder is None or not Path(folder).is_dir():
        raise UserError(
            f"--{role} '{text}' is not a results folder (nor FOLDER@NAME); to compare two versions, "
            "commits or tags inside one folder pass --results DIR --baseline NAME --candidate NAME"
        )
    path = Path(folder).resolve()  # one folder however it is spelt (relative, '..', a link): never both sides
    if path not in cache:
        cache[path] = [record for _, record in load_record_files(path, completed_only=False)]
    if not cache[path]:
        _refuse_only_nested(text, folder, name, path, role)
    chosen = select(cache[path], name, str(path)) if name else cache[path]
    if results and not name and "@" not in text and Path(results).is_dir():
        _refuse_both(text, results, role, cache)
    # A candidate whose every run failed is a failed candidate (exit 1), not one the gate cannot read.
    if not any(r.status == "completed" for r in chosen) and (role == "baseline" or not chosen):
        raise UserError(f"the {role} '{text}' has no completed records; nothing to compare")
    return Side(text, chosen, folder, len(cache[path]), _unread(path, folder))


def _refuse_only_nested(text: str, folder: str, name: str, path: Path, role: str) -> None:
    """UserError naming the subfolders that hold a side's ``*.json`` files (:func:`nested_records`), where its
    folder holds no record at its top level, the only one read: "no completed records" would hide where they are."""
    nested = nested_records(path)
    if not nested:
        return
    counts = Counter(file.parent.relative_to(path) for file in nested)
    shown = [f"{sub}/ ({n})" for sub, n in sorted(counts.items())]
    more = f" and {len(shown) - 5} more" if len(shown) > 5 else ""
    side = f"{Path(folder) / min(counts)}" + (f"@{name}" if name else "")
    raise UserError(
        f"the {role} '{text}' has no records at the top level of '{folder}', the only level read; found "
        f"{len(nested)} *.json file(s) in its subfolders {', '.join(shown[:5])}{more}: name one as the side, e.g. "
        f"--{role} {side}"
    )


def _unread(path: Path, folder: str) -> list[str]:
    """A warning naming the records below the folder's top level, which the side does not read; [] when none."""
    nested = nested_records(path)
    if not nested:
        return []
    example = Path(folder) / nested[0].relative_to(path)
    return [f"'{folder}' has {len(nested)} *.json file(s) in subfolders (e.g. {example}), not read: records are "
            "read from the folder's top level only"]


def _refuse_both(text: str, results: str, role: str, cache: dict[Path, list[RunRecord]]) -> None:
    """UserError when, with ``--results``, a side's text is both a folder and a name of records in the results
    folder (a tag ``v1`` and a folder ``v1``): which one was meant is not the gate's to guess."""
    path = Path(results).resolve()
    if path not in cache:
        cache[path] = [record for _, record in load_record_files(path, completed_only=False)]
    try:
        select(cache[path], text, str(path))
    except UserError:
        return  # not a name there (or an ambiguous one, which is no reading either): the folder
    raise UserError(
        f"--{role} '{text}' is ambiguous: it is a folder, and also names records in --results "
        f"'{results}'; write ./{text} for the folder or {results}@{text} for the records"
    )


def copied(base: Group, cand: Group) -> bool:
    """Whether some of the candidate's records of a group are copies of the baseline's: the same content, times
    included (a rerun of a run, even of the same code on the same seed, was written at other times)."""
    return bool({hash_jsonable(r.to_json()) for r in base.records} & {hash_jsonable(r.to_json()) for r in cand.records})


def seeds_text(seeds: Iterable[int]) -> str:
    return ",".join(map(str, sorted(seeds)))


def refuse_conflicts(side: Side, groups: Iterable[Group]) -> None:
    """UserError when a side holds two records of one seed (one group, one code) that disagree: which of them is
    the side's result is not the gate's to choose."""
    clashes = [
        f"{group_name(g)}, seed {seed}: "
        + ", ".join(f"{r.run_id} ({fmt(r.metrics.get(r.primary_metric))})" for r in records)
        for g in groups
        for seed, records in sorted(g.conflicts.items())
    ]
    if clashes:
        raise UserError(
            f"'{side.label}' holds different results for one seed of one code: {'; '.join(clashes)}. "
            "Keep one record per seed (a side is one run of each seed), then compare again"
        )


def _split(g: Group, part: str) -> list[str]:
    """How the seeds of ``g`` differ in ``part`` (``config`` or ``data_fingerprint``): per differing field, its
    value on each set of seeds; [] when every seed agrees."""
    values = [(r.seed, getattr(r, part)) for r in g.records]
    if len({hash_jsonable(v) for _, v in values}) < 2:
        return []
    out = []
    for key in sorted({k for _, v in values for k in v}):
        seeds: dict[str, set[int]] = {}
        for seed, value in values:
            seeds.setdefault(json.dumps(value.get(key, "(absent)"), sort_keys=True, default=str), set()).add(seed)
        if len(seeds) > 1:
            out.append(f"{key} " + " vs ".join(f"{v} (seed(s) {seeds_text(s)})" for v, s in sorted(seeds.items())))
    return out


def _codes(g: Group) -> list[str]:
    """The codes of ``g``'s seeds, each with its seeds, where they differ (records without a source digest are
    grouped by version, which need not tell their commits apart); [] when one code ran every seed."""
    if not g.mixed_code:
        return []
    seeds: dict[str, set[int]] = {}
    for r in g.records:
        seeds.setdefault(r.code, set()).add(r.seed)
    return [f"{g.codes[code]} (seed(s) {seeds_text(s)})" for code, s in sorted(seeds.items())]


def refuse_mixed(side: Side, groups: Iterable[Group]) -> None:
    """UserError when the seeds of one group of one side (one command) ran different code or configs or read
    different data: their mean is no one experiment's result, and a gate on it could pass or fail either one (a
    few seeds of a newer commit that collapsed, diluted by many of an older one)."""
    mixed = []
    for g in groups:
        codes = _codes(g)
        if codes:
            mixed.append(f"{group_name(g)}: its seeds ran different code ({' vs '.join(codes)})")
        for part, what in (("config", "ran different configs"), ("data_fingerprint", "read different data")):
            differ = _split(g, part)
            if differ:
                mixed.append(f"{group_name(g)}: its seeds {what} ({'; '.join(differ)})")
    if mixed:
        raise UserError(
            f"'{side.label}' mixes experiments in one group: {'; '.join(mixed)}. A group's seeds must "
            "be one code and one setting on one data set: rerun them alike (or move the others away), then compare "
            "again"
        )
