"""`longjobs`: the operator command of the long-job processor, for a deployed stack or the local service.

Business logic lives in plain functions that take boto3 clients (`submit`, `status`, `leases`, `dlq`);
`__main__` parses arguments, builds the clients (`clients`), finds the resources (`resources`) and
renders (`render`).
"""
