"""Reads Google Benchmark JSON from evpool's contention benchmark; prints tables, writes CSV and plots.

Benchmark names are <backend>/<workload>/<variant>/real_time/threads:<n>. With repetitions, only
the median aggregate is used.
"""
import csv
import json
import pathlib
import re

NAME = re.compile(r"^(?P<backend>[a-z]+)/(?P<workload>[a-z]+)/(?P<variant>[a-z-]+)/real_time/threads:(?P<threads>\d+)")
VARIANT_ORDER = ["evpool", "evpool-nobackoff", "spinlock", "mutex", "boost", "private", "none"]
RATIOS = [("evpool", "spinlock"), ("evpool", "boost"), ("evpool", "private")]


def load(json_path):
    """Returns (context, {(backend, workload): {variant: {threads: (ops_per_s, events_created)}}})."""
    data = json.loads(pathlib.Path(json_path).read_text())
    has_aggregates = any(b.get("run_type") == "aggregate" for b in data["benchmarks"])
    table = {}
    for bench in data["benchmarks"]:
        if has_aggregates and bench.get("aggregate_name") != "median":
            continue
        match = NAME.match(bench["name"])
        if not match or "items_per_second" not in bench:
            continue
        key = (match["backend"], match["workload"])
        point = (bench["items_per_second"], bench.get("events_created"))
        table.setdefault(key, {}).setdefault(match["variant"], {})[int(match["threads"])] = point
    return data.get("context", {}), table


def _ordered(variants):
    return sorted(variants, key=lambda v: VARIANT_ORDER.index(v) if v in VARIANT_ORDER else len(VARIANT_ORDER))


def _millions(value):
    return "-" if value is None else f"{value / 1e6:.2f}"


def format_tables(table):
    lines = []
    for (backend, workload), by_variant in sorted(table.items()):
        variants = _ordered(by_variant)
        ratios = [(a, b) for a, b in RATIOS if a in by_variant and b in by_variant]
        threads = sorted({t for points in by_variant.values() for t in points})
        header = ["threads"] + variants + [f"{a}/{b}" for a, b in ratios]
        rows = []
        for t in threads:
            row = [str(t)]
            for v in variants:
                point = by_variant[v].get(t)
                row.append(_millions(point[0]) if point else "-")
            for a, b in ratios:
                pa, pb = by_variant[a].get(t), by_variant[b].get(t)
                row.append(f"{pa[0] / pb[0]:.2f}x" if pa and pb and pb[0] else "-")
            rows.append(row)
        widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
        lines.append(f"\n{backend} / {workload}: million Get+Put pairs per second, all threads together")
        lines.append("  ".join(h.rjust(w) for h, w in zip(header, widths)))
        lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in rows]
        created = {v: max(p[1] or 0 for p in by_variant[v].values()) for v in variants}
        lines.append("events created at the most thread count: " +
                     ", ".join(f"{v} {int(created[v])}" for v in variants))
    return "\n".join(lines)


def write_csv(table, path):
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["backend", "workload", "variant", "threads", "ops_per_second", "events_created"])
        for (backend, workload), by_variant in sorted(table.items()):
            for variant in _ordered(by_variant):
                for threads, (ops, created) in sorted(by_variant[variant].items()):
                    writer.writerow([backend, workload, variant, threads, f"{ops:.0f}",
                                     "" if created is None else int(created)])


def _si(value, _position=None):
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:g}{suffix}"
    return f"{value:g}"


def plot(table, context, out_dir):
    """One PNG per backend and workload; returns their paths (none if matplotlib is missing)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker  # noqa: F401  (used through matplotlib.ticker)
    except ImportError:
        print("(matplotlib is not installed: no plots; tools/ensure-deps --bench installs it)")
        return []
    paths = []
    machine = f"{context.get('num_cpus', '?')} CPUs, GPUs: {context.get('gpus', '?')}"
    for (backend, workload), by_variant in sorted(table.items()):
        fig, ax = plt.subplots(figsize=(8, 4.5))
        for variant in _ordered(by_variant):
            points = sorted(by_variant[variant].items())
            style = dict(linewidth=2.5, marker="o") if variant == "evpool" else dict(linewidth=1.2, marker=".")
            ax.plot([t for t, _ in points], [p[0] for t, p in points], label=variant, **style)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        threads = sorted({t for points in by_variant.values() for t in points})
        ax.set_xticks(threads)
        ax.set_xticklabels([str(t) for t in threads])
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(_si))
        ax.yaxis.set_minor_locator(matplotlib.ticker.LogLocator(base=10, subs=(2.0, 5.0)))
        ax.yaxis.set_minor_formatter(matplotlib.ticker.FuncFormatter(_si))
        ax.set_xlabel("threads")
        ax.set_ylabel("Get+Put pairs per second (all threads)")
        ax.set_title(f"{backend} backend, {workload} workload\n{machine}", fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
        fig.tight_layout()
        path = pathlib.Path(out_dir) / f"{backend}-{workload}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def report(json_path, out_dir):
    context, table = load(json_path)
    print(format_tables(table))
    csv_path = pathlib.Path(out_dir) / "results.csv"
    write_csv(table, csv_path)
    plots = plot(table, context, out_dir)
    print(f"\nresults: {json_path}\n         {csv_path}")
    for path in plots:
        print(f"         {path}")


def compare(before_path, after_path):
    """Lines comparing two runs point by point: after/before throughput."""
    _, before = load(before_path)
    _, after = load(after_path)
    lines = [f"{'benchmark':<45} {'before M/s':>11} {'after M/s':>10} {'after/before':>13}"]
    for key in sorted(set(before) & set(after)):
        for variant in _ordered(set(before[key]) & set(after[key])):
            for threads in sorted(set(before[key][variant]) & set(after[key][variant])):
                b = before[key][variant][threads][0]
                a = after[key][variant][threads][0]
                name = f"{key[0]}/{key[1]}/{variant}/threads:{threads}"
                lines.append(f"{name:<45} {b / 1e6:>11.2f} {a / 1e6:>10.2f} {a / b:>12.2f}x")
    return "\n".join(lines)
