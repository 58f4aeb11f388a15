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
        "--verify", action="store_true", help="check an archive's hashes and load its weights with safe loading only"
    )


def run(args: argparse.Namespace) -> int:
    if args.verify:
        v = ar.verify(args.path)
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
