"""On-demand benchmarks (``python -m bench``); never part of the test suite's timing."""
