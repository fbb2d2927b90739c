CONSTANT = "util-of-model-a"


def describe():
    return "a:" + __name__
