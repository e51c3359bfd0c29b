#!/usr/bin/env python3
"""Tables and plots of the completion benchmark (bench/completion_bench.cc) from one or more runs.

Usage: tools/completion_results.py OUT_DIR RUN.txt [RUN.txt...]

Each RUN.txt is one run's output; a point's figure is the median over the runs that report it.
Where the runs hold closed-loop points, writes OUT_DIR/completions-tables.md (one table per
figure, threads by variant: completions per second, enqueue-to-callback latency median and 99th
percentile, the mechanism's CPU while busy and while idle, event queries per completion; "na" where
the variant has no such figure, "-" where it was not run) and, where matplotlib is installed,
OUT_DIR/completions-throughput.png and OUT_DIR/completions-latency.png.

Where they hold open-loop points (--open-loop), writes OUT_DIR/completions-openloop-tables.md
(the saturation rate of each run, then one table per figure, threads and load by variant:
due-to-callback latency median and 99th percentile, the same from the enqueue (less the
requester's issue lag), completions per second against the offered
rate, the mechanism's and the process's CPU, the requesters' issue lag, abandoned requests) and,
where matplotlib is installed, OUT_DIR/completions-openloop-latency.png (median and p99 against
the load, one row of panels per thread count).
"""
import collections
import math
import pathlib
import statistics
import sys

VARIANTS = ["evpool", "evpool-signal", "evpool-2-pollers", "evpool-4-pollers", "host-func", "event-sync-thread",
            "tf-fifo", "pika-poll-all"]
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


# ---- Open loop ----

# (figure, title, divisor, digits)
OPEN_FIGURES = [
    ("latency_median_us", "due-to-callback latency, median us", 1.0, 1),
    ("latency_p99_us", "due-to-callback latency, p99 us", 1.0, 1),
    ("service_median_us", "enqueue-to-callback (the latency less the issue lag), median us", 1.0, 1),
    ("service_p99_us", "enqueue-to-callback (the latency less the issue lag), p99 us", 1.0, 1),
    ("completions_per_s", "k completions per second in the window (offered: the schedule's rate)", 1e3, 1),
    ("poller_cpu_busy", "the mechanism's own threads' CPU during the window, cores", 1.0, 3),
    ("process_cpu", "the whole process's CPU during the window, cores", 1.0, 3),
    ("issue_lag_median_us", "issue lag (due time to enqueue), median us", 1.0, 1),
    ("issue_lag_p99_us", "issue lag (due time to enqueue), p99 us", 1.0, 1),
    ("abandoned", "requests abandoned (still unissued one window after the window)", 1.0, 0),
]
# A point whose completions in the window fell below this share of the offered rate fell behind.
BEHIND = 0.95


def fields_of(line):
    return dict(field.split("=", 1) for field in line.split()[1:] if "=" in field)


def number(value):
    return float(value)  # "inf" included


def read_open(paths):
    """(variant, threads, load) -> [{figure: value}] and threads -> [(run, saturation, method)]."""
    points = collections.defaultdict(list)
    saturation = collections.defaultdict(list)
    for run, path in enumerate(paths, 1):
        for line in pathlib.Path(path).read_text().splitlines():
            if line.startswith("open-loop "):
                f = fields_of(line)
                points[(f["variant"], int(f["threads"]), float(f["load"]))].append(
                    {name: number(value) for name, value in f.items()
                     if name not in ("variant", "threads", "load") and value != "na"})
            elif line.startswith("saturation "):
                f = fields_of(line)
                saturation[int(f["threads"])].append((run, float(f["completions_per_s"]), f.get("method", "?")))
    return points, saturation


def open_variants(points):
    present = {key[0] for key in points}
    return [v for v in VARIANTS if v in present] + sorted(present - set(VARIANTS))


def cell(value, scale, digits):
    if value is None:
        return "na"
    if math.isinf(value):
        return "inf"
    return f"{value / scale:,.{digits}f}"


