"""Pictures from hzp outputs, drawn with matplotlib (Debian's python3-matplotlib).

`hzp plot` embeds this script and runs it with the system Python:
  heatmap  DB --x KEY --y KEY [--metric M] --out FILE   throughput over two swept axes
  scaling  DB [--x gpus] --out FILE                    tokens/s and MFU against GPU count
  timeline TRACE --out FILE [--program N]              one bar per op, one row per stream
  memory   TRACE --out FILE [--hbm-GiB G]              allocated and reserved memory over time
  compare  PRED MEAS --out FILE [--program N]          two traces of one Schedule on a shared time axis
  collectives LOG... --out FILE [--mark BYTES]          bus bandwidth and time against size, one curve per
                                                        nccl-tests log (a real one or `hzp collectives` output)
FILE ends in .png or .svg. Inputs are checked whole before anything is drawn: traces and logs as hzp reads
files (a regular file of at most HZP_MAX_INPUT_BYTES; JSON without NaN, Infinity or a key twice in an object),
sweep databases read leaving no -shm or -wal file beside them. Exit status 2 with one line on bad input.
The readers and checks of traces are in plot_inputs.py, compiled in ahead of this file.
"""
import argparse
import contextlib
import json
import math
import os
import sqlite3
import stat
import sys
import tempfile
import urllib.parse

MAX_ROWS = 500  # rows of a timeline, values on a heatmap axis, curves: a picture under 2^16 pixels a side
TIME_US = 1e12  # |ts| and dur of a trace event, in microseconds (11.6 days), as `hzp validate` reads them
MAX_GIB = 1e9  # a memory counter


def fail(where, key, expected):
    line = f"hzp plot: {where}: {key + ': ' if key else ''}{expected}"
    # One line whatever a file name, key or value holds: control characters escaped.
    print("".join(c if c.isprintable() else ascii(c)[1:-1] for c in line), file=sys.stderr)
    sys.exit(2)


def check_rows(n, where, key, what):
    if n > MAX_ROWS:
        fail(where, key, f"expected at most {MAX_ROWS} {what} to draw, got {n}")


def pyplot():
    """matplotlib, imported once the inputs are known to be good (the import takes half a second)."""
    try:
        import matplotlib
    except ImportError:
        fail("command line", "plot", "expected python3 with matplotlib (python3-matplotlib)")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"figure.dpi": 110, "font.size": 9, "axes.grid": True, "grid.alpha": 0.3})
    return plt


def plain(text):
    """Text from the inputs drawn as written, '$' escaped (it starts no TeX-like math), and at most 1000 characters."""
    return (text if len(text) <= 1000 else text[:999] + "…").replace("$", r"\$")


FORCE = False  # --force: replace an existing --out


def check_out(out):
    """The destination: a new file, or (with --force) a regular file to replace, in a folder that exists."""
    if os.path.lexists(out) and not os.path.isfile(out):
        fail(out, "", "expected a regular file to write (it is a folder, link or device)")
    if os.path.exists(out) and not FORCE:
        fail(out, "", "already exists; pass --force to overwrite it")
    folder = os.path.dirname(out) or "."
    if not os.path.isdir(folder):
        fail(out, "", f"expected an existing folder {folder}")


def save(fig, out, tight_layout=False):
    from matplotlib.text import Text

    for t in fig.findobj(Text):  # titles, labels, legends, before any drawing (tick labels are set when drawn)
        t.set_text(plain(t.get_text()))
    if tight_layout:
        fig.tight_layout()
    check_out(out)
    folder, name = os.path.split(out)
    # A fresh temporary file beside the destination (O_EXCL: never through a
    # planted file), renamed into place: nothing half-written on disk.
    fd, tmp = tempfile.mkstemp(dir=folder or ".", prefix=f".{name}.tmp.", suffix=os.path.splitext(out)[1])
    try:
        with os.fdopen(fd, "wb") as f:
            fig.savefig(f, format=os.path.splitext(out)[1][1:].lower(), bbox_inches="tight",
                        metadata=None if out.endswith(".png") else {"Date": None})
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    except OSError as e:
        if os.path.exists(tmp):
            os.remove(tmp)
        fail(out, "", f"cannot write it ({e.strerror or e})")
    print(f"wrote {out}")


