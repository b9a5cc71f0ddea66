"""What tests and benchmarks use to run the whole gateway as an operator does.

:mod:`gateway.testing.process` starts ``gateway run`` as a real process on a
configuration it writes (optionally armed to crash at a fault point, see
:mod:`threads.faults`), reads its banner for the web chat's address, and
stops, kills or waits for it.
"""
