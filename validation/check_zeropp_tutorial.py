#!/usr/bin/env python3
"""Runs the ZeRO++ tutorial's two logged runs (ZeRO-3 and ZeRO++, 18B GPT on
64 V100; generate_cases.ZEROPP_TUTORIAL_ROWS) through `hzp validate cases`.
They are neither scored nor fitted on: an independent check of how ZeRO-3's
all-gathers and reduce-scatters cost when they meet on one NIC a node.
Usage: validation/check_zeropp_tutorial.py HZP [extra hzp validate options]"""
import os, shutil, subprocess, sys, tempfile

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import fit_common  # noqa: E402
import generate_cases as g  # noqa: E402


def main():
    hzp = sys.argv[1]
    work = tempfile.mkdtemp(prefix="hzp-zeropp-tutorial-")
    try:
        fit_common.write_cases(g.zeropp_tutorial_cases(), work)
        return subprocess.run([hzp, "validate", "cases", "--dir", work, "-j", "2", *sys.argv[2:]]).returncode
    finally:
        shutil.rmtree(work)


if __name__ == "__main__":
    sys.exit(main())
