"""Reads Google Benchmark JSON from evpool's contention benchmark; prints a summary and tables,
writes CSV, Markdown tables and plots.

Benchmark names are <backend>/<workload>/<variant>/real_time/threads:<n>. With repetitions, only
the median aggregate is used. Which variants and workloads exist, their order and what each
workload is compared with come from the benchmark itself: its catalogue (what `--list` prints),
which every run carries in its JSON context. Runs from before the catalogue are listed in the
order of their JSON, without ratios.
"""
import csv
import json
import pathlib
import re
import zlib

NAME = re.compile(r"^(?P<backend>[^/]+)/(?P<workload>[^/]+)/(?P<variant>[^/]+)"
                  r"/real_time/threads:(?P<threads>\d+)")


def load(json_path):
    """Returns (context, {(backend, workload): {variant: {threads: (ops_per_s, events_created, hit_rate)}}}),
    hit_rate None for variants without stats().

    Keys and variants are in the order of the JSON, which is the benchmark's registration order."""
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
        point = (bench["items_per_second"], bench.get("events_created"), bench.get("hit_rate"))
        table.setdefault(key, {}).setdefault(match["variant"], {})[int(match["threads"])] = point
    return data.get("context", {}), table


# What runs from before the catalogue have: no order of their own, no references.
NO_CATALOGUE = {"variants": [], "workloads": [], "references": {}}


def catalogue(context):
    """The benchmark's catalogue from a run's context (NO_CATALOGUE for runs from before it)."""
    text = context.get("catalogue")
    return json.loads(text) if text else NO_CATALOGUE


def _ordered(names, order):
    """`names` in the catalogue's `order`; in their own order where there is none."""
    if not order:
        return list(names)
    return sorted(names, key=lambda name: order.index(name) if name in order else len(order))


def _ordered_keys(table, known):
    backends = sorted({backend for backend, _ in table}, key=lambda b: (b != "host", b))
    return [(backend, workload) for backend in backends
            for workload in _ordered([w for b, w in table if b == backend], known["workloads"])]


def _format_table(title, header, rows):
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
    lines = [f"\n{title}", "  ".join(h.rjust(w) for h, w in zip(header, widths))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in rows]
    return lines


def _by_thread_count(by_variant, variants, cell):
    """Rows: one per thread count, one cell(variant, point) per variant ("-" where it has none)."""
    threads = sorted({t for points in by_variant.values() for t in points})
    return [[str(t)] + [cell(v, t, by_variant[v][t]) if t in by_variant[v] else "-" for v in variants]
            for t in threads]


def _reference(table, known, backend, workload):
    """(name, {threads: point}) of the workload's limit, the reference the catalogue names for it
    ("pair/private", "handoff/carrier"); (name, {}) if this run lacks it, (None, {}) if there is
    none."""
    reference = known["references"].get(workload)
    if not reference:
        return None, {}
    ref_workload, ref_variant = reference.split("/")
    return reference, table.get((backend, ref_workload), {}).get(ref_variant, {})


# The variants that are not other pools: evpool under its policies (evpool-*), and the bounds a pool
# is measured against: thread-private stacks, the carrier of the handoff, and no pool at all.
BOUNDS = ("private", "carrier", "none")
SUBJECT = "evpool"


def is_other_pool(variant):
    return not variant.startswith(SUBJECT) and variant not in BOUNDS


def _ranges(names_by_threads):
    """'boost' if one name holds at every thread count, else 'boost (1-4), spinlock (8-128)'."""
    runs = []
    for threads, name in sorted(names_by_threads.items()):
        if runs and runs[-1][0] == name:
            runs[-1][2] = threads
        else:
            runs.append([name, threads, threads])
    if len(runs) == 1:
        return runs[0][0]
    return ", ".join(f"{name} ({first})" if first == last else f"{name} ({first}-{last})"
                     for name, first, last in runs)


def _left_table(title, header, rows):
    """A table whose first and last columns are left-aligned (names), the others right-aligned."""
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]

    def line(row):
        cells = [c.ljust(w) if i in (0, len(row) - 1) else c.rjust(w)
                 for i, (c, w) in enumerate(zip(row, widths))]
        return "  ".join(cells).rstrip()
    return [f"\n{title}", line(header)] + [line(row) for row in rows]


