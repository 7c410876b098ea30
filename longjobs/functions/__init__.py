"""The Lambda entry points: the receiver, the extender and the watcher, each a thin adapter that turns
its event into a call of its Lambda-free core in `longjobs.engine`, built by `longjobs.engine.factory`.

The construct names them as the functions' handlers (`longjobs.construct.constants.HANDLERS`); the
offline runtime loads them as Lambda would."""
