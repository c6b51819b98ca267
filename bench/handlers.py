"""The benchmark's handlers."""


def noop(task, inputs):
    return None