def rows(db, where="status = 'ok'"):
    """The points of a sweep database, read leaving its folder as it was."""
    if not os.path.exists(db):
        fail(db, "", "no such sweep database")
    if not os.path.isfile(db):
        fail(db, "", "expected an hzp sweep database (a regular file)")
    # SQLite opens a WAL database, even read-only, by creating DB-shm and DB-wal. Without a -wal (or -journal)
    # file nothing is writing it: read it as immutable (nothing created); else read-only, removing a -shm made here.
    had_shm = os.path.lexists(db + "-shm")
    live = os.path.lexists(db + "-wal") or os.path.lexists(db + "-journal")
    uri = f"file:{urllib.parse.quote(db)}?mode=ro{'' if live else '&immutable=1'}"
    try:
        with contextlib.closing(sqlite3.connect(uri, uri=True)) as con:
            con.row_factory = sqlite3.Row
            return [dict(r) for r in con.execute(f"SELECT * FROM points WHERE {where} ORDER BY point")]
    except sqlite3.Error as e:
        fail(db, "points", f"expected an hzp sweep database ({e})")
    finally:  # after the connection is closed
        if live and not had_shm:
            with contextlib.suppress(FileNotFoundError):
                os.remove(db + "-shm")


def number(v):
    """A sweep value as a finite float; None for NULL, text, a blob, NaN or an infinity."""
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None



# Axis labels for sweep columns.
AXIS_NAMES = {"gpus": "GPUs", "param_shard": "g_p (parameter shard group)", "grad_shard": "g_g (gradient shard group)",
              "optim_shard": "g_o (optimizer shard group)", "tp": "tensor parallel", "pp": "pipeline stages",
              "tokens_per_s": "tokens / s", "mfu": "MFU", "step_time_s": "step time (s)",
              "micro_batch": "micro-batch", "global_batch_sequences": "global batch (sequences)"}


def not_drawn(data):
    """Says on standard error which points have no number to draw (they are marked on the figure)."""
    oom = sum(r["status"] == "infeasible" for r in data)
    failed = sum(r["status"] == "error" for r in data)
    if oom or failed:
        print(f"hzp plot: {oom} point(s) out of memory and {failed} failed have no number to draw; marked on the "
              f"figure (OOM, failed)", file=sys.stderr)


def heatmap(a):
    data = rows(a.db, "status IN ('ok', 'infeasible', 'error')")
    if not data:
        fail(a.db, "points", "no finished points to plot")
    for key in (a.x, a.y, a.metric):
        if key not in data[0]:
            fail(a.db, key, f"expected one of {', '.join(sorted(data[0]))}")
    xs = sorted({r[a.x] for r in data if r[a.x] is not None}, key=sort_key)
    ys = sorted({r[a.y] for r in data if r[a.y] is not None}, key=sort_key)
    check_rows(len(xs), a.db, a.x, "values on an axis")
    check_rows(len(ys), a.db, a.y, "values on an axis")
    grid = [[float("nan")] * len(xs) for _ in ys]
    oom = [[False] * len(xs) for _ in ys]
    failed = [[False] * len(xs) for _ in ys]
    for r in data:  # the best point per cell when other axes vary too
        if r[a.x] is None or r[a.y] is None:
            continue
        i, j = ys.index(r[a.y]), xs.index(r[a.x])
        if r["status"] != "ok":
            (oom if r["status"] == "infeasible" else failed)[i][j] = True
            continue
        v = number(r[a.metric])
        if v is not None and (grid[i][j] != grid[i][j] or v > grid[i][j]):
            grid[i][j] = v
    finite = [v for row in grid for v in row if v == v]
    if not finite and not any(map(any, oom)) and not any(map(any, failed)):
        fail(a.db, a.metric, "expected numbers to plot: every finished point's value is NULL or not a number")
    plt = pyplot()
    lo, hi = (min(finite), max(finite)) if finite else (0, 0)
    # A small spread stays small: the colours span at least 20 % of the best
    # value, so a 3 % difference does not look like the whole range.
    vmin = min(lo, hi - 0.2 * abs(hi)) if finite else None
    fig, ax = plt.subplots(figsize=(1.1 * len(xs) + 3.5, 0.6 * len(ys) + 2.4))
    im = ax.imshow(grid, origin="lower", cmap="viridis", aspect="auto", vmin=vmin, vmax=hi if finite else None)
    ax.set_xticks(range(len(xs)), [plain(str(x)) for x in xs])
    ax.set_yticks(range(len(ys)), [plain(str(y)) for y in ys])
    ax.set_xlabel(AXIS_NAMES.get(a.x, a.x))
    ax.set_ylabel(AXIS_NAMES.get(a.y, a.y))
    ax.grid(False)
    for i, row in enumerate(grid):
        for j, v in enumerate(row):
            if v == v:
                dark = hi > vmin and (v - vmin) / (hi - vmin) < 0.5
                ax.text(j, i, human(v), ha="center", va="center", color="white" if dark else "black")
            else:
                mark = "OOM" if oom[i][j] else "failed" if failed[i][j] else "—"
                ax.text(j, i, mark, ha="center", va="center", color="grey" if mark == "—" else "tab:red")
    fig.colorbar(im, ax=ax, label=AXIS_NAMES.get(a.metric, a.metric))
    r0 = data[0]
    gpus = sorted({r.get("gpus") for r in data if r.get("gpus") is not None})
    gpus_text = str(gpus[0]) if len(gpus) == 1 else f"{gpus[0]}–{gpus[-1]}" if gpus else "?"
    fig.suptitle(f"{r0.get('model', '')} on {gpus_text} × {r0.get('cluster', '')}: "
                 f"{AXIS_NAMES.get(a.metric, a.metric)}, best per cell\n(OOM: out of memory; failed: no answer, "
                 f"see hzp sweep export; —: not swept)", fontsize=10)
    save(fig, a.out, tight_layout=True)
    not_drawn(data)


