"""TrainCheck's pytorch-forum-84911, fixed: the backbone's convolutions are frozen, the head trains.

The buggy version (``pytorch_forum_84911_buggy.py``, run directly: its folder is on ``sys.path``) froze the head
as well, so that only the BatchNorm layers trained. Here the name filter leaves the head trainable, as
TrainCheck's fix does: BatchNorm and the head train, the convolutions stay frozen, and the optimizer is still
handed every parameter (a frozen one gets no gradient, so the optimizer skips it).
"""

from pytorch_forum_84911_buggy import main

if __name__ == "__main__":
    main(fixed=True)
