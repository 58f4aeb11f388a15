"""TrainCheck's stackoverflow-60335387, fixed: ``optimizer.zero_grad()`` before each backward.

The buggy version (``stackoverflow_60335387_buggy.py``, run directly: its folder is on ``sys.path``) never zeroed
the gradients, so every step applied the sum of all gradients so far.
"""

from stackoverflow_60335387_buggy import main

if __name__ == "__main__":
    main(fixed=True)
