"""The offline runtime: the whole processor on one machine, on moto's server, with no AWS account.

`python -m offline run --scenario FILE --report FILE` runs a scenario; `python -m offline demo` runs the
shipped demo. See `runtime` for how the parts fit together.
"""

from longjobs.construct import quiet_node_notices

quiet_node_notices()  # the workflow is rendered through jsii: its Node version notices stay out of the runtime's output