def summary(table, known=NO_CATALOGUE):
    """Per backend, two short tables with a row per workload and a column per thread count: evpool's
    throughput over the best other pool's (spinlock, mutex, boost: not evpool's own variants, not
    private, carrier or none), naming that pool; and over the workload's limit (its reference).
    Empty if the run has no evpool."""
    lines = []
    for backend in sorted({b for b, _ in table}, key=lambda b: (b != "host", b)):
        keys = [k for k in _ordered_keys(table, known) if k[0] == backend and SUBJECT in table[k]]
        if not keys:
            continue
        threads = sorted({t for k in keys for t in table[k][SUBJECT]})
        against_pools, against_limit = [], []
        for _, workload in keys:
            by_variant = table[(backend, workload)]
            ours = by_variant[SUBJECT]
            others = [v for v in by_variant if is_other_pool(v)]
            cells, best_names = [], {}
            for t in threads:
                candidates = [(by_variant[v][t][0], v) for v in others if t in by_variant[v]]
                if t in ours and candidates:
                    best, name = max(candidates)
                    cells.append(_three_figures(ours[t][0] / best) if best else "-")
                    best_names[t] = name
                else:
                    cells.append("-")
            if best_names:
                against_pools.append([workload] + cells + [_ranges(best_names)])
            reference, ref_points = _reference(table, known, backend, workload)
            ratios = [f"{ours[t][0] / ref_points[t][0]:.2f}"
                      if t in ours and ref_points.get(t) and ref_points[t][0] else "-" for t in threads]
            if any(r != "-" for r in ratios):
                against_limit.append([workload] + ratios + [reference])
        columns = [str(t) for t in threads]
        if against_pools:
            lines += _left_table(f"{backend}: evpool / the best other pool, by threads (above 1: evpool is faster)",
                                 ["workload"] + columns + ["best other pool (threads)"], against_pools)
        if against_limit:
            lines += _left_table(f"{backend}: evpool / the workload's limit, by threads (1: as fast as the limit)",
                                 ["workload"] + columns + ["limit"], against_limit)
    if lines:
        lines.insert(0, "Summary: throughput ratios at each thread count (medians where repeated)")
    return "\n".join(lines)


def format_tables(table, known=NO_CATALOGUE):
    """Per backend and workload: throughput, throughput as a fraction of the workload's reference
    (from the catalogue), and the events each variant created."""
    lines = []
    for backend, workload in _ordered_keys(table, known):
        by_variant = table[(backend, workload)]
        variants = _ordered(by_variant, known["variants"])
        header = ["threads"] + variants
        lines += _format_table(
            f"{backend} / {workload}: million events per second (got and put back), all threads together",
            header, _by_thread_count(by_variant, variants, lambda v, t, p: f"{p[0] / 1e6:.2f}"))
        reference, ref_points = _reference(table, known, backend, workload)
        if reference and ref_points:
            def ratio(_variant, threads, point):
                ref = ref_points.get(threads)
                return f"{point[0] / ref[0]:.3f}" if ref and ref[0] else "-"
            lines += _format_table(f"{backend} / {workload}: as a fraction of {backend}/{reference}",
                                   header, _by_thread_count(by_variant, variants, ratio))
        lines += _format_table(f"{backend} / {workload}: events created, pre-warming included", header,
                               _by_thread_count(by_variant, variants,
                                                lambda v, t, p: "-" if p[1] is None else str(int(p[1]))))
        counted = [v for v in variants if any(p[2] is not None for p in by_variant[v].values())]
        if counted:
            lines += _format_table(f"{backend} / {workload}: hit rate (Gets served by an idle event, "
                                   "from stats(), pre-warming included)", ["threads"] + counted,
                                   _by_thread_count({v: by_variant[v] for v in counted}, counted,
                                                    lambda v, t, p: "-" if p[2] is None else f"{p[2]:.4f}"))
    return "\n".join(lines)


def write_csv(table, path, known=NO_CATALOGUE):
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["backend", "workload", "variant", "threads", "ops_per_second", "events_created",
                         "hit_rate"])
        for backend, workload in _ordered_keys(table, known):
            by_variant = table[(backend, workload)]
            for variant in _ordered(by_variant, known["variants"]):
                for threads, (ops, created, hit_rate) in sorted(by_variant[variant].items()):
                    writer.writerow([backend, workload, variant, threads, f"{ops:.0f}",
                                     "" if created is None else int(created),
                                     "" if hit_rate is None else f"{hit_rate:.4f}"])


def _three_figures(value):
    """Three significant figures, thousands separated, as the docs print throughput: 0.765, 93.1,
    1,429."""
    return f"{value:,.0f}" if value >= 99.95 else f"{value:#.3g}"


def markdown_tables(table, known=NO_CATALOGUE):
    """Per backend and workload, a Markdown table of throughput (million events per second), the
    form docs/benchmarks.md publishes."""
    lines = []
    for backend, workload in _ordered_keys(table, known):
        by_variant = table[(backend, workload)]
        variants = _ordered(by_variant, known["variants"])
        lines += [f"### {backend}/{workload}", "", "| threads | " + " | ".join(variants) + " |",
                  "|---:|" + "---:|" * len(variants)]
        lines += ["| " + " | ".join(row) + " |"
                  for row in _by_thread_count(by_variant, variants, lambda v, t, p: _three_figures(p[0] / 1e6))]
        lines.append("")
    return "\n".join(lines)


def _si(value, _position=None):
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:g}{suffix}"
    return f"{value:g}"