def scaling(a):
    every = rows(a.db, "status IN ('ok', 'infeasible', 'error')")
    data = [r for r in every if r["status"] == "ok"]
    if not data:
        fail(a.db, "points", "no finished points to plot")
    for key in (a.x, "tokens_per_s", "mfu"):
        if key not in data[0]:
            fail(a.db, key, f"expected one of {', '.join(sorted(data[0]))}")
    series = {}
    for r in data:  # the points with numbers to draw: x > 0 on a log axis
        x, speed, mfu = number(r[a.x]), number(r["tokens_per_s"]), number(r["mfu"])
        if x is None or x <= 0 or speed is None or mfu is None:
            continue
        best = series.setdefault(f"{r.get('cluster')} {r.get('strategy')}", {})
        if x not in best or speed > best[x]["tokens_per_s"]:
            best[x] = {"tokens_per_s": speed, "mfu": mfu}
    if not series:
        fail(a.db, "points", f"expected points to plot: a number > 0 in {a.x}, numbers in tokens_per_s and mfu")
    check_rows(len(series), a.db, "points", "clusters and strategies")
    plt = pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    for label, pts in sorted(series.items()):
        xs = sorted(pts, key=sort_key)
        line, = ax1.plot(xs, [pts[x]["tokens_per_s"] for x in xs], marker="o", label=label)
        ax2.plot(xs, [100 * pts[x]["mfu"] for x in xs], marker="o", label=label)
        if a.x == "gpus" and len(xs) > 1:  # ideal: throughput proportional to the GPUs from the smallest point
            base = pts[xs[0]]["tokens_per_s"] / xs[0]
            ax1.plot(xs, [base * x for x in xs], linestyle=":", color=line.get_color(), label=f"{label} ideal")
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xlabel(AXIS_NAMES.get(a.x, a.x))
    # The points with no number, at their x along the bottom: red x out of memory, grey x failed.
    for status, colour, label in (("infeasible", "tab:red", "out of memory"), ("error", "grey", "failed")):
        xs = sorted({number(r[a.x]) for r in every if r["status"] == status and (number(r[a.x]) or 0) > 0})
        for ax in (ax1, ax2):
            if xs:
                ax.plot(xs, [0.03] * len(xs), linestyle="none", marker="x", color=colour, label=label,
                        transform=ax.get_xaxis_transform())
    ax1.set_ylabel("tokens / s")
    ax2.set_ylabel("MFU (%)")
    ax2.set_ylim(0, 100)
    ax1.legend(fontsize=7)
    fig.suptitle(title(data, "throughput and MFU against GPU count (best plan per point)"))
    save(fig, a.out)
    not_drawn(every)


COLOURS = {"compute": "tab:blue", "collective": "tab:orange", "send / recv": "tab:green"}
COLLECTIVES = {"all_gather", "reduce_scatter", "all_reduce", "all_to_all", "broadcast"}


def colour(cat):
    if cat in COLLECTIVES:
        return COLOURS["collective"]
    return COLOURS["send / recv"] if cat in ("send", "recv") else COLOURS["compute"]


def tracks(t, program, path):
    """The rank class's streams: ({tid: name}, {tid: [op events]})."""
    names, ops = {}, {}
    for e in t["traceEvents"]:
        if e["ph"] == "M" and e.get("name") == "thread_name" and e["pid"] == program:
            names[e.get("tid", 0)] = e["args"]["name"]
        if e["ph"] == "X" and e["pid"] == program:
            ops.setdefault(e.get("tid", 0), []).append(e)
    if not ops:
        fail(path, "program", f"no ops for rank class {program}")
    check_rows(len(ops), path, "tid", f"streams of rank class {program}")
    return names, ops


