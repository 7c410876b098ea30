"""The processor's deterministic simulation: the real receiver, extender, watcher and workflow on one
virtual clock, in one thread, against a simulated AWS, with faults drawn from a seed (docs/simulation.md)."""
