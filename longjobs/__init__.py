"""Long jobs on Amazon SQS: every message hidden exactly as long as its job is alive.

One package, one role per subpackage, so it installs beside an application's own code:

- `longjobs.engine`: what runs in Lambda (receiver, extender, watcher and the lease engine they share);
- `longjobs.construct`: the CDK construct `LongJobProcessor` and the workflow builder;
- `longjobs.offline`: the whole processor on one machine (`run`, `demo`, `serve`, `chaos`);
- `longjobs.cli`: the `longjobs` operator command;
- `longjobs.pipeline`: the PySpark events pipeline and the Glue entry script.

Importing this package imports nothing else: the Lambda asset ships it with `engine/` alone.
"""
