"""TrainCheck's x-jxmnop-ddp-out-of-sync, fixed: every step goes through the one DDP wrapper, so every backward
all-reduces. The buggy version: ``x_jxmnop_ddp_out_of_sync_buggy.py`` (run directly: its folder is on sys.path).
"""

from ddp_common import run
from x_jxmnop_ddp_out_of_sync_buggy import fixed

if __name__ == "__main__":
    run(fixed)