def draw_tracks(ax, names, ops):
    tids = sorted(ops)
    for row, tid in enumerate(tids):
        bars = [(e["ts"] / 1e6, e["dur"] / 1e6) for e in ops[tid]]
        ax.broken_barh(bars, (row - 0.4, 0.8), facecolors=[colour(e.get("cat", "")) for e in ops[tid]], linewidth=0)
    ax.set_yticks(range(len(tids)), [plain(names.get(tid, str(tid))) for tid in tids])


def legend(ax, ops):
    """The kinds of op the picture shows, and only those."""
    from matplotlib.patches import Patch

    shown = {colour(e.get("cat", "")) for evs in ops for es in evs.values() for e in es}
    ax.legend(handles=[Patch(color=c, label=k) for k, c in COLOURS.items() if c in shown], loc="upper right",
              fontsize=7)


def timeline(a):
    t = load_trace(a.trace)
    names, ops = tracks(t, a.program, a.trace)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(12, 0.5 * len(ops) + 1.5))
    draw_tracks(ax, names, ops)
    ax.set_xlabel("time (s)")
    header = t.get("otherData", {})
    ax.set_title(f"{header.get('schedule_name', '')} — {header.get('engine', '')} engine, rank class {a.program}")
    legend(ax, [ops])
    save(fig, a.out)


def compare(a):
    """Two traces of the same Schedule, one above the other on a shared time axis."""
    traces = [load_trace(a.predicted), load_trace(a.measured)]
    for path, t in zip((a.predicted, a.measured), traces):
        check_type(t.get("otherData", {}), "schedule_sha256", str, "the Schedule's hash", "otherData", path)
    predicted, measured = (t["otherData"]["schedule_sha256"] for t in traces)
    if predicted != measured:  # as `hzp validate compare` refuses them
        fail(a.measured, "otherData.schedule_sha256", f"expected the predicted trace's Schedule {predicted}, "
             f"got {measured}: these are runs of different Schedules")
    rows = []
    for label, path, t in zip(("predicted", "measured"), (a.predicted, a.measured), traces):
        rows.append((label, *tracks(t, a.program, path), t.get("otherData", {})))
    plt = pyplot()
    fig, axes = plt.subplots(2, 1, sharex=True, figsize=(12, 0.5 * sum(len(r[2]) for r in rows) + 2.5))
    for ax, (label, names, ops, header) in zip(axes, rows):
        draw_tracks(ax, names, ops)
        ax.set_title(f"{label}: {header.get('engine', '')} ({header.get('hzp_version', '')}), rank class {a.program}",
                     fontsize=9)
    axes[-1].set_xlabel("time (s)")
    legend(axes[0], [r[2] for r in rows])
    fig.suptitle(rows[0][3].get("schedule_name", ""))
    save(fig, a.out)


def memory(a):
    t = load_trace(a.trace)
    series = {}
    for e in t["traceEvents"]:
        if e.get("ph") == "C":
            s = series.setdefault(e["pid"], ([], [], []))
            s[0].append(e["ts"] / 1e6)
            s[1].append(e["args"].get("GiB", 0))
            s[2].append(e["args"].get("reserved_GiB", 0))
    if not series:
        fail(a.trace, "memory", "no memory counters in this trace")
    check_rows(len(series), a.trace, "pid", "rank classes")
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(10, 4))
    for pid, (ts, alloc, res) in sorted(series.items()):
        ax.step(ts, alloc, where="post", label=f"rank class {pid} allocated")
        ax.step(ts, res, where="post", linestyle="--", label=f"rank class {pid} reserved")
    if a.hbm_GiB:
        ax.axhline(a.hbm_GiB, color="tab:red", linestyle="-.", label=f"HBM {a.hbm_GiB:g} GiB")
        ax.set_ylim(0, a.hbm_GiB * 1.05)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("GiB")
    ax.legend(fontsize=7)
    ax.set_title(f"device memory over one step — {t.get('otherData', {}).get('schedule_name', '')}")
    save(fig, a.out)


def sort_key(v):
    return (0, v) if isinstance(v, (int, float)) else (1, str(v))


def human(v):
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(v) >= div:
            return f"{v / div:.3g}{unit}"
    return f"{v:.3g}"


