"""TrainCheck's pytorch-104336, fixed: the model is moved (cast) before DistributedDataParallel wraps it, as the
original's first fix does (re-wrap after moving), so DDP's hooks are on the parameters that train and every
backward all-reduces. The buggy version: ``pytorch_104336_buggy.py`` (run directly: its folder is on sys.path).
"""

from ddp_common import run
from pytorch_104336_buggy import fixed

if __name__ == "__main__":
    run(fixed)
