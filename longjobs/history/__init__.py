"""A run's history, shared by the simulation and the offline runtime: the names of the faults a run
injects (`faults`) and the independent checker that judges the promise from the history alone
(`checker`, also `python -m longjobs.history.checker TRACE.jsonl`)."""
