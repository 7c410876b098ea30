"""This repository's CDK app: the stack that `app.py` synthesizes, a user of `longjobs.construct`."""
