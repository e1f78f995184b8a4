"""What the calibration fitters share: writing case objects to a directory,
scoring a trial calibration on it, and the coordinate descent over grids of
values."""
import json, os, subprocess


def write_cases(cases, directory):
    """Writes each case object to <directory>/<name>.json (what `hzp validate cases --dir` reads)."""
    for c in cases:
        with open(os.path.join(directory, c["name"] + ".json"), "w") as f:
            json.dump(c, f)


def mean_max_error(hzp, cases_dir, cal_dir):
    """Mean and max |error| of `hzp validate cases` on cases_dir under the calibrations in cal_dir."""
    out = subprocess.run([hzp, "validate", "cases", "--dir", cases_dir, "--calibration-dir", cal_dir, "--json"],
                         check=True, capture_output=True, text=True).stdout
    errs = [abs(c["error"]) for c in json.loads(out)["cases"]]
    return sum(errs) / len(errs), max(errs)


def coordinate_descent(grid, current, score, rounds):
    """Moves one parameter at a time through its grid values, keeping a value
    that lowers score(params)[0], until a round moves nothing or `rounds` are
    done. Returns (best score, best params)."""
    best = score(current)
    for _ in range(rounds):
        moved = False
        for name, values in grid.items():
            for v in values:
                trial = dict(current, **{name: v})
                r = score(trial)
                if r[0] < best[0] - 1e-9:
                    best, current, moved = r, trial, True
        if not moved:
            break
    return best, current
