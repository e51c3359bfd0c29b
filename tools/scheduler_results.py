#!/usr/bin/env python3
"""Tables and a plot of the scheduler benchmark (bench/scheduler_bench.cc).

Usage: tools/scheduler_results.py OUT_DIR RUN.txt [RUN.txt...]

Each RUN.txt is one run's output, whose figures are already medians over the run's rounds; with
several runs, a point's figure is the median over them. Writes OUT_DIR/scheduler-tables.md: per
workload, one table per figure (threads by stack: tasks per second, ready-to-completion latency
p50 and p99, host cores, streams and events created; "na" where the stack has no such figure, "-"
where it was not run), and first a summary of evpool's two stacks (`evpool`, which hears of every
task's completion, and `evpool-planned`, which plans its streams from the graph) against the best
other stack (the faster of each framework's two: its pools under this executor, and its own
executor's stream assignment), the limit and the graph replayed. Where matplotlib is installed, also OUT_DIR/scheduler.png: tasks per
second against threads, one panel per workload.
"""
import collections
import pathlib
import statistics
import sys

STACKS = ["evpool", "evpool-planned", "evpool-ahead", "dali", "dali-exec", "pytorch", "tensorflow", "tensorflow-exec", "limit", "graph"]
EVPOOL = ["evpool", "evpool-planned", "evpool-ahead"]
OTHERS = ["dali", "dali-exec", "pytorch", "tensorflow", "tensorflow-exec"]
WORKLOADS = ["fan-out", "mixed", "chains"]
# (figure, title, divisor, digits)
FIGURES = [
    ("tasks_per_s", "k tasks per second", 1e3, 1),
    ("p50_us", "ready-to-completion latency, p50 us", 1.0, 1),
    ("p99_us", "ready-to-completion latency, p99 us", 1.0, 1),
    ("cores", "host cores used (process CPU time over wall time)", 1.0, 2),
    ("streams_created", "streams created", 1.0, 0),
    ("events_created", "events created", 1.0, 0),
]


def read(paths):
    """(workload, threads, stack) -> [{figure: value}], one dict per run, "na" left out."""
    points = collections.defaultdict(list)
    for path in paths:
        for line in pathlib.Path(path).read_text().splitlines():
            fields = line.split()
            if not fields or fields[0] != "scheduler":
                continue
            values = dict(field.split("=", 1) for field in fields[1:] if "=" in field)
            key = (values.pop("workload"), int(values.pop("threads")), values.pop("stack"))
            values.pop("runs", None)
            points[key].append({name: float(value) for name, value in values.items() if value != "na"})
    return points


def median(points, key, figure):
    values = [run[figure] for run in points.get(key, []) if figure in run]
    return statistics.median(values) if values else None


def ordered(names, known):
    return [name for name in known if name in names] + sorted(set(names) - set(known))


def table(points, workload, figure, scale, digits):
    threads = sorted({t for (w, t, _) in points if w == workload})
    stacks = ordered({s for (w, _, s) in points if w == workload}, STACKS)
    lines = ["| threads | " + " | ".join(stacks) + " |", "|---:|" + "---:|" * len(stacks)]
    for count in threads:
        cells = []
        for stack in stacks:
            key = (workload, count, stack)
            value = median(points, key, figure)
            cells.append("-" if key not in points else "na" if value is None else f"{value / scale:,.{digits}f}")
        lines.append(f"| {count} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def ratio(numerator, denominator):
    return f"{numerator / denominator:.2f}x" if numerator and denominator else "-"


def summary(points):
    ours = [s for s in EVPOOL if any(key[2] == s for key in points)]
    lines = ["| workload | threads | " + " | ".join(f"{s} k tasks/s" for s in ours) + " | best other | " +
             " | ".join(f"{s} / best other" for s in ours) + " | best evpool / limit | evpool p99 us | "
             "best other p99 us |",
             "|---|---:|" + "---:|" * len(ours) + "---|" + "---:|" * len(ours) + "---:|---:|---:|"]
    for workload in ordered({w for (w, _, _) in points}, WORKLOADS):
        for count in sorted({t for (w, t, _) in points if w == workload}):
            rate = {s: median(points, (workload, count, s), "tasks_per_s") for s in STACKS}
            p99 = {s: median(points, (workload, count, s), "p99_us") for s in OTHERS}
            others = [s for s in OTHERS if rate[s]]
            best = max(others, key=lambda s: rate[s]) if others else None
            # Only the stacks that hear of real completions have a latency (enqueued_completions.h).
            timed = [s for s in OTHERS if p99[s] is not None]
            best_p99 = min(timed, key=lambda s: p99[s]) if timed else None
            evpool_p99 = median(points, (workload, count, "evpool"), "p99_us")
            best_ours = max((rate[s] or 0 for s in ours), default=0)
            lines.append(
                f"| {workload} | {count} | " +
                " | ".join(f"{rate[s] / 1e3:,.1f}" if rate[s] else "-" for s in ours) +
                f" | {best or '-'} | " +
                " | ".join(ratio(rate[s], rate[best]) if best else "-" for s in ours) +
                f" | {ratio(best_ours, rate['limit'])} | "
                f"{'-' if evpool_p99 is None else f'{evpool_p99:,.1f}'} | "
                f"{'-' if best_p99 is None else f'{p99[best_p99]:,.1f} ({best_p99})'} |")
    return "\n".join(lines)


def plot(points, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot")
        return
    workloads = ordered({w for (w, _, _) in points}, WORKLOADS)
    figure_, axes = plt.subplots(1, len(workloads), figsize=(5.5 * len(workloads), 4), squeeze=False)
    for axis, workload in zip(axes[0], workloads):
        for stack in ordered({s for (w, _, s) in points if w == workload}, STACKS):
            threads = sorted(t for (w, t, s) in points if w == workload and s == stack)
            rates = [median(points, (workload, t, stack), "tasks_per_s") / 1e3 for t in threads]
            axis.plot(threads, rates, marker="o", label=stack, linestyle="--" if stack in ("limit", "graph") else "-")
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.set_xlabel("worker threads")
        axis.set_ylabel("k tasks per second")
        axis.set_title(workload)
        axis.grid(True, which="both", alpha=0.3)
    axes[0][0].legend()
    figure_.tight_layout()
    figure_.savefig(path, dpi=110)
    plt.close(figure_)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    out = pathlib.Path(sys.argv[1])
    points = read(sys.argv[2:])
    if not points:
        sys.exit("tools/scheduler_results.py: no 'scheduler ...' line in " + ", ".join(sys.argv[2:]))
    out.mkdir(parents=True, exist_ok=True)
    parts = ["# The example scheduler on its stacks", "",
             "Written by tools/scheduler_results.py from bench/scheduler_bench.cc's output. Ratios are "
             "evpool's tasks per second over the other's, at the same workload and thread count.", "",
             summary(points)]
    for workload in ordered({w for (w, _, _) in points}, WORKLOADS):
        parts += ["", f"## {workload}"]
        for figure, title, scale, digits in FIGURES:
            parts += ["", f"{title}:", "", table(points, workload, figure, scale, digits)]
    (out / "scheduler-tables.md").write_text("\n".join(parts) + "\n")
    plot(points, out / "scheduler.png")
    print(f"wrote {out / 'scheduler-tables.md'}")


if __name__ == "__main__":
    main()
