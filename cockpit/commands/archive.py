"""``cockpit archive RUN_DIR [--out DIR]`` and ``cockpit archive --verify DIR``."""

from __future__ import annotations

import argparse

from .. import archive as ar


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", help="a run folder (campaigns/demo/runs/r0003), or with --verify an archive folder")
    p.add_argument(
        "--out", default=None, help="where to write the archive (default: campaigns/<c>/report/archive/<run>)"
    )
    p.add_argument(
        "--verify",
        action="store_true",
        help="check an archive's hashes, load its weights with safe loading only, then rebuild the model with the "
        "task's code and replay the control inputs",
    )
    p.add_argument(
        "--no-replay", action="store_true", help="with --verify: hashes and safe loading only (runs no task code)"
    )


def run(args: argparse.Namespace) -> int:
    if args.verify:
        v = ar.verify(args.path, replay=not args.no_replay)
        for line in v.lines:
            print(line)
        if not v.ok:
            problems = "\n".join(f"  - {p}" for p in v.problems)
            raise ar.ArchiveError(f"{v.folder}: verification failed; nothing in it should be trusted:\n{problems}")
        print(f"{v.folder}: verified")
        return 0
    out = ar.gather(args.path, args.out)
    print(f"archived {args.path} into {out}")
    print(f"check it with: cockpit archive --verify {out}")
    return 0
