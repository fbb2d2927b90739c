CONSTANT = "util-of-model-b"


def describe():
    return "b:" + __name__
