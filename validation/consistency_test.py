#!/usr/bin/env python3
"""Tests of validation/consistency.py on hand-made cases (floors derived by
hand), then its report on the checked-in cases."""
import contextlib
import copy
import io
import json
import os
import sys
import tempfile
import unittest

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import consistency  # noqa: E402

BASE = {"schema_version": 1, "group": "t", "source": "hand-made", "notes": "",
        "model": {"name": "m", "layers": 2, "hidden": 64}, "cluster": "dgx-a100", "gpus": 8,
        "plan": {"tp": 8, "pp": 1, "micro_batch": 1, "global_batch_sequences": 16},
        "measured": {"quantity": "iteration_time_s", "value": 1.0, "flops_convention": None}, "tolerance": 1.0}


def make(name, seconds, micro_batch, **plan):
    c = copy.deepcopy(BASE)
    c["name"] = name
    c["measured"]["value"] = seconds
    c["plan"]["micro_batch"] = micro_batch
    c["plan"].update(plan)
    return c


class Consistency(unittest.TestCase):
    def report(self, cases):
        with tempfile.TemporaryDirectory() as d:
            for c in cases:
                with open(os.path.join(d, c["name"] + ".json"), "w") as f:
                    json.dump(c, f)
            return consistency.report(d)

    def test_larger_micro_batch_measured_slower_sets_the_floors(self):
        # T_A = 3 s at micro-batch 2, T_B = 1 s at micro-batch 1: a model with
        # P_A <= P_B misses by at least (3 - 1) / (3 + 1) = 50 % (P = 1.5 s), and
        # the two errors add up to at least (3 - 1) / 3 (P = 1 s); over 3 cases
        # the mean is at least 2/9.
        r = self.report([make("a", 3.0, 2), make("b", 1.0, 1), make("c", 5.0, 1, tp=4)])
        self.assertEqual(r["time_cases"], 3)
        self.assertEqual(len(r["pairs"]), 1)
        p = r["pairs"][0]
        self.assertEqual((p["slower"], p["faster"]), ("a", "b"))
        self.assertAlmostEqual(r["max_error_floor"], 0.5)
        self.assertAlmostEqual(p["error_sum_floor"], 2.0 / 3.0)
        self.assertAlmostEqual(r["mean_error_floor"], 2.0 / 9.0)

    def test_no_floor_where_the_rule_holds_or_does_not_apply(self):
        # Larger micro-batch faster: consistent. With a pipeline, fewer
        # micro-batches mean a larger bubble, so the rule says nothing.
        r = self.report([make("a", 1.0, 2), make("b", 3.0, 1),
                         make("p2", 3.0, 2, pp=2), make("p1", 1.0, 1, pp=2)])
        self.assertEqual(r["pairs"], [])
        self.assertEqual(r["max_error_floor"], 0.0)

    def test_pairs_sharing_a_case_count_once_in_the_mean(self):
        # a contradicts b and c, c contradicts b; the three pairs share cases,
        # so the mean floor takes the largest alone: (4 - 1) / 4 over 3 cases.
        r = self.report([make("a", 4.0, 4), make("b", 1.0, 1), make("c", 2.0, 2)])
        self.assertEqual(len(r["pairs"]), 3)
        self.assertAlmostEqual(r["mean_error_floor"], 0.75 / 3)

    def test_linearity_in_the_number_of_micro_batches(self):
        # One group (2 GPUs of DP, micro-batch 1): 2, 4 and 8 micro-batches at
        # 10 + 5 n ms lie on a line; 62 ms instead of 50 at n = 8 is 12/62 off it.
        # A group of two runs says nothing.
        header = "# GPUs,global batch,micro batch,hidden size,attention heads,# layers,sequence length," \
                 "tensor parallelism,data parallelism,pipeline parallelism,iteration time (ms)\n"
        def run(gb, ms, layers=12, dp=2):
            return "%d,%d,1,1024,16,%d,1024,1,%d,1,%r\n" % (dp, gb, layers, dp, ms)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "single.csv")
            with open(path, "w") as f:
                f.write(header + run(4, 20.0) + run(8, 30.0) + run(16, 50.0) + run(4, 7.0, 24) + run(8, 9.0, 24))
            r = consistency.linearity(path)
            self.assertEqual(r["groups"], 1)
            self.assertAlmostEqual(r["max_relative_deviation"], 0.0)
            with open(path, "w") as f:
                f.write(header + run(16, 62.0) + run(8, 30.0) + run(4, 20.0))
            self.assertAlmostEqual(consistency.linearity(path)["max_relative_deviation"], 12.0 / 62.0)
            # The same runs on DP 4 (2 and 4 micro-batches per replica at global
            # batch 8 and 16): 1 ms more at both is a constant offset; 1 and 3 ms
            # more spread by 2 ms.
            base = run(4, 20.0) + run(8, 30.0) + run(16, 50.0)
            with open(path, "w") as f:
                f.write(header + base + run(8, 21.0, dp=4) + run(16, 31.0, dp=4))
            r = consistency.linearity(path)
            self.assertEqual(r["dp_pairs"], 1)
            self.assertAlmostEqual(r["dp_difference_spread_ms"], 0.0)
            with open(path, "w") as f:
                f.write(header + base + run(8, 21.0, dp=4) + run(16, 33.0, dp=4))
            self.assertAlmostEqual(consistency.linearity(path)["dp_difference_spread_ms"], 2.0)

    def test_bad_input_is_one_line_and_exit_2(self):
        with tempfile.TemporaryDirectory() as d:
            for argv in (["--linearity"], ["--linearity", os.path.join(d, "missing.csv")],
                         [os.path.join(d, "missing")], ["--frobnicate"], [d, d]):
                err = io.StringIO()
                with contextlib.redirect_stderr(err):
                    self.assertEqual(consistency.main(argv), 2, argv)
                self.assertEqual(err.getvalue().count("\n"), 1, argv)
                self.assertTrue(err.getvalue().startswith("consistency.py: error: "), argv)

    def test_checked_in_cases(self):
        cases_dir = os.path.join(here, "cases")
        r = consistency.report(cases_dir)
        self.assertGreater(r["time_cases"], 100)
        self.assertEqual(consistency.main([cases_dir]), 0)


if __name__ == "__main__":
    unittest.main()
