"""CDK constructs and the stack; the workflow builder shared with the offline runtime."""
