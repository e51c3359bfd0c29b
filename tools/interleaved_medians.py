#!/usr/bin/env python3
"""Medians over rounds of benchmark runs made side by side, for comparisons within one session.

Each round runs two or more builds of the contention benchmark, one after the other, with Google
Benchmark's random interleaving; repeating rounds spreads a host's drift over every build alike.
Files are named <build>-<round>.json; every repetition of every round counts once in the median.

  tools/interleaved_medians.py bench/results/h200-cost/38da449
"""
import collections
import json
import pathlib
import statistics
import sys


def main(folder: str) -> None:
    samples = collections.defaultdict(list)
    for path in sorted(pathlib.Path(folder).glob("*-*.json")):
        build = path.stem.rsplit("-", 1)[0]
        for run in json.loads(path.read_text())["benchmarks"]:
            if run.get("run_type") == "iteration":
                samples[(run["run_name"], build)].append(run["items_per_second"] / 1e6)
    print(f"{'benchmark':<50} {'build':<6} {'n':>3} {'median M/s':>11} {'min':>9} {'max':>9}")
    for (name, build), values in sorted(samples.items()):
        print(f"{name:<50} {build:<6} {len(values):>3} {statistics.median(values):>11.1f} "
              f"{min(values):>9.1f} {max(values):>9.1f}")


if __name__ == "__main__":
    main(sys.argv[1])
