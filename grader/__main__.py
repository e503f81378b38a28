import faulthandler
import signal
import sys

from grader.cli import main

if hasattr(faulthandler, "register"):  # `kill -USR1 <pid>` prints where each thread of the grader is
    faulthandler.register(signal.SIGUSR1, all_threads=True)
sys.exit(main())
