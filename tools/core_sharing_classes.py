#!/usr/bin/env python3
"""Pools the per-round figures of evpool_core_sharing_probe runs (--each) into quiet and shared rounds.

Usage: tools/core_sharing_classes.py DIR [QUIET_RATIO]

Every DIR/*.txt is read. A file named BUILD-cpuN.txt belongs to build BUILD (a comparison of
builds), any other file to one group. A round is quiet if its wide loop's step took less than QUIET_RATIO
(default 0.8) of its chain loop's step, the rule of bench/core_sharing_probe.cc; pooling rounds
from many processes and vCPUs uses the same rule for every one of them. Prints, per group and
class, the rounds and the median of each loop and of each pool's time over private's in the same
round, as a Markdown table.
"""
import pathlib
import re
import statistics
import sys

LOOPS = ("evpool", "evpool-nostats", "private", "alu-wide", "alu-chain")


def rounds_of(path):
    for line in path.read_text().splitlines():
        if line.startswith("evpool "):
            words = line.split()
            yield {words[i]: float(words[i + 1]) for i in range(0, len(words), 2)}


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    directory = pathlib.Path(sys.argv[1])
    quiet_ratio = float(sys.argv[2]) if len(sys.argv) == 3 else 0.8
    groups = {}
    for path in sorted(directory.glob("*.txt")):
        build = re.match(r"(\w+)-cpu", path.name)
        groups.setdefault(build.group(1) if build else "all", []).extend(rounds_of(path))
    print("| build | rounds | " + " | ".join(LOOPS) + " | evpool / private | nostats / private |")
    print("|---|---|" + "---:|" * (len(LOOPS) + 2))
    for build, rounds in groups.items():
        for name, quiet in (("quiet", True), ("shared", False)):
            chosen = [r for r in rounds if (r["alu-wide"] < quiet_ratio * r["alu-chain"]) == quiet]
            if not chosen:
                print(f"| {build} | {name}: 0 |" + " |" * (len(LOOPS) + 2))
                continue
            medians = [statistics.median(r[loop] for r in chosen) for loop in LOOPS]
            over = [statistics.median(r[pool] / r["private"] for r in chosen) for pool in LOOPS[:2]]
            print(f"| {build} | {name}: {len(chosen)} | " + " | ".join(f"{m:.2f}" for m in medians) +
                  " | " + " | ".join(f"{o:.2f}" for o in over) + " |")


if __name__ == "__main__":
    main()
