class TritonPythonModel:
    def initialize(self, args):
        raise ValueError("py_init_error: initialize exploded (token 7f3a9)")

    def execute(self, requests):
        raise AssertionError("never reached")