def open_table(points, figure, scale, digits):
    variants = open_variants(points)
    rows = sorted({(key[1], key[2]) for key in points})
    offered = figure == "completions_per_s"
    head = "| threads | load | " + ("offered | " if offered else "") + " | ".join(variants) + " |"
    lines = [head, "|---:|---:|" + ("---:|" if offered else "") + "---:|" * len(variants)]
    for threads, load in rows:
        cells = []
        if offered:
            rates = [median(points, (v, threads, load), "offered_per_s") for v in variants]
            rates = [r for r in rates if r is not None]
            cells.append(cell(statistics.median(rates), scale, digits) if rates else "-")
        for variant in variants:
            key = (variant, threads, load)
            if key not in points:
                cells.append("-")
                continue
            text = cell(median(points, key, figure), scale, digits)
            done, asked = median(points, key, "completions_per_s"), median(points, key, "offered_per_s")
            if done is not None and asked and done < BEHIND * asked:
                text += " \N{DAGGER}"
            cells.append(text)
        lines.append(f"| {threads} | {load:.0%} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def saturation_table(saturation, runs):
    lines = ["| threads | " + " | ".join(f"run {r}" for r in range(1, runs + 1)) + " | median | method |",
             "|---:|" + "---:|" * (runs + 1) + "---|"]
    for threads in sorted(saturation):
        by_run = {run: rate for run, rate, _ in saturation[threads]}
        methods = sorted({method for _, _, method in saturation[threads]})
        cells = [cell(by_run.get(r), 1e3, 1) if r in by_run else "-" for r in range(1, runs + 1)]
        cells.append(cell(statistics.median(by_run.values()), 1e3, 1))
        lines.append(f"| {threads} | " + " | ".join(cells) + " | " + ", ".join(methods) + " |")
    return "\n".join(lines)


def open_plot(points, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    threads = sorted({key[1] for key in points})
    variants = open_variants(points)
    panels = [("latency_median_us", "median"), ("latency_p99_us", "p99")]
    figure_, axes = plt.subplots(len(threads), len(panels), figsize=(5.5 * len(panels), 3.8 * len(threads)),
                                 squeeze=False)
    for row, count in enumerate(threads):
        loads = sorted({key[2] for key in points if key[1] == count})
        for axis, (figure, label) in zip(axes[row], panels):
            for variant in variants:
                xs, ys, behind = [], [], []
                for load in loads:
                    key = (variant, count, load)
                    value = median(points, key, figure)
                    if value is not None and not math.isinf(value):  # inf: abandoned requests
                        xs.append(load * 100)
                        ys.append(value)
                        done, asked = median(points, key, "completions_per_s"), median(points, key, "offered_per_s")
                        behind.append(done is not None and bool(asked) and done < BEHIND * asked)
                if xs:
                    color = f"C{variants.index(variant) % 10}"  # one colour per variant in every panel
                    axis.plot(xs, ys, marker="o", label=variant, color=color)
                    # Hollow: the mechanism fell behind the offered rate there.
                    hollow = [(x, y) for x, y, b in zip(xs, ys, behind) if b]
                    if hollow:
                        axis.plot(*zip(*hollow), linestyle="none", marker="o", markersize=9,
                                  markerfacecolor="white", markeredgecolor=color)
            axis.set_yscale("log")
            axis.set_xticks([load * 100 for load in loads])
            axis.set_xlabel("offered load, % of a thread per stream's saturation rate")
            axis.set_ylabel("us")
            axis.set_title(f"{count} threads: due-to-callback latency, {label}")
            axis.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=8)
    figure_.suptitle(f"open loop, medians; hollow: fell behind (completions below {BEHIND:.0%} of offered); "
                     "inf (abandoned requests) not drawn", fontsize=9)
    figure_.tight_layout()
    figure_.savefig(path, dpi=110)
    plt.close(figure_)
    return path


def write_open(out, paths):
    paths = [path for path in paths if read_open([path])[0]]  # the runs that hold open-loop points
    points, saturation = read_open(paths)
    if not points:
        return False
    sections = [
        f"Open loop: medians of {len(paths)} runs. Each requesting thread issues requests on its own stream on a "
        "fixed schedule at a share (the load) of the saturation rate of a thread per stream (event-sync-thread) "
        "at the same thread count, measured first in each run; latency is from each request's due time to the "
        "start of its callback, so a request issued late still counts its wait. \N{DAGGER}: fell behind, the "
        f"completions in the window below {BEHIND:.0%} of the offered rate. inf: more requests were abandoned "
        "(still unissued one window after the window) than the percentile leaves out.\n",
        "### saturation rate of a thread per stream, k completions per second\n\n"
        + saturation_table(saturation, len(paths)),
    ]
    for figure, title, scale, digits in OPEN_FIGURES:
        sections.append(f"### {title}\n\n" + open_table(points, figure, scale, digits))
    (out / "completions-openloop-tables.md").write_text("\n\n".join(sections) + "\n")
    open_plot(points, out / "completions-openloop-latency.png")
    print(f"wrote {out / 'completions-openloop-tables.md'}")
    return True


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    wrote_open = write_open(out, sys.argv[2:])
    paths = [path for path in sys.argv[2:] if read([path])]  # the runs that hold closed-loop points
    points = read(paths)
    if not points:
        if not wrote_open:
            sys.exit("no point of the completion benchmark in " + " ".join(sys.argv[2:]))
        return
    sections = [f"Medians of {len(paths)} runs. Latency is enqueue-to-callback: from just before the "
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
