"""`python -m offline run|demo|serve|chaos`: the offline runtime's command, `longjobs.offline`."""

import sys

from longjobs.offline.__main__ import main

if __name__ == "__main__":
    sys.exit(main())
