#!/usr/bin/env python3
"""plant.py OUT_DIR — the hostile lab 11 submissions of the grader's self-test (issue 36):
the skeleton's units with the in-memory forgery (memforge) or the record hunt (forge_record)
planted in every unit function (tests/grader/planted/generic.py). Every lab 11 test is
`checked`, so both must score no more than the skeleton. Run from the repository root
(tests/grader/hostile-lab.sh does, into a temporary folder)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from generic import plant  # noqa: E402

if __name__ == "__main__":
    print("planted in %d functions" % plant("labs/lab11-parallel", sys.argv[1]))
