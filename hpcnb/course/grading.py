"""Course tooling for instructors: student exercises from worked solutions, and autograding.

Both go through nbgrader (its own preprocessors, in a throw-away course directory); ``hpcnb grading``
(or ``python -m hpcnb.course.grading``)::

    hpcnb grading generate     # solutions/*.ipynb -> exercises/*.ipynb (student versions)
    hpcnb grading check        # exercises/ up to date with solutions/, and nothing leaked
    hpcnb grading release OUT  # the students' kit (folder or .tar.gz), from the committed course
    hpcnb grading collect SUBMISSIONS   # each portal user's exercises (hpcnb.course.handout)
    hpcnb grading collect SUBMISSIONS --from DIR   # DIR/<student>/*.ipynb, or your own DIR/*.ipynb
    hpcnb grading autograde SUBMISSIONS --out grades/ [--notebook NAME]
                               # SUBMISSIONS/<student>/<notebook>.ipynb -> grades.csv (merged), feedback
    hpcnb grading return grades/feedback  # the feedback into each user's home

This module is the command line; the work is done in :mod:`~hpcnb.course.exercises` (generate,
check), :mod:`~hpcnb.course.release`, :mod:`~hpcnb.course.autograde` (all three through nbgrader:
:mod:`~hpcnb.course.nbgrader_io`) and :mod:`~hpcnb.course.handout` (collect, return). Their public
names are importable from here too.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import re
import sys
from dataclasses import fields, replace
from pathlib import Path

from hpcnb.course import handout
from hpcnb.course.autograde import (
    DEFAULT_TIMEOUT,
    REAL_SLURM_TIMEOUT,
    CellGrade,
    NotebookGrade,
    _grade_one,
    autograde,
    default_timeout,
)
from hpcnb.course.exercises import _show, check, generate, secret_regions
from hpcnb.course.nbgrader_io import EXERCISES_DIR, ROOT, SOLUTIONS_DIR, GradingError, solution_notebooks
from hpcnb.course.release import bundle_problems, release
from hpcnb.course.sandbox import Limits
from hpcnb.course.wrong_answers import plant_wrong_answer
from hpcnb.slurm import sizes

__all__ = [
    "DEFAULT_TIMEOUT",
    "EXERCISES_DIR",
    "REAL_SLURM_TIMEOUT",
    "ROOT",
    "SOLUTIONS_DIR",
    "CellGrade",
    "GradingError",
    "NotebookGrade",
    "autograde",
    "bundle_problems",
    "check",
    "default_timeout",
    "generate",
    "main",
    "plant_wrong_answer",
    "release",
    "secret_regions",
    "solution_notebooks",
]


def _limits_json(text: str) -> Limits:
    return Limits.from_dict(json.loads(text))


def _limit(text: str) -> tuple[str, int]:
    """``NAME=VALUE`` of a sandbox limit (VALUE: an integer, or with K, M, G for bytes)."""
    name, _, value = text.partition("=")
    names = [f.name for f in fields(Limits)]
    if name not in names or not value:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE with NAME one of {', '.join(names)}: {text!r}")
    if not re.fullmatch(r"\d+[KMGkmg]?", value):
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}")
    return name, sizes.parse_bytes(value)


_VERBS_HELP = """\
a class, in order: generate and check (exercises/ from solutions/), release (the students' kit),
collect (each portal user's exercises/ into SUBMISSIONS/<user>/), autograde (grades, feedback),
return (the feedback into each user's home). Exit codes: 0 done, 1 check found problems or
collect/return failed for a user (the others are done), 2 usage or bad input."""


def build_parser(prog: str = "python -m hpcnb.course.grading") -> argparse.ArgumentParser:
    """The instructor's verbs (the internal per-notebook entry, ``_grade-one``, is not among them)."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0], epilog=_VERBS_HELP,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="VERB")

    def verb(name: str, summary: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=summary, description=summary)

    gen = verb("generate", "write exercises/ (student versions) from solutions/")
    chk = verb("check", "exit 1 unless exercises/ is up to date and holds no solution text (work/ folders aside)")
    solutions_help = f"the worked notebooks (default: {SOLUTIONS_DIR})"
    for p in (gen, chk):
        p.add_argument("--solutions", type=Path, default=SOLUTIONS_DIR, help=solutions_help)
        p.add_argument("--exercises", type=Path, default=EXERCISES_DIR,
                       help=f"the students' versions (default: {EXERCISES_DIR})")
    bundle = verb("release", "write the students' kit from the committed course: no solutions/ or tests")
    bundle.add_argument("out", type=Path, help="a new folder, or a file name ending in .tar.gz")
    bundle.add_argument("--solutions", type=Path, default=SOLUTIONS_DIR, help=solutions_help)
    users_help = ("a count N (student1 .. studentN) or names, as PORTAL_USERS "
                  f"(default: $PORTAL_USERS, else 3; now: {_default_users()!r})")
    take = verb("collect", "copy each portal user's ~/COURSE/exercises/*.ipynb into SUBMISSIONS/<user>/ "
                           "(SUBMISSIONS: yours, made 0700 when missing, writable by no one else)")
    take.add_argument("submissions", type=Path, help="where to put them (SUBMISSIONS/<user>/<notebook>.ipynb)")
    take.add_argument("--from", dest="source", type=Path, default=None, metavar="DIR",
                      help="instead of the portal users' homes (a dry run): DIR/<student>/*.ipynb, or DIR/*.ipynb, "
                           "your own notebooks, into SUBMISSIONS/<your user name>/ (default: none, the homes)")
    back = verb("return", "copy FEEDBACK/<user>/*.html into each user's ~/COURSE/feedback/ (theirs, 0600)")
    back.add_argument("feedback", type=Path, help="autograde's feedback folder (grades/feedback)")
    for p in (take, back):
        p.add_argument("--users", default=None, help=users_help)
        p.add_argument("--course-dir", default="hpcnb-course", metavar="COURSE",
                       help="each user's course folder in their home (default: hpcnb-course)")
    grade = verb("autograde", "grade SUBMISSIONS/<student>/<notebook>.ipynb: grades.csv, cells.csv, feedback")
    grade.add_argument("submissions", type=Path, help="the collected notebooks: SUBMISSIONS/<student>/<notebook>.ipynb")
    grade.add_argument("--out", type=Path, default=Path("grades"),
                       help="where grades.csv, cells.csv, feedback/<student>/ and autograded/ go (default: grades). "
                            "An earlier run's grades there are kept: the rows of each student's notebook graded "
                            "now replace that notebook's, the others stay (regrade one notebook with --notebook)")
    grade.add_argument("--solutions", type=Path, default=SOLUTIONS_DIR, help=solutions_help)
    grade.add_argument("--timeout", type=int, default=None,
                       help=f"seconds per cell (default {DEFAULT_TIMEOUT} on the local Slurm, "
                            f"{REAL_SLURM_TIMEOUT} on a real one)")
    grade.add_argument("--notebook-timeout", type=float, default=None,
                       help="seconds for one whole notebook (default: timeout x (code cells + 2) + 120)")
    grade.add_argument("--notebook", action="append", dest="notebooks", metavar="NAME",
                       help="grade only this notebook, e.g. 03-first-batch-job-exercises (repeatable; "
                            "default: every solution notebook)")
    grade.add_argument("--limit", action="append", type=_limit, default=[], metavar="NAME=VALUE",
                       help="a limit of each submission's sandbox, e.g. memory_bytes=4G, processes=256 "
                            f"(repeatable; default: {_limits_shown()})")
    return parser


def _default_users() -> str:
    return os.environ.get("PORTAL_USERS", "3")


def _limits_shown() -> str:
    """The sandbox's default limits, as --limit takes them (cpu_seconds unset: the notebook's time limit)."""
    def value(name: str, number: int | None) -> str:
        if number is None:
            return "the notebook's time limit"
        return sizes.format_size(number) if name.endswith("_bytes") else str(number)

    return ", ".join(f"{f.name}={value(f.name, getattr(Limits(), f.name))}" for f in fields(Limits))


def _handout(args: argparse.Namespace) -> int:
    """collect or return; 1 when a student's failed (the others are done)."""
    if args.command == "collect" and args.source is not None:
        if args.users is not None:
            raise handout.HandoutError("--from DIR or --users: one or the other")
        outcome = handout.collect_from(args.source, args.submissions)
    else:
        users = handout.portal_users(_default_users() if args.users is None else args.users)
        outcome = (handout.collect(users, args.submissions, course_dir=args.course_dir) if args.command == "collect"
                   else handout.return_feedback(args.feedback, users, course_dir=args.course_dir))
    return 1 if outcome.failed else 0


def _grade_one_main(argv: list[str]) -> int:
    """The internal per-notebook grading process (``_grade-one``), started by :func:`autograde`."""
    one = argparse.ArgumentParser(prog="python -m hpcnb.course.grading _grade-one")
    one.add_argument("course", type=Path)
    one.add_argument("assignment")
    one.add_argument("student")
    one.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT)
    one.add_argument("--limits", type=_limits_json, default=Limits())
    args = one.parse_args(argv)
    return _grade_one(args.course, args.assignment, args.student, args.timeout, args.limits)


def main(argv: list[str] | None = None, prog: str = "python -m hpcnb.course.grading") -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["_grade-one"]:
        return _grade_one_main(argv[1:])
    args = build_parser(prog).parse_args(argv)
    try:
        if args.command == "generate":
            generate(args.solutions, args.exercises)
            return 0
        if args.command == "check":
            problems = check(args.solutions, args.exercises)
            if problems:
                print(f"{_show(args.exercises)} is not in order:", file=sys.stderr)
                for problem in problems:
                    print(f"  - {problem}", file=sys.stderr)
                print(f"Fix: {prog} generate (and commit exercises/)", file=sys.stderr)
                return 1
            count = len(solution_notebooks(args.solutions))
            print(f"{_show(args.exercises)}: {count} exercise notebook(s) up to date, no solution text in them")
            return 0
        if args.command == "release":
            release(args.out, solutions=args.solutions)
            return 0
        if args.command in ("collect", "return"):
            return _handout(args)
        limits = replace(Limits(), **dict(args.limit)) if args.limit else None
        grades = autograde(args.submissions, args.out, solutions=args.solutions, timeout=args.timeout,
                           notebook_timeout=args.notebook_timeout, notebooks=args.notebooks, limits=limits)
        with open(args.out / "grades.csv", newline="") as fh:
            rows = sum(1 for _ in csv.DictReader(fh))
        print(f"wrote {args.out / 'grades.csv'} ({len(grades)} notebook(s) graded now, {rows} row(s) in all), "
              f"{args.out / 'cells.csv'}, feedback in {args.out / 'feedback'}")
        return 0
    except (GradingError, handout.HandoutError) as err:
        print(f"{prog}: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
