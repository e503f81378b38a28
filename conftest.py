import os

from grader.core.memcheck import ENV_SWITCH

pytest_plugins = ["grader.pytest_plugin"]

# The course's own suite runs kernels as `make check` does on a CPU, under the memory checker
# (`make check MEMCHECK=0` and this variable set to "0" turn it off): the references are shown to
# give no finding, and the planted mistakes are diagnosed with what learners will read.
os.environ.setdefault(ENV_SWITCH, "1")
