"""Receiver Lambda: job messages and S3 notifications in; leases, executions or the DLQ out."""