# One colour per variant, the same in every plot: evpool blue; its other policies in hues apart from
# the competitors'; the bounds (private, carrier, none) in greys and drawn dashed.
COLOURS = {
    "evpool": "#1f77b4",          # blue
    "evpool-nocache": "#17becf",  # cyan
    "evpool-backoff": "#9467bd",  # purple
    "evpool-mag32": "#bcbd22",    # olive
    "evpool-mag256": "#8c564b",   # brown
    "evpool-nostats": "#e377c2",  # pink
    "spinlock": "#d62728",        # red
    "mutex": "#ff7f0e",           # orange
    "boost": "#2ca02c",           # green
    "private": "#000000",         # black
    "carrier": "#555555",         # dark grey
    "none": "#999999",            # light grey
}
# For a variant the table above does not know yet: picked by a hash of its name, so that it too
# keeps its colour from plot to plot.
SPARE_COLOURS = ["#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd", "#e6550d", "#31a354"]


def colour(variant):
    if variant in COLOURS:
        return COLOURS[variant]
    return SPARE_COLOURS[zlib.crc32(variant.encode()) % len(SPARE_COLOURS)]


def plot(table, context, out_dir, known=NO_CATALOGUE):
    """One PNG per backend and workload, the first variant (the subject) drawn boldest, each variant
    in its own colour (COLOURS); returns their paths (none if matplotlib is missing)."""
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
    for backend, workload in _ordered_keys(table, known):
        by_variant = table[(backend, workload)]
        fig, ax = plt.subplots(figsize=(8, 4.5))
        variants = _ordered(by_variant, known["variants"])
        for variant in variants:
            points = sorted(by_variant[variant].items())
            subject = variant == variants[0]
            style = dict(linewidth=2.5, marker="o") if subject else dict(linewidth=1.2, marker=".")
            if variant in BOUNDS:
                style["linestyle"] = "--"
            ax.plot([t for t, _ in points], [p[0] for t, p in points], label=variant, color=colour(variant),
                    **style)
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
        ax.set_ylabel("events got and put back per second (all threads)")
        ax.set_title(f"{backend} backend, {workload} workload\n{machine}", fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
        fig.tight_layout()
        path = pathlib.Path(out_dir) / f"{backend}-{workload}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


BENCHMARKS_DOC = pathlib.Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"


def documented(kind):
    """{name: what it is} from docs/benchmarks.md's table whose first column is `kind` ("variant" or
    "workload"), the one place that says what each is; a row naming several (`a`, `b`) gives each."""
    described, in_table = {}, False
    lines = BENCHMARKS_DOC.read_text().splitlines() if BENCHMARKS_DOC.is_file() else []
    for line in lines:
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0] == kind:
            in_table = True
        elif not line.startswith("|"):
            in_table = False
        elif in_table and len(cells) >= 2 and not set(cells[0]) <= set("-: "):
            for name in re.findall(r"`([^`]+)`", cells[0]):
                described[name] = cells[1].replace("`", "")
    return described


def legend(table, known=NO_CATALOGUE):
    """What each variant of the run is, from docs/benchmarks.md, and where the workloads are said."""
    described = documented("variant")
    variants = _ordered({v for by_variant in table.values() for v in by_variant}, known["variants"])
    width = max((len(v) for v in variants), default=0)
    lines = ["Variants (docs/benchmarks.md, \"Method\", says more of each, and what each workload does):"]
    for variant in variants:
        lines.append(f"  {variant.ljust(width)}  {described.get(variant, '(not described in docs/benchmarks.md)')}")
    return "\n".join(lines)


def report(json_path, out_dir):
    context, table = load(json_path)
    known = catalogue(context)
    overview = summary(table, known)
    print(legend(table, known) + "\n")
    if overview:
        print(overview)
        print("\nDetail: every variant, per workload")
    print(format_tables(table, known))
    csv_path = pathlib.Path(out_dir) / "results.csv"
    write_csv(table, csv_path, known)
    markdown_path = pathlib.Path(out_dir) / "tables.md"
    markdown_path.write_text(markdown_tables(table, known))
    plots = plot(table, context, out_dir, known)
    print(f"\nresults: {json_path}\n         {csv_path}\n         {markdown_path}")
    for path in plots:
        print(f"         {path}")


def compare(before_path, after_path):
    """Lines comparing two runs point by point: after/before throughput."""
    _, before = load(before_path)
    context, after = load(after_path)
    known = catalogue(context)
    lines = [f"{'benchmark':<45} {'before M/s':>11} {'after M/s':>10} {'after/before':>13}"]
    for key in _ordered_keys({k: None for k in after if k in before}, known):
        for variant in _ordered([v for v in after[key] if v in before[key]], known["variants"]):
            for threads in sorted(set(before[key][variant]) & set(after[key][variant])):
                b = before[key][variant][threads][0]
                a = after[key][variant][threads][0]
                name = f"{key[0]}/{key[1]}/{variant}/threads:{threads}"
                lines.append(f"{name:<45} {b / 1e6:>11.2f} {a / 1e6:>10.2f} {a / b:>12.2f}x")
    return "\n".join(lines)
