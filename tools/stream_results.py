#!/usr/bin/env python3
"""Tables and plots of the stream benchmark (bench/stream_bench.cc) from one or more runs.

Usage: tools/stream_results.py OUT_DIR RUN.txt [RUN.txt...]

Each RUN.txt holds one or more runs' output (tools/gpu-verdict writes three into one file); a
point's figure is the median over the runs. Writes OUT_DIR/streams-tables.md (one table per
workload: units per second; for `mixed` also the short units' median and 99th-percentile latency
and the long units' median, for `synced` the units' median and p99) and, where matplotlib is
installed, OUT_DIR/streams-<workload>.png. Where the runs hold one workload W alone, the tables go
to OUT_DIR/streams-W-tables.md instead, beside a full run's.
"""
import collections
import pathlib
import statistics
import sys

VARIANTS = ["evpool", "evpool-at-once", "evpool-synced", "spinlock", "mutex", "round-robin", "private"]
WORKLOADS = ["pair", "handoff", "loop", "synced", "mixed"]
MIXED_LATENCIES = [("short_median_us", "short units, median us"), ("short_p99_us", "short units, p99 us"),
                   ("long_median_us", "long units, median us")]
SYNCED_LATENCIES = [("median_us", "units, median us"), ("p99_us", "units, p99 us")]
LATENCIES = {"mixed": MIXED_LATENCIES, "synced": SYNCED_LATENCIES}


def read(paths):
    points = collections.defaultdict(list)  # (workload, variant, threads) -> [{figure: value}]
    for path in paths:
        for line in pathlib.Path(path).read_text().splitlines():
            fields = line.split()
            if len(fields) < 4 or not fields[2].startswith("threads="):
                continue
            figures = dict(field.split("=") for field in fields[3:])
            points[(fields[0], fields[1], int(fields[2].split("=")[1]))].append(
                {name: float(value) for name, value in figures.items()})
    return points


def median(points, key, figure):
    values = [run[figure] for run in points.get(key, [])]
    return statistics.median(values) if values else None


def table(points, workload, figure, scale, digits):
    threads = sorted({key[2] for key in points if key[0] == workload})
    variants = [v for v in VARIANTS if any((workload, v, t) in points for t in threads)]
    lines = ["| threads | " + " | ".join(variants) + " |", "|---:|" + "---:|" * len(variants)]
    for count in threads:
        cells = []
        for variant in variants:
            value = median(points, (workload, variant, count), figure)
            cells.append("-" if value is None else f"{value / scale:,.{digits}f}")
        lines.append(f"| {count} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(points, workload, out):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    panels = [("units_per_s", "M units per second", 1e6)]
    panels += [(figure, title, 1.0) for figure, title in LATENCIES.get(workload, [])[:2]]
    figure_, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4), squeeze=False)
    threads = sorted({key[2] for key in points if key[0] == workload})
    for axis, (figure, title, scale) in zip(axes[0], panels):
        for variant in VARIANTS:
            xs = [t for t in threads if (workload, variant, t) in points]
            if xs:
                axis.plot(xs, [median(points, (workload, variant, t), figure) / scale for t in xs], marker="o",
                          label=variant)
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.set_xlabel("threads")
        axis.set_title(f"{workload}: {title}")
        axis.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=8)
    figure_.tight_layout()
    path = out / f"streams-{workload}.png"
    figure_.savefig(path, dpi=110)
    plt.close(figure_)
    return path


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    points = read(sys.argv[2:])
    runs = max(len(figures) for figures in points.values()) if points else 0
    sections = [f"Medians of {runs} runs.\n"]
    for workload in WORKLOADS:
        if not any(key[0] == workload for key in points):
            continue
        sections.append(f"### {workload}: M units per second\n\n" + table(points, workload, "units_per_s", 1e6, 3))
        for figure, title in LATENCIES.get(workload, []):
            sections.append(f"### {workload}: {title}\n\n" + table(points, workload, figure, 1.0, 1))
        plot(points, workload, out)
    workloads = {key[0] for key in points}
    name = f"streams-{next(iter(workloads))}-tables.md" if len(workloads) == 1 else "streams-tables.md"
    (out / name).write_text("\n\n".join(sections) + "\n")
    print(f"wrote {out / name}")


if __name__ == "__main__":
    main()