def read_nccl_tests(path):
    """(label, [(size, time us, busbw)]) of an nccl-tests-format log: out-of-place columns."""
    label, pts = os.path.splitext(os.path.basename(path))[0], []
    for line in read_input(path).decode(errors="replace").splitlines():
        t = line.split()
        if line.startswith("# hzp collectives:"):
            label = line[len("# hzp collectives:"):].split(" of ")[0].strip()
        if not t or t[0].startswith("#") or len(t) < 8:
            continue
        try:
            p = (float(t[0]), float(t[5]), float(t[7]))
        except ValueError:
            continue
        if all(map(math.isfinite, p)):  # "nan" and "inf" read as numbers
            pts.append(p)
    if not pts:
        fail(path, "", "expected nccl-tests data rows (size count type redop root time algbw busbw ...)")
    return label, pts


def collectives(a):
    check_rows(len(a.logs), "command line", "LOG", "logs")
    logs = [read_nccl_tests(path) for path in a.logs]
    plt = pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    for label, pts in logs:
        ax1.plot([p[0] for p in pts], [p[2] for p in pts], marker=".", label=label)
        ax2.plot([p[0] for p in pts], [p[1] for p in pts], marker=".", label=label)
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("size (bytes, nccl-tests' convention)")
        if a.mark:
            ax.axvline(a.mark, color="grey", linestyle="--", linewidth=0.8)
    ax2.set_yscale("log")
    ax1.set_ylabel("bus bandwidth (GB/s)")
    ax2.set_ylabel("time (us)")
    ax1.legend(fontsize=7)
    fig.suptitle("collectives: bus bandwidth and time against size")
    save(fig, a.out)


def title(data, what):
    r = data[0]
    return f"{r.get('model', '')}: {what}"


class OneLineParser(argparse.ArgumentParser):
    """Argument errors as hzp's one line, exit 2 (argparse prints usage and the error on two)."""

    def error(self, message):
        fail("command line", "plot", message)


def check_flags(a):
    """What argparse takes but a picture cannot use: another format, NaN, infinities, sizes <= 0."""
    if os.path.splitext(a.out)[1].lower() not in (".png", ".svg"):
        fail("command line", "--out", f"expected a .png or .svg file, got '{a.out}'")
    if getattr(a, "hbm_GiB", None) is not None and not 0 < a.hbm_GiB <= 1e6:
        fail("command line", "--hbm-GiB", f"expected a number of GiB in (0, 1e6], got {a.hbm_GiB:g}")
    if getattr(a, "mark", None) is not None and not 0 < a.mark < math.inf:
        fail("command line", "--mark", f"expected a finite number of bytes > 0, got {a.mark:g}")
    if getattr(a, "program", 0) < 0:
        fail("command line", "--program", f"expected a rank class >= 0, got {a.program}")


def main():
    p = OneLineParser(prog="hzp plot")
    sub = p.add_subparsers(dest="kind", required=True, parser_class=OneLineParser)
    h = sub.add_parser("heatmap")
    h.add_argument("db")
    h.add_argument("--x", required=True)
    h.add_argument("--y", required=True)
    h.add_argument("--metric", default="tokens_per_s")
    s = sub.add_parser("scaling")
    s.add_argument("db")
    s.add_argument("--x", default="gpus")
    tl = sub.add_parser("timeline")
    tl.add_argument("trace")
    tl.add_argument("--program", type=int, default=0)
    c = sub.add_parser("compare")
    c.add_argument("predicted")
    c.add_argument("measured")
    c.add_argument("--program", type=int, default=0)
    m = sub.add_parser("memory")
    m.add_argument("trace")
    m.add_argument("--hbm-GiB", dest="hbm_GiB", type=float, default=None, help="draw the device's HBM capacity")
    co = sub.add_parser("collectives")
    co.add_argument("logs", nargs="+")
    co.add_argument("--mark", type=float, default=None)
    for sp in (h, s, tl, c, m, co):
        sp.add_argument("--out", required=True)
        sp.add_argument("--force", action="store_true", help="replace --out if it exists")
    a = p.parse_args()
    global FORCE
    FORCE = a.force
    check_out(a.out)
    check_flags(a)
    {"heatmap": heatmap, "scaling": scaling, "timeline": timeline, "memory": memory, "compare": compare,
     "collectives": collectives}[a.kind](a)


if __name__ == "__main__":
    try:
        main()
    except SystemExit:
        raise
    except RecursionError:
        fail("input", "", "expected JSON nested less deeply")
    except Exception as e:  # anything not foreseen: the bug-report line, not a traceback
        print(f"hzp plot: internal error: {type(e).__name__}: {e}. This is a bug in hzp; please report it with the "
              "command line above.", file=sys.stderr)
        sys.exit(1)
