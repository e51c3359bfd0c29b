#!/usr/bin/env python3
"""Tables and plots of the completion benchmark (bench/completion_bench.cc) from one or more runs.

Usage: tools/completion_results.py OUT_DIR RUN.txt [RUN.txt...]

Each RUN.txt is one run's output; a point's figure is the median over the runs that report it.
Writes OUT_DIR/completions-tables.md (one table per figure, threads by variant: completions per
second, enqueue-to-callback latency median and 99th percentile, the mechanism's CPU while busy and
while idle, event queries per completion; "na" where the variant has no such figure, "-" where
it was not run) and, where matplotlib is installed, OUT_DIR/completions-throughput.png and
OUT_DIR/completions-latency.png.
"""
import collections
import pathlib
import statistics
import sys

VARIANTS = ["evpool", "evpool-2-pollers", "evpool-4-pollers", "host-func", "event-sync-thread", "tf-fifo", "pika-poll-all"]
# (figure, title, divisor, digits)
FIGURES = [
    ("completions_per_s", "M completions per second", 1e6, 3),
    ("latency_median_us", "enqueue-to-callback latency, median us", 1.0, 1),
    ("latency_p99_us", "enqueue-to-callback latency, p99 us", 1.0, 1),
    ("poller_cpu_busy", "the mechanism's CPU during the timed window, cores", 1.0, 3),
    ("poller_cpu_idle", "the mechanism's CPU while idle after the run, cores", 1.0, 3),
    ("queries_per_completion", "event queries per completion", 1.0, 2),
]


def read(paths):
    points = collections.defaultdict(list)  # (variant, threads) -> [{figure: value}], "na" left out
    for path in paths:
        for line in pathlib.Path(path).read_text().splitlines():
            fields = line.split()
            if len(fields) < 3 or not fields[1].startswith("threads="):
                continue
            figures = dict(field.split("=", 1) for field in fields[2:] if "=" in field)
            points[(fields[0], int(fields[1].split("=")[1]))].append(
                {name: float(value) for name, value in figures.items() if value != "na"})
    return points


def median(points, key, figure):
    values = [run[figure] for run in points.get(key, []) if figure in run]
    return statistics.median(values) if values else None


def threads_of(points):
    return sorted({key[1] for key in points})


def table(points, figure, scale, digits):
    threads = threads_of(points)
    variants = [v for v in VARIANTS if any((v, t) in points for t in threads)]
    variants += sorted({key[0] for key in points} - set(VARIANTS))
    lines = ["| threads | " + " | ".join(variants) + " |", "|---:|" + "---:|" * len(variants)]
    for count in threads:
        cells = []
        for variant in variants:
            if (variant, count) not in points:
                cells.append("-")
                continue
            value = median(points, (variant, count), figure)
            cells.append("na" if value is None else f"{value / scale:,.{digits}f}")
        lines.append(f"| {count} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(points, panels, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    figure_, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4), squeeze=False)
    threads = threads_of(points)
    variants = [v for v in VARIANTS if any((v, t) in points for t in threads)]
    for axis, (figure, title, scale) in zip(axes[0], panels):
        for variant in variants:
            xs = [t for t in threads if median(points, (variant, t), figure) is not None]
            if xs:
                axis.plot(xs, [median(points, (variant, t), figure) / scale for t in xs], marker="o",
                          label=variant)
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.set_xlabel("requesting threads")
        axis.set_title(title)
        axis.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=8)
    figure_.tight_layout()
    figure_.savefig(path, dpi=110)
    plt.close(figure_)
    return path


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    points = read(sys.argv[2:])
    sections = [f"Medians of {len(sys.argv) - 2} runs. Latency is enqueue-to-callback: from just before the "
                "cudaMemsetAsync is enqueued to the start of the completion callback.\n"]
    for figure, title, scale, digits in FIGURES:
        sections.append(f"### {title}\n\n" + table(points, figure, scale, digits))
    (out / "completions-tables.md").write_text("\n\n".join(sections) + "\n")
    plot(points, [("completions_per_s", "M completions per second", 1e6)], out / "completions-throughput.png")
    plot(points, [("latency_median_us", "enqueue-to-callback latency, median us", 1.0),
                  ("latency_p99_us", "enqueue-to-callback latency, p99 us", 1.0)], out / "completions-latency.png")
    print(f"wrote {out / 'completions-tables.md'}")


if __name__ == "__main__":
    main()
