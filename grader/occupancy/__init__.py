"""Occupancy exercises (seed 004): calculator, answers, host check and grading. See README.md."""
