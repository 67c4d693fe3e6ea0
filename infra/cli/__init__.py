"""The `passband` command line: run a flow with a preset and overrides, print configs and runs,
verify answers, start and stop the local stack, register deployments.

It sits above the flows (it runs them) and the stack (it starts it); nothing below imports it.
"""
