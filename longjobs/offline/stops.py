"""A stop that took effect stands: moto's Step Functions engine made to end a stopped execution ABORTED.

On AWS, `StopExecution` of a running execution ends it ABORTED
(https://docs.aws.amazon.com/step-functions/latest/apireference/API_StopExecution.html). moto's engine
(moto 5.2.5; the same interpreter as LocalStack's) marks the program stopped from the request's thread
(`Environment.set_stop`), while the execution's own threads run on until they next look at it. Three things
in `Environment` then undo the stop (paths under moto/stepfunctions/parser/asl/):

- The `next_state_name` setter raises `RuntimeError("Could not set NextState value when in state
  '<class '...ProgramStopped'>'.")` once the program no longer runs (eval/environment.py:167-177). A state
  checks that the program runs, does its work, then sets its next state (component/state/state.py:133, a
  Choice at component/state/choice/state_choice.py:76, a catcher at component/common/catch/catcher_decl.py:106):
  a stop in between makes the set raise.
  - In the execution's thread, `Program._eval_body` (component/program/program.py:97-108) turns the error
    into `set_error`: the execution ends FAILED (`States.Runtime`), not ABORTED.
  - A Parallel branch opens its frame before its thread starts
    (component/state/exec/state_parallel/branches_decl.py:74-83), and the thread's first act is that set
    (program.py:80), outside the handler. A stop in between kills the thread before it reports its end to
    the branch pool (state_parallel/branch_worker.py:34-36): the Parallel state waits for it forever, and
    the execution stays RUNNING for good.
- The `next_field_name` setter raises the same way (eval/environment.py:187-194), set by every component
  right after its own check that the program runs (component/eval_component.py:66-71).
- `set_error` replaces any state, a stop's too (eval/environment.py:211-217). A task waiting for its token
  when the stop lands wakes with no outcome, which moto reads as the task's timeout
  (component/state/exec/state_task/service/state_task_service_callback.py:100-104, 266-279). No catcher
  runs on a stopped program, so that failure reaches `Program._eval_body` and the execution ends FAILED.

The offline workflow's job step is a Parallel state around a task that waits for its token, so a stop of a
running job (the `abort_execution` fault, a cancel, the extender's stop of a lease it cannot hold) met one of
these nearly every time: FAILED, or, when it landed as the branch started, an execution that never ended
and a message that waited for reconciliation. moto's main branch and LocalStack's interpreter have the same
code; we found no issue of either that reports it.

`keep_stops()` patches `Environment`, once for the process: setting the next state or field of a stopped
program does nothing (its threads find it stopped at their next check and end, as they do when a stop
lands anywhere else), and `set_error` leaves a stopped program stopped. Each takes the environment's lock,
which `set_stop` holds too, so a stop cannot land between the look and the set. Nothing else changes: a
program that ended, failed or timed out first is not stopped (`set_stop` acts only on a running one), as a
stop of an ended execution changes nothing on AWS.
"""

from __future__ import annotations

from typing import Any

_PATCHED = "_longjobs_keeps_stops"


def keep_stops() -> None:
    """Patch moto's Step Functions `Environment` (process-wide, once): a stopped program stays stopped."""
    from moto.stepfunctions.parser.asl.eval.environment import Environment
    from moto.stepfunctions.parser.asl.eval.program_state import ProgramStopped

    engine: Any = Environment  # its properties and methods are replaced on the class
    if getattr(engine, _PATCHED, False):
        return
    if not all(hasattr(engine, name) for name in ("next_state_name", "next_field_name", "set_error", "set_stop")):
        return  # a moto whose engine is laid out otherwise: left as it is, its stops as it makes them
    moto_next_state: property = engine.next_state_name
    moto_next_field: property = engine.next_field_name
    moto_set_error = engine.set_error

    def set_next_state(self: Any, next_state_name: str) -> None:
        with self._state_mutex:
            if not isinstance(self._program_state, ProgramStopped):
                moto_next_state.__set__(self, next_state_name)

    def set_next_field(self: Any, next_field_name: str) -> None:
        with self._state_mutex:
            if not isinstance(self._program_state, ProgramStopped):
                moto_next_field.__set__(self, next_field_name)

    def set_error(self: Any, error: Any) -> None:
        with self._state_mutex:
            if not isinstance(self._program_state, ProgramStopped):
                moto_set_error(self, error)

    engine.next_state_name = moto_next_state.setter(set_next_state)
    engine.next_field_name = moto_next_field.setter(set_next_field)
    engine.set_error = set_error
    setattr(engine, _PATCHED, True)


__all__ = ["keep_stops"]
