"""The scenario table of the fault matrix (data). See tests/matrix/__init__.py.

Each :class:`Scenario` is a setup (old files in the destination, jobs with their task
attempts), a fault, and what the test process does after it (``then``). The expected
destination comes from :mod:`tests.matrix.oracle`. Kill rules are templates: ``{dest}``,
``{trash}`` (the job's trash directory), ``{task0}`` (task 0's first attempt directory) and
``{job}`` are filled in per run; a dict keyed
by backend (``"*"``: the others) picks the rule per backend.

``xfail`` / ``skip`` / ``maybe``: backend (or ``"*"``) -> reason. An xfail is strict: a
scenario that starts to pass after a fix fails the run until its mark is removed; ``maybe``
is a non-strict xfail (see :class:`Scenario`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tests.matrix.oracle import Attempt, Files, Job
from tests.matrix.table_oracle import INSERT, OVERWRITE, OVERWRITE_TABLE, TableJob

JOB = "202611230001_0011"
JOB_B = "202611230002_0012"

OLD: Files = {
    "p=1/same.bin": b"old same",
    "p=1/old.bin": b"old 1",
    "p=2/old.bin": b"old 2",
    "top.bin": b"old top",
}
T0: Files = {"p=1/same.bin": b"new same", "p=1/a.bin": b"new a", "p=3/c.bin": b"new c"}
T1: Files = {"p=1/b.bin": b"new b", "p=3/d.bin": b"new d"}
T0_DISJOINT: Files = {"p=1/a.bin": b"new a", "p=3/c.bin": b"new c"}

ODD = "a b%20+#é中😀"
"""Space, a literal '%20', '+', '#', non-ASCII letters and an emoji in one name."""
OLD_ODD: Files = {
    f"p={ODD}/same {ODD}.bin": b"old odd same",
    f"p={ODD}/old {ODD}.bin": b"old odd",
    "k=ü/x.bin": b"old u",
}
NEW_ODD_0: Files = {f"p={ODD}/same {ODD}.bin": b"new odd same", f"p={ODD}/new #1+.bin": b"new odd 1"}
NEW_ODD_1: Files = {f"q=%41 😀/{ODD}.bin": b"new odd 2", f"p={ODD}/sp ace.bin": b"new odd 3"}

OUTSIDE: Files = {"secret.bin": b"outside, must stay"}
"""Files next to the destination (``$base/outside``) that no scenario may touch."""


def job(
    mode: str, *tasks: Files | tuple[Attempt, ...], job_id: str = JOB, delete_target_files: bool = False
) -> Job:
    norm = tuple(t if isinstance(t, tuple) else (Attempt(t),) for t in tasks)
    return Job(job_id, mode, norm, delete_target_files)


@dataclass(frozen=True)
class Fault:
    kind: str = "none"
    """``none``; ``kill`` (commit in a child killed by ``kill``; then optionally an abort
    child killed by ``abort_kill``); ``store`` (FaultyStore rules ``rule``: throttle/lost);
    ``http`` (a ChaosProxy of kind ``rule``); ``manifest`` (tamper ``rule``);
    ``concurrent`` (two jobs; the second paused mid-rename while the first commits);
    ``takeover`` (job A killed holding the destination lock, then job B commits: see
    ``lock_ttl``); ``error`` (the commit fails for good, with the error ``raises``:
    FaultyStore rules ``fail``, or ``rule`` ``conflict`` / ``manifest`` / ``lock-lost``; then
    the scenario's ``then`` runs without faults: see :func:`tests.matrix.runner.run_error`)."""
    kill: Mapping[str, Any] | None = None
    abort_kill: Mapping[str, Any] | None = None
    rule: str = ""
    past_no_return: bool = False
    """The commit was killed after its point of no return (abort completes it)."""
    copied: tuple[str, str] | None = None
    """(source, destination) templates of a copy+delete rename cut in the middle: on
    copy-based backends both must exist after the kill (proof of where the cut fell)."""
    lock_ttl: float | None = None
    """``lock_ttl`` of the killed children and of what follows; set, the kill must leave
    the destination lock held by the dead job, and (kind ``kill``) the same job's resume
    or abort must take it back at once (well within the ttl). Kind ``takeover``: job A is
    killed as for ``kill`` (its abort too, if ``abort_kill``), then job B commits: it takes
    the dead holder's lock over at once (A's process is provably gone on this host; well
    within ``lock_ttl``), completes A's commit or abort, then commits its own (result: A
    then B)."""
    fail: tuple[Mapping[str, Any], ...] = ()
    """Kind ``error``: FaultyStore rules that fire on every matching call once ``after``
    matches went through: ``{"kind": "error"|"throttle"|"latency"|"stall", "error": CLASS NAME,
    "op": OP or [OPS], "path": TEMPLATE, "after": N, "seconds": S, "when": "stalled"}``; a
    ``stall`` holds its call until the commit is cancelled (the lock lost), and a rule with
    ``"when": "stalled"`` fires only from the first stall on
    (:class:`tests.matrix.runner.StallingStore`)."""
    raises: str = ""
    """Kind ``error``: the class (``amcommit.errors``) of the error the failed commit raises."""
    retry_mode: str | None = None
    """Kind ``error``, ``then="resume"``: the conflict mode of the second commit (None: the
    job's own)."""


@dataclass(frozen=True)
class Scenario:
    name: str
    summary: str
    old: Files
    jobs: tuple[Job, ...]
    fault: Fault = Fault()
    then: str = "commit"
    """After the fault: ``commit`` (the faulty commit's own outcome), ``resume`` (commit
    again), ``abort``."""
    xfail: Mapping[str, str] = field(default_factory=dict)
    skip: Mapping[str, str] = field(default_factory=dict)
    maybe: Mapping[str, str] = field(default_factory=dict)
    """Like ``xfail`` but not strict (the cell passes either way): for cells that fail
    for a known reason another branch is fixing."""
    tables: tuple[TableJob, ...] = ()
    """A table scenario (tests/matrix/table_runner.py): the writes into the old Hudi table
    (``old`` and ``jobs`` unused). Fault kinds: ``none``, ``kill``, ``takeover``, ``store``
    (a permanent store error, then ``amcommit rollback``)."""
    backends: frozenset[str] | None = None
    """The backends the scenario runs on (None: every one); the others show as ``–``."""
    table_commit: str = "direct"
    """A table scenario's ``table_commit`` (:mod:`amcommit.table.write.direct`): ``direct``
    (the default; base files written in place under markers, one loser attempt besides the
    winners) or ``staged`` (staged in the attempt directories, renamed at job commit)."""


def P(point: str) -> dict[str, Any]:
    stage, phase, *rest = point.split(":")
    return {"type": "progress", "stage": stage, "phase": phase, "at": int(rest[0]) if rest else 0}


def between_copy_and_delete(dst: str, what: str) -> dict[str, Any]:
    """Kill after the rename onto ``dst`` (template path): on copy-based backends after the
    copy answered and before the source delete; elsewhere right after the (single-request)
    rename returned."""
    return {
        "blob": {"type": "http", "method": "PUT", "url": f"*/{dst}", "header": "x-ms-copy-source"},
        "gcs-fake": {"type": "http", "method": "POST", "url": f"*/rewriteTo/*/{dst}?*"},
        "*": {"type": "store", "op": "rename", "path": dst, "what": what},
    }


def on(reason: str, *backends: str) -> dict[str, str]:
    """xfail ``reason`` on ``backends`` (none: every backend)."""
    return {b: reason for b in backends} if backends else {"*": reason}


FLAT = {
    "blob": "flat namespace: a file and a directory of one name coexist",
    "gcs-double": "flat namespace: a file and a directory of one name coexist",
    "gcs-fake": "flat namespace: a file and a directory of one name coexist",
}
NO_HTTP = {"local": "no HTTP layer on local files (see the store-level fault scenarios)"}

REPLACE = job("replace", T0, T1)
MID_CLEANUP: dict[str, Any] = {
    "blob": {"type": "http", "method": "POST", "url": "*comp=batch*"},
    "*": {"type": "store", "op": "delete", "path": "{dest}/_temporary/*"},
}
"""Kill right after the first delete request of a cleanup: on Blob the first Blob Batch
(the job's temporary objects, all in one batch here), elsewhere the first delete below
``_temporary``."""
# (kill point, past the point of no return). Once every rename is done (rename_files:end)
# abort_job completes the commit instead of rolling it back (issue 11 item 7).
# The kill children rename one file at a time in spool order: T0's sorted names, then T1's.
STAGE_POINTS = [
    ("load_manifests:end", False),
    ("check_conflicts:end", False),
    ("prepare_dirs:end", False),
    ("rename_files:progress:2", False),
    ("rename_files:end", True),
    ("delete_victims:end", True),
    ("save_success:end", True),
    ("cleanup:start", True),
]

SCENARIOS: list[Scenario] = [
    # -- modes, no fault ---------------------------------------------------------------------
    Scenario("append", "append new names", OLD, (job("append", T0_DISJOINT, T1),)),
    Scenario(
        "append-conflict",
        "append meets an existing name: refused, job kept",
        OLD,
        (job("append", T0, T1),),
    ),
    Scenario(
        "append-replace-target",
        "append, delete_target_files",
        OLD,
        (job("append", T0, T1, delete_target_files=True),),
    ),
    Scenario("fail-refused", "mode fail, partition holds files: refused", OLD, (job("fail", T0, T1),)),
    Scenario(
        "fail-empty",
        "mode fail, new partitions only",
        OLD,
        (job("fail", {"p=4/x.bin": b"x"}, {"p=5/y.bin": b"y"}),),
    ),
    Scenario("replace", "replace written partitions", OLD, (REPLACE,)),
    Scenario("overwrite", "overwrite the destination", OLD, (job("overwrite", T0, T1),)),
    # -- task attempts -------------------------------------------------------------------------
    Scenario(
        "attempts-failed",
        "failed and aborted attempts never published",
        OLD,
        (
            job(
                "replace",
                (Attempt({"p=1/junk.bin": b"failed", "p=1/same.bin": b"failed"}, "fail"), Attempt(T0)),
                (Attempt({"p=9/junk.bin": b"aborted"}, "abort"), Attempt(T1)),
            ),
        ),
    ),
    Scenario(
        "attempts-duplicate",
        "two committed attempts of a task: the last wins",
        OLD,
        (job("replace", (Attempt({"p=1/same.bin": b"first", "p=1/z.bin": b"first z"}), Attempt(T0)), T1),),
    ),
    Scenario(
        "attempts-duplicate-kill",
        "duplicate attempts, killed mid-rename, resumed",
        OLD,
        (job("replace", (Attempt({"p=1/same.bin": b"first", "p=1/z.bin": b"first z"}), Attempt(T0)), T1),),
        Fault("kill", P("rename_files:progress:2")),
        "resume",
    ),
    # -- odd names -------------------------------------------------------------------------------
    Scenario(
        "odd-append",
        "space % + # unicode emoji, append",
        OLD_ODD,
        (job("append", {f"p={ODD}/new #1+.bin": b"n"}, NEW_ODD_1),),
    ),
    Scenario(
        "odd-replace",
        "odd names, replace (move-aside of an odd name)",
        OLD_ODD,
        (job("replace", NEW_ODD_0, NEW_ODD_1),),
    ),
    Scenario(
        "odd-kill-resume",
        "odd names, killed mid-rename, resumed",
        OLD_ODD,
        (job("replace", NEW_ODD_0, NEW_ODD_1),),
        Fault("kill", P("rename_files:progress:2")),
        "resume",
    ),
    Scenario(
        "odd-kill-abort",
        "odd names, killed mid-rename, aborted",
        OLD_ODD,
        (job("replace", NEW_ODD_0, NEW_ODD_1),),
        Fault("kill", P("rename_files:progress:2")),
        "abort",
    ),
]

# -- killed at each stage boundary: resume, and separately abort ---------------------------------
for _point, _past in STAGE_POINTS:
    _short = _point.replace(":progress", "").replace(":", "-").replace("_", "-")
    for _then in ("resume", "abort"):
        SCENARIOS.append(
            Scenario(
                f"kill-{_short}-{_then}",
                f"replace, killed at {_point}, {_then}",
                OLD,
                (REPLACE,),
                Fault("kill", P(_point), past_no_return=_past),
                _then,
            )
        )

SCENARIOS += [
    # -- killed during abort, then abort again -----------------------------------------------------
    Scenario(
        "abort-killed-mid-undo",
        "commit killed mid-rename; abort killed after its first delete; abort again",
        OLD,
        (REPLACE,),
        Fault(
            "kill",
            P("rename_files:progress:3"),
            abort_kill={"type": "store", "op": "delete", "path": "{dest}/p=*"},
        ),
        "abort",
    ),
    Scenario(
        "abort-killed-at-cleanup",
        "commit killed mid-rename; abort killed at its cleanup; abort again",
        OLD,
        (REPLACE,),
        Fault("kill", P("rename_files:progress:3"), abort_kill=P("cleanup:start")),
        "abort",
    ),
    # -- killed inside cleanup: Blob deletes the job directory in Blob Batch requests ---------------
    *(
        Scenario(
            f"kill-mid-cleanup-{_then}",
            "killed right after the first delete request of cleanup answered (Blob: a Blob "
            f"Batch of deletes; elsewhere one delete), {_then}",
            OLD,
            (REPLACE,),
            Fault("kill", MID_CLEANUP, past_no_return=True),
            _then,
        )
        for _then in ("resume", "abort")
    ),
    Scenario(
        "abort-killed-mid-cleanup",
        "commit killed mid-rename; abort killed right after its first cleanup delete request "
        "(Blob: a Blob Batch); abort again",
        OLD,
        (REPLACE,),
        Fault("kill", P("rename_files:progress:3"), abort_kill=MID_CLEANUP),
        "abort",
    ),
    # -- killed between the requests of each rename kind ------------------------------------------
    Scenario(
        "kill-forward-resume",
        "killed inside a forward rename (copy done, delete not; atomic renames: just after), resumed",
        OLD,
        (REPLACE,),
        Fault(
            "kill",
            between_copy_and_delete("{dest}/p=1/a.bin", "forward"),
            copied=("{task0}/p=1/a.bin", "{dest}/p=1/a.bin"),
        ),
        "resume",
    ),
    Scenario(
        "kill-forward-abort",
        "killed inside a forward rename (copy done, delete not; atomic renames: just after), aborted",
        OLD,
        (REPLACE,),
        Fault(
            "kill",
            between_copy_and_delete("{dest}/p=1/a.bin", "forward"),
            copied=("{task0}/p=1/a.bin", "{dest}/p=1/a.bin"),
        ),
        "abort",
    ),
    Scenario(
        "kill-moveaside-resume",
        "killed inside a move-aside (copy done, delete not; atomic renames: just after), resumed",
        OLD,
        (REPLACE,),
        Fault(
            "kill",
            between_copy_and_delete("{trash}/p=1/same.bin", "move-aside"),
            copied=("{dest}/p=1/same.bin", "{trash}/p=1/same.bin"),
        ),
        "resume",
    ),
    Scenario(
        "kill-moveaside-abort",
        "killed inside a move-aside (copy done, delete not; atomic renames: just after), aborted",
        OLD,
        (REPLACE,),
        Fault(
            "kill",
            between_copy_and_delete("{trash}/p=1/same.bin", "move-aside"),
            copied=("{dest}/p=1/same.bin", "{trash}/p=1/same.bin"),
        ),
        "abort",
    ),
    Scenario(
        "kill-restore-abort",
        "abort killed inside a restore (copy done, delete not; atomic renames: just after), abort again",
        OLD,
        (REPLACE,),
        Fault(
            "kill",
            P("rename_files:progress:3"),
            abort_kill=between_copy_and_delete("{dest}/p=1/same.bin", "restore"),
            copied=("{trash}/p=1/same.bin", "{dest}/p=1/same.bin"),
        ),
        "abort",
    ),
    Scenario(
        "file-in-dir-way-abort",
        "a file stands where the job needs a directory; killed, aborted",
        OLD | {"p=7": b"old file p=7"},
        (job("replace", T0, {"p=7/x.bin": b"new x"}),),
        Fault("kill", P("rename_files:progress:1")),
        "abort",
        skip=FLAT,
    ),
    # -- throttling storms, lost answers, connection resets ------------------------------------
    Scenario(
        "throttle-store",
        "every 5th store call throttled (engine level)",
        OLD,
        (REPLACE,),
        Fault("store", rule="throttle"),
    ),
    Scenario(
        "lost-store",
        "every 5th mutation's answer lost (engine level)",
        OLD,
        (REPLACE,),
        Fault("store", rule="lost"),
    ),
    Scenario(
        "throttle-http",
        "20% of requests answered 429/503",
        OLD,
        (REPLACE,),
        Fault("http", rule="throttle"),
        skip=NO_HTTP,
    ),
    Scenario(
        "lost-http",
        "20% of answers lost (done, connection dropped)",
        OLD,
        (REPLACE,),
        Fault("http", rule="lose"),
        skip=NO_HTTP,
    ),
    Scenario(
        "reset-http",
        "20% of connections reset before the request",
        OLD,
        (REPLACE,),
        Fault("http", rule="reset"),
        skip=NO_HTTP,
    ),
    # -- hostile manifests: refused before any rename -----------------------------------------
    *(
        Scenario(f"manifest-{r}", f"manifest: {d}; refused", OLD, (REPLACE,), Fault("manifest", rule=r))
        for r, d in [
            ("corrupt", "truncated JSON"),
            ("foreign", "another job's id"),
            ("traversing", "destination '../outside/secret.bin'"),
            ("outside-source", "source outside the attempt directory"),
            ("nul", "NUL ('%00') in a destination"),
            ("huge-size", "size 10**30"),
            ("deep", "nested 200,000 levels"),
            ("dir-source", "a directory as source"),
            ("trailing-slash", "destination ending in '/'"),
        ]
    ),
    # -- concurrent jobs into one destination ------------------------------------------------------
    Scenario(
        "concurrent-append-append",
        "two appends of disjoint files",
        OLD,
        (job("append", T0_DISJOINT), job("append", T1, job_id=JOB_B)),
        Fault("concurrent"),
    ),
    Scenario(
        "concurrent-overwrite-append",
        "overwrite while an append renames",
        OLD,
        (job("overwrite", T0_DISJOINT), job("append", T1, {"p=2/e.bin": b"new e"}, job_id=JOB_B)),
        Fault("concurrent"),
    ),
    Scenario(
        "concurrent-replace-replace",
        "two replaces of one partition",
        OLD,
        (
            job("replace", T0),
            job("replace", {"p=1/same.bin": b"B same", "p=1/f.bin": b"B f"}, T1, job_id=JOB_B),
        ),
        Fault("concurrent"),
    ),
    Scenario(
        "concurrent-overwrite-overwrite",
        "two overwrites",
        OLD,
        (job("overwrite", T0), job("overwrite", {"p=5/g.bin": b"B g"}, T1, job_id=JOB_B)),
        Fault("concurrent"),
    ),
]

# -- the destination lock after a kill: the same job takes it back, another takes it over -----
# Job B replaces p=1 (A's too) and adds p=6: "A then B", "B then A" and "B alone" all differ.
REPLACE_B = job(
    "replace", {"p=1/same.bin": b"B same", "p=1/f.bin": b"B f"}, {"p=6/h.bin": b"B h"}, job_id=JOB_B
)
OWN_TTL = 30.0
"""Long enough that waiting for the lock to expire would show (the resume must not)."""
TAKEOVER_TTL = 30.0
"""Long enough that waiting for the lock to expire would show: A's process is provably dead
on this host, so B takes its lock over at once (the ttl rule, for a holder on another host,
is tested in tests/engine/test_concurrent_commits.py)."""
SCENARIOS += [
    *(
        Scenario(
            f"lock-own-{then}",
            f"killed mid-rename holding the lock (ttl {OWN_TTL:g} s); the same job's {then} "
            "takes its stale lock back at once",
            OLD,
            (REPLACE,),
            Fault("kill", P("rename_files:progress:2"), lock_ttl=OWN_TTL),
            then,
        )
        for then in ("resume", "abort")
    ),
    Scenario(
        "lock-takeover-mid-rename",
        f"A killed mid-rename holding the lock (ttl {TAKEOVER_TTL:g} s); B takes the lock over "
        "at once (A's process is gone), completes A's commit, then commits: A then B",
        OLD,
        (REPLACE, REPLACE_B),
        Fault("takeover", P("rename_files:progress:2"), lock_ttl=TAKEOVER_TTL),
    ),
    Scenario(
        "lock-takeover-renamed",
        f"A killed after its renames and victim deletes (ttl {TAKEOVER_TTL:g} s); B takes the "
        "lock over, completes A, then commits: A then B",
        OLD,
        (REPLACE, REPLACE_B),
        Fault("takeover", P("delete_victims:end"), lock_ttl=TAKEOVER_TTL),
    ),
    Scenario(
        "lock-takeover-abort",
        f"A killed mid-rename, A's abort killed mid-undo (ttl {TAKEOVER_TTL:g} s); B takes the "
        "lock over, completes A's abort (rollback), then commits: B alone",
        OLD,
        (REPLACE, REPLACE_B),
        Fault(
            "takeover",
            P("rename_files:progress:3"),
            abort_kill={"type": "store", "op": "delete", "path": "{dest}/p=*"},
            lock_ttl=TAKEOVER_TTL,
        ),
    ),
]

# -- something in the way: a file where the job needs a directory, a directory where it writes
# a file (issue 23 item 3). On stores with directories replace/overwrite move the old file
# (or every file of the old directory) aside like other replaced content; append and fail
# refuse in one line; on flat stores both names coexist (see tests/matrix/oracle.py).
WAY_FILE: Files = OLD | {"p=7": b"old file p=7"}
WAY_DIR: Files = OLD | {"p=7/x.bin/old.bin": b"old dir 1", "p=7/x.bin/sub/deep.bin": b"old dir 2"}
WAY_TASKS: tuple[Files, Files] = ({"p=3/c.bin": b"new c", "p=8/e.bin": b"new e"}, {"p=7/x.bin": b"new x"})
WAYS = {"file": WAY_FILE, "dir": WAY_DIR}
NOT_IN_THE_WAY = {b: "flat namespace: nothing is in the way, nothing moved aside" for b in FLAT}
FAKE_GCS_FILES = {
    "gcs-fake": "fake-gcs-server keeps objects as files on disk: an object and a 'directory' of one "
    "name cannot coexist there (they do on GCS: see the double)"
}
WAY_KILLS: dict[str, list[tuple[str, Any, bool]]] = {
    # (name, kill rule, past the point of no return); the kill children rename task 0's
    # files, then p=7/x.bin (task 1)
    "file": [
        ("aside", {"type": "store", "op": "rename", "path": "{trash}/p=7"}, False),
        ("renamed", P("rename_files:end"), True),
    ],
    "dir": [
        ("aside", {"type": "store", "op": "rename", "path": "{trash}/p=7/x.bin/*"}, False),
        ("rmdir", {"type": "store", "op": "delete", "path": "{dest}/p=7/x.bin"}, False),
        ("renamed", P("rename_files:end"), True),
    ],
}
SCENARIOS += [
    Scenario(
        f"way-{_way}-{_mode}",
        f"a {_way} stands where the job writes {'p=7/x.bin' if _way == 'file' else 'the file p=7/x.bin'}, {_mode}",
        _old,
        (job(_mode, *WAY_TASKS),),
        skip=FAKE_GCS_FILES,
    )
    for _way, _old in WAYS.items()
    for _mode in ("overwrite", "replace", "append", "fail")
]
SCENARIOS += [
    Scenario(
        f"way-{_way}-overwrite-kill-{_name}-{_then}",
        f"a {_way} in the way, overwrite, killed at {_name}, {_then}",
        WAYS[_way],
        (job("overwrite", *WAY_TASKS),),
        Fault("kill", _rule, past_no_return=_past),
        _then,
        skip=FAKE_GCS_FILES if _name == "renamed" else NOT_IN_THE_WAY,
    )
    for _way, _kills in WAY_KILLS.items()
    for _name, _rule, _past in _kills
    for _then in ("resume", "abort")
]

SCENARIOS += [
    Scenario(
        f"way-dir-overwrite-refused-{_then}",
        "a directory in the way, overwrite: its files moved aside, then the rename onto it fails "
        f"for good (PreconditionFailed): rolled back, the job kept; {_then}",
        WAY_DIR,
        (job("overwrite", *WAY_TASKS),),
        Fault(
            "error",
            fail=({"error": "PreconditionFailed", "op": "rename", "path": "{dest}/p=7/x.bin", "after": 1},),
            raises="CommitError",
        ),
        _then,
        backends=frozenset({"local", "dfs"}),  # on flat stores nothing is in the way
    )
    for _then in ("resume", "abort")
]

# -- whatever error a job commit meets, commit-job or abort-job ends the job (issue 23 item 4):
# one commit that fails for good with each error class, then (a) commit-job again, without the
# fault, completes exactly, or (b) abort-job rolls back exactly (completes the commit past its
# point of no return); then no lock and no job directory. One GCS backend per class (they
# alternate): the engine's handling is the same, the store's renames differ.
FORWARD = "*/tasks/*"
"""Glob of a forward rename (its source is a task attempt's file)."""
ERRORS: list[tuple[str, str, Fault]] = [
    (
        "throttled",
        "a throttling storm that never ends, from the 3rd forward rename",
        Fault(
            "error",
            fail=({"kind": "throttle", "op": "rename", "path": FORWARD, "after": 2},),
            raises="Throttled",
        ),
    ),
    (
        "not-found",
        "the 3rd forward rename's source is gone (NotFound): refused, rolled back",
        Fault(
            "error",
            fail=({"error": "NotFound", "op": "rename", "path": FORWARD, "after": 2, "count": 1},),
            raises="CommitError",
        ),
    ),
    (
        "exists",
        "renames onto p=3/c.bin meet AlreadyExists for good (its forward rename, then its move "
        "aside): refused, rolled back",
        Fault(
            "error",
            fail=({"error": "AlreadyExists", "op": "rename", "path": "{dest}/p=3/c.bin"},),
            raises="CommitError",
        ),
    ),
    (
        "precondition",
        "the 4th forward rename's source changed (PreconditionFailed): refused, rolled back",
        Fault(
            "error",
            fail=({"error": "PreconditionFailed", "op": "rename", "path": FORWARD, "after": 3, "count": 1},),
            raises="CommitError",
        ),
    ),
    (
        "rollback-failed",
        "every forward rename from the 3rd fails (PreconditionFailed): refused, and its rollback "
        "fails too (moving the renamed files back)",
        Fault(
            "error",
            fail=({"error": "PreconditionFailed", "op": "rename", "path": FORWARD, "after": 2},),
            raises="RollbackError",
        ),
    ),
    (
        "forget-failed",
        "the 4th forward rename's source changed (PreconditionFailed); the rollback works but "
        "deleting the journal fails for good (Transient)",
        Fault(
            "error",
            fail=(
                {"error": "PreconditionFailed", "op": "rename", "path": FORWARD, "after": 3, "count": 1},
                {
                    "error": "Transient",
                    "op": ["delete", "delete_batch"],
                    "path": "{dest}/_temporary/*/journal.json",
                },
            ),
            raises="CommitError",
        ),
    ),
    (
        "invalid-input",
        "the listing of the old files (check_conflicts) answers InvalidInput",
        Fault(
            "error",
            fail=({"error": "InvalidInput", "op": "list", "path": "{dest}/p=*"},),
            raises="InvalidInput",
        ),
    ),
    (
        "permission",
        "the journal's write after the renames (the point of no return) is denied (PermissionDenied)",
        Fault(
            "error",
            fail=(
                {
                    "error": "PermissionDenied",
                    "op": "put",
                    "path": "{dest}/_temporary/*/journal.json",
                    "after": 1,
                },
            ),
            raises="PermissionDenied",
            past_no_return=True,
        ),
    ),
    (
        "transient",
        "deleting an old file fails for good (Transient), past the point of no return",
        Fault(
            "error",
            fail=({"error": "Transient", "op": ["delete", "delete_batch"], "path": "{dest}/p=1/old.bin"},),
            raises="Transient",
            past_no_return=True,
        ),
    ),
    (
        "unauthenticated",
        "writing _SUCCESS fails (Unauthenticated), past the point of no return",
        Fault(
            "error",
            fail=({"error": "Unauthenticated", "op": "rename", "path": "{dest}/_SUCCESS"},),
            raises="Unauthenticated",
            past_no_return=True,
        ),
    ),
    (
        "not-supported",
        "the cleanup's deletes fail (NotSupported) after the commit",
        Fault(
            "error",
            fail=(
                {
                    "error": "NotSupported",
                    "op": ["delete", "delete_batch"],
                    "path": "{dest}/_temporary/manifest_*/00*",
                },
            ),
            raises="CommitError",
            past_no_return=True,
        ),
    ),
    (
        "lock-lost",
        "every heartbeat of the destination lock fails: the lock is lost mid-rename (LockLost)",
        Fault(
            "error",
            rule="lock-lost",
            fail=(
                {"error": "Transient", "op": "put", "path": "{dest}/_temporary/_commit.lock", "after": 1},
                {"kind": "latency", "op": "rename", "path": FORWARD, "seconds": 0.6},
            ),
            raises="LockLost",
            lock_ttl=2.0,  # what follows renews a 2 s lease: a loaded CI machine kept 1 s badly
        ),
    ),
    (
        "outage",
        "every HTTP request answered 503 from the 3rd rename on (an outage the store's retries "
        "give up on; the lock cannot be released)",
        Fault("error", P("rename_files:progress:2"), rule="outage", raises="Throttled"),
    ),
    (
        "conflict",
        "append meets an existing name (ConflictError); again in mode replace",
        Fault("error", rule="conflict", raises="ConflictError", retry_mode="replace"),
    ),
    (
        "manifest",
        "a corrupt task manifest (ManifestError); again once it is whole",
        Fault("error", rule="manifest", raises="ManifestError"),
    ),
]
_GCS = ("gcs-double", "gcs-fake")
SCENARIOS += [
    Scenario(
        f"error-{_name}-{_then}",
        f"{_what}; then {'commit-job again' if _then == 'resume' else 'abort-job'}",
        OLD,
        (job("append", T0, T1) if _name == "conflict" else REPLACE,),
        _fault,
        _then,
        backends=frozenset({"blob", "dfs", _GCS[_i % 2]} | ({"local"} if _fault.rule != "outage" else set())),
    )
    for _i, (_name, _what, _fault) in enumerate(ERRORS)
    for _then in ("resume", "abort")
]

# -- Hudi table commits (issues 13, 26): killed at every stage of the table commit ------------------
# The write: two tasks, four base files in p=a (an old partition) and p=c (a new one). Table
# writes are direct (issue 26, the default): each task writes its files in place under Hudi's
# markers and one loser attempt wrote a file it never committed (the reconcile deletes it).
T_ROWS = (((10, "a", "n10"), (11, "c", "n11")), ((12, "a", "n12"), (13, "c", "n13"), (14, "a", "n14")))
TABLE_JOBS = {
    "append": TableJob(INSERT, T_ROWS),
    "overwrite-dyn": TableJob(OVERWRITE, T_ROWS),
    "overwrite-all": TableJob(OVERWRITE_TABLE, T_ROWS),
}
# (kill point, past the point of no return): the direct table commit's stages
# (table/commit.py). The journal is saved ("renaming") right after plan_commit; from then on
# every winning file is in place, so abort_job completes the commit (the table kind says so:
# table/undo.py; as for a staged commit whose renames all happened); publish writes the
# completed instant; the markers go after the lock is released (cleanup is the last point).
TABLE_POINTS = [
    ("load_manifests:end", False),
    ("check_order:end", False),
    ("plan_commit:end", False),
    ("reconcile:start", True),
    ("reconcile:end", True),
    ("partition_meta:end", True),
    ("publish:start", True),
    ("publish:end", True),
    ("cleanup:start", True),
]
TABLE_SAMPLE = {"plan_commit:end", "reconcile:end"}
"""The stages at which append and the whole-table overwrite are killed: either side of the
point of no return (dynamic overwrite, the replacecommit with the most requests, is killed at
all of them; tests/table/test_direct_kills.py kills it before every request): suite budget."""

SCENARIOS += [
    Scenario(f"table-{k}", f"table: {j.operation}, no fault", {}, (), tables=(j,))
    for k, j in TABLE_JOBS.items()
]
for _k, _j in TABLE_JOBS.items():
    for _point, _past in TABLE_POINTS:
        if _k != "overwrite-dyn" and _point not in TABLE_SAMPLE:
            continue
        _short = _point.replace(":progress", "").replace(":", "-").replace("_", "-")
        for _then in ("resume", "abort"):
            SCENARIOS.append(
                Scenario(
                    f"table-{_k}-kill-{_short}-{_then}",
                    f"table: {_j.operation}, killed at {_point}, {_then}",
                    {},
                    (),
                    Fault("kill", P(_point), past_no_return=_past),
                    _then,
                    tables=(_j,),
                )
            )
# The staged table commit (table_commit=staged: files renamed into the table at job commit)
# keeps one representative: killed mid-renames, then aborted (the renamed files moved back),
# on local files and on Blob (a rename is a copy and a delete there).
SCENARIOS.append(
    Scenario(
        "table-staged-overwrite-dyn-kill-rename-files-2-abort",
        "table, staged: insert_overwrite, killed at rename_files:progress:2, abort",
        {},
        (),
        Fault("kill", P("rename_files:progress:2")),
        "abort",
        tables=(TABLE_JOBS["overwrite-dyn"],),
        backends=frozenset({"local", "blob"}),
        table_commit="staged",
    )
)
TABLE_TTL = 60.0
"""Lock and heartbeat ttl of the table takeovers: A's process is provably dead on this host,
so B takes both over at once. Proven by B's log (no wait announced); the time bound (B
commits within one ttl) is a backstop far above a loaded machine's 11-25 s commit."""
_MARKER_GONE = {"type": "store", "op": "delete", "path": "{dest}/.hoodie/.aux/amcommit/2*/_job.json"}
MID_CLEANUP = {
    # flat stores delete the staging objects one by one: cut right after the job marker's
    "blob": _MARKER_GONE,
    "gcs-double": _MARKER_GONE,
    "gcs-fake": _MARKER_GONE,
    # stores with directories delete folders: cut after the first one
    "*": {"type": "store", "op": "delete", "path": "{dest}/.hoodie/.aux/amcommit/2*"},
}
SCENARIOS += [
    Scenario(
        f"table-overwrite-dyn-kill-mid-cleanup-{_then}",
        f"table: insert_overwrite, killed mid-cleanup after publishing (flat stores: the job "
        f"marker deleted, the journal not), {_then}",
        {},
        (),
        Fault("kill", MID_CLEANUP, past_no_return=True),
        _then,
        tables=(TABLE_JOBS["overwrite-dyn"],),
    )
    for _then in ("resume", "abort")
]
T_B = TableJob(OVERWRITE, (((20, "a", "b20"), (21, "d", "b21")),))
LOSER = "{dest}/p=*"
"""The loser attempt's base file (the only base file a direct table commit deletes)."""
SCENARIOS += [
    Scenario(
        "table-failed-rollback",
        "table: overwrite fails for good saving its plan (permission denied); amcommit rollback: "
        "the old table (the loser's file gone too)",
        {},
        (),
        Fault("store", rule="fail"),
        tables=(TABLE_JOBS["overwrite-dyn"],),
    ),
    Scenario(
        "table-takeover-mid-commit",
        f"table: writer A killed after its reconcile holding the lock (ttl {TABLE_TTL:g} s); "
        "writer B takes the lock over, completes A's commit (its journal), commits: A then B",
        {},
        (),
        # past_no_return here: the takeover completes A's commit (as for plain destinations)
        Fault("takeover", P("reconcile:end"), lock_ttl=TABLE_TTL, past_no_return=True),
        tables=(TABLE_JOBS["append"], T_B),
    ),
    Scenario(
        "table-takeover-dead-writer",
        f"table: writer A killed before its journal, holding the lock (ttl {TABLE_TTL:g} s, "
        "heartbeat too); writer B rolls A's inflight instant back, commits: B alone",
        {},
        (),
        Fault("takeover", P("check_order:end"), lock_ttl=TABLE_TTL),
        tables=(TABLE_JOBS["append"], T_B),
    ),
]

TABLE_LOCK = "{dest}/.hoodie/.aux/amcommit/_commit.lock"
TABLE_LOST_TTL = 6.0
"""``lock_ttl`` of the table commits that lose their lock: a stall ends when the lock is lost
(``0.75 * ttl`` after the last renewal); until the stall, a busy machine must keep renewing
it (a 2 s lease, 1.5 s between renewals, was lost early under load: issue of NOTES-38). What
follows the failure uses the default ttl: its own lock is taken back at once."""

# -- a table commit that fails for good, then commit-job again / abort-job (issue 23 item 4): the
# dynamic overwrite (a replacecommit), one representative per kind of failure point. (A direct
# commit renames no base file: the staged commit's "a rename's source changed" has no
# counterpart; the deletion of the loser's file takes the renames' place.)
TABLE_ERRORS: list[tuple[str, str, Fault]] = [
    (
        "throttled",
        "a throttling storm that never ends on the loser's file's deletion",
        Fault(
            "error",
            fail=({"kind": "throttle", "op": "delete", "path": LOSER},),
            raises="Throttled",
            past_no_return=True,  # the journal was saved before the reconcile
        ),
    ),
    (
        "publish",
        "publishing the completed instant is denied (PermissionDenied), past the point of no return",
        Fault(
            "error",
            fail=(
                {
                    "error": "PermissionDenied",
                    "op": ["put", "rename"],
                    "path": "{dest}/.hoodie/*.replacecommit",
                },
            ),
            raises="PermissionDenied",
            past_no_return=True,
        ),
    ),
    (
        "lock-lost",
        "the loser's file's deletion stalls and from then on every heartbeat of the table's "
        "lock fails: the lock is lost mid-reconcile, after the journal (LockLost)",
        Fault(
            "error",
            rule="lock-lost",
            fail=(
                {"kind": "stall", "op": "delete", "path": LOSER},
                {"error": "Transient", "op": "put", "path": TABLE_LOCK, "when": "stalled"},
            ),
            raises="LockLost",
            lock_ttl=TABLE_LOST_TTL,
            past_no_return=True,  # checked: the journal was saved before the reconcile
        ),
    ),
    (
        "cleanup",
        "the staging folder's deletes fail (NotSupported) after the instant is published",
        Fault(
            "error",
            fail=(
                {
                    "error": "NotSupported",
                    "op": ["delete", "delete_batch"],
                    "path": "{dest}/.hoodie/.aux/amcommit/2*",
                },
            ),
            raises="CommitError",
            past_no_return=True,
        ),
    ),
]
TABLE_ERRORS_EARLY: list[tuple[str, str, Fault]] = [
    (
        "lock-lost-before-journal",
        "saving the plan stalls and from then on every heartbeat of the table's lock fails: "
        "the lock is lost before the journal (what a loaded machine did to the lock-lost cells: "
        "abort rolls the write back, nothing was published)",
        Fault(
            "error",
            rule="lock-lost",
            fail=(
                {"kind": "stall", "op": "put", "path": "{dest}/.hoodie/.aux/amcommit/*/commit-plan.json"},
                {"error": "Transient", "op": "put", "path": TABLE_LOCK, "when": "stalled"},
            ),
            raises="LockLost",
            lock_ttl=TABLE_LOST_TTL,
        ),
    ),
]
SCENARIOS += [
    Scenario(
        f"table-error-{_name}-{_then}",
        f"table: insert_overwrite, {_what}; then {'commit-job again' if _then == 'resume' else 'abort-job'}",
        {},
        (),
        _fault,
        _then,
        tables=(TABLE_JOBS["overwrite-dyn"],),
        backends=frozenset({"local", "blob"}),
    )
    for _name, _what, _fault in TABLE_ERRORS_EARLY
    for _then in ("resume", "abort")
]
SCENARIOS += [
    Scenario(
        f"table-error-{_name}-{_then}",
        f"table: insert_overwrite, {_what}; then {'commit-job again' if _then == 'resume' else 'abort-job'}",
        {},
        (),
        _fault,
        _then,
        tables=(TABLE_JOBS["overwrite-dyn"],),
        backends=frozenset({"local", "blob", "dfs", _GCS[_i % 2]}),
    )
    for _i, (_name, _what, _fault) in enumerate(TABLE_ERRORS)
    for _then in ("resume", "abort")
]

BY_NAME = {s.name: s for s in SCENARIOS}
assert len(BY_NAME) == len(SCENARIOS), "duplicate scenario names"
