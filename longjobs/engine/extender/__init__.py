"""The scheduled extender: renews due leases and reconciles ended executions."""
