"""TrainCheck's reproductions of real silent training errors, rewritten small: each a buggy and a fixed script.

TrainCheck (OSDI 2025) publishes its reproductions in OrderLab/TrainCheck-Evaluation-Workloads
(``silent-issue-detection/bug-reprod-scripts``). The ones that are defects of a training script (not of a
library, not of hardware) and that run on a CPU are rewritten here with synthetic data, each as
``<id>_buggy.py`` and ``<id>_fixed.py``; they know nothing of Cockpit and are probed as a user would
(``cockpit probe -- python tests/traincheck/<id>_buggy.py``). ``python -m tests.traincheck.table`` probes
them all and prints what caught each.
"""
