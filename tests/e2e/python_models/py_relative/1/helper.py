TAG = "relative-helper"


def twice(x):
    return x * 2
