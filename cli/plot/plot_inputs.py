"""Input readers of `hzp plot` (compiled into the binary ahead of hzp_plot.py, which
calls them): a file read as hzp reads inputs (a regular file of at most
HZP_MAX_INPUT_BYTES), JSON without NaN, Infinity or a key twice in an object, and
a trace checked whole, event by event, before anything is drawn. Every bad input
ends in hzp_plot.py's fail(): one line, exit status 2.
"""
import json
import math
import os
import stat
import sys


def max_input_bytes():
    """HZP_MAX_INPUT_BYTES as hzp reads it: a whole number, K/M/G powers of two; 256 MiB unset."""
    text = os.environ.get("HZP_MAX_INPUT_BYTES", "")
    if not text:
        return 256 << 20
    digits = len(text) - len(text.lstrip("0123456789"))
    shift = {"": 0, "K": 10, "M": 20, "G": 30}.get(text[digits:])
    n = int(text[:digits]) if 0 < digits <= 12 else 0
    if shift is None or n < 1 or n > (1 << 40) >> shift:
        fail("environment", "HZP_MAX_INPUT_BYTES",
             f"expected a whole number of bytes in [1, 2^40] (K, M, G suffixes: powers of two), got '{text}'")
    return n << shift


def read_input(path):
    """An input file as hzp reads one: a regular file of at most HZP_MAX_INPUT_BYTES (never blocks on a FIFO)."""
    limit = max_input_bytes()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        fail(path, "", "cannot open file")
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        kind = ("a folder" if stat.S_ISDIR(st.st_mode) else "a character device" if stat.S_ISCHR(st.st_mode)
                else "a FIFO" if stat.S_ISFIFO(st.st_mode) else "not a regular file")
        fail(path, "", f"expected a regular file (it is {kind})")
    if st.st_size > limit:
        os.close(fd)
        fail(path, "", f"expected at most {limit} bytes (HZP_MAX_INPUT_BYTES), got {st.st_size}")
    with os.fdopen(fd, "rb") as f:
        data = f.read(limit + 1)
        if len(data) > limit:
            fail(path, "", f"expected at most {limit} bytes (HZP_MAX_INPUT_BYTES), got more")
        return data


class Literal(str):
    """A NaN or Infinity literal met while reading JSON: refused, named by the key that holds it."""


def literal_in(v):
    """The first NaN or Infinity literal in a value just read (its objects were checked as they were read)."""
    if isinstance(v, list):
        return next((found for found in map(literal_in, v) if found is not None), None)
    return v if isinstance(v, Literal) else None


def parse_json(data, path):
    """JSON as hzp reads it: no NaN or Infinity (Python's json takes them), each key once per object."""
    def pairs(items):
        obj = {}
        for key, value in items:
            if key in obj:
                fail(path, key, "duplicate key (each key once per object)")
            if (found := literal_in(value)) is not None:
                fail(path, key, f"expected a finite number, got {found} (JSON has no NaN or Infinity)")
            obj[key] = value
        return obj

    try:
        value = json.loads(data, parse_constant=Literal, object_pairs_hook=pairs)
    except ValueError as e:
        fail(path, "", f"expected an hzp Chrome trace ({e})")
    if (found := literal_in(value)) is not None:
        fail(path, "", f"expected a finite number, got {found} (JSON has no NaN or Infinity)")
    return value


def kind(v):
    """A JSON value as an error line names it: its type, or the number itself."""
    return ("null" if v is None else "a boolean" if isinstance(v, bool) else shown(v) if isinstance(v, (int, float))
            else "a string" if isinstance(v, str) else "a list" if isinstance(v, list) else "an object")


def shown(v):
    """A number for an error line: short, whatever its size."""
    try:
        return f"{v:.6g}"
    except OverflowError:
        return f"an integer of {len(str(abs(v)))} digits"


def check_type(obj, key, types, what, at, path, required=True):
    """obj[key] is one of types (a boolean is no number); else one line naming it as at.key."""
    name = f"{at}.{key}" if at else key
    if key not in obj and required:
        fail(path, name, f"missing: expected {what}")
    if key in obj and (isinstance(obj[key], bool) or not isinstance(obj[key], types)):
        fail(path, name, f"expected {what}, got {kind(obj[key])}")


def check_number(obj, key, low, high, what, at, path, required=True):
    """obj[key] is a number in [low, high]: NaN and the infinities are not."""
    check_type(obj, key, (int, float), f"a number of {what}", at, path, required)
    if key in obj and not low <= obj[key] <= high:
        fail(path, f"{at}.{key}" if at else key, f"expected {what} in [{low:g}, {high:g}], got {shown(obj[key])}")


def check_event(e, at, path):
    """One trace event: its phase, rank class and stream, and what the pictures read of it."""
    if not isinstance(e, dict):
        fail(path, at, f"expected a trace event (an object), got {kind(e)}")
    check_type(e, "ph", str, "a string (the event's phase)", at, path)
    check_type(e, "pid", int, "an integer (the rank class)", at, path)
    check_type(e, "tid", int, "an integer (the stream)", at, path, required=False)
    if e["ph"] in ("X", "C"):
        check_number(e, "ts", -TIME_US, TIME_US, "microseconds", at, path)
    if e["ph"] == "X":  # an op
        check_number(e, "dur", 0, TIME_US, "microseconds", at, path)
        check_type(e, "cat", str, "a string (the kind of op)", at, path, required=False)
    elif e["ph"] == "C":  # memory counters
        check_type(e, "args", dict, "an object (the counters)", at, path)
        for key in ("GiB", "reserved_GiB"):
            check_number(e["args"], key, 0, MAX_GIB, "GiB", f"{at}.args", path, required=False)
    elif e["ph"] == "M" and e.get("name") == "thread_name":  # a stream's name
        check_type(e, "args", dict, "an object", at, path)
        check_type(e["args"], "name", str, "a string (the stream's name)", f"{at}.args", path)


def check_trace(t, path):
    """Everything the pictures read from a trace, checked once: the first wrong value named by its key."""
    if not isinstance(t, dict):
        fail(path, "", f"expected an hzp Chrome trace (a JSON object), got {kind(t)}")
    check_type(t, "otherData", dict, "an object (the hzp trace header)", "", path, required=False)
    for key in ("schedule_name", "engine", "hzp_version", "schedule_sha256"):
        check_type(t.get("otherData", {}), key, str, "a string", "otherData", path, required=False)
    check_type(t, "traceEvents", list, "a list of trace events (an hzp Chrome trace)", "", path)
    for i, e in enumerate(t["traceEvents"]):
        check_event(e, f"traceEvents[{i}]", path)


def load_trace(path):
    t = parse_json(read_input(path), path)
    check_trace(t, path)
    return t
