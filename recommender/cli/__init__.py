"""The ``rightsizer`` command line.

Importing it caps the BLAS libraries numpy and scipy load at one thread each, unless the user's environment
already sets the cap: the pipeline's matrix work is small (one workload's series, a forecast's few parameters),
where each extra BLAS thread mostly spins waiting for the next call, taking CPU from the Prometheus beside the
report or from the controller pod's CPU limit, for answers that are the same. It must run before numpy is
imported, which no module of this package does at import time.
"""

import os

BLAS_THREAD_CAPS = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")

for _name in BLAS_THREAD_CAPS:
    os.environ.setdefault(_name, "1")
