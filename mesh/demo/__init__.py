"""`mesh up` and `mesh up --demo`: a local grid of real processes, and the demo played on it
(real agents render the sample animation end to end: a kill mid-frame, a cheater caught,
slashed and its dispute dismissed, settlement, download, every balance checked).

`run` starts the grid and plays or serves it, `steps` is the demo's scenario, `checks` the
balance checks it ends with, `board` the live view, `outputs` what it leaves in `.mesh/demo/`.
"""
