"""`python -m longjobs`: the operator command (`longjobs.cli`)."""

import sys

from longjobs.cli.__main__ import main

if __name__ == "__main__":
    sys.exit(main())
