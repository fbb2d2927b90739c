import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.args = {k: v for k, v in args.items()}
        self.types = {k: type(v).__name__ for k, v in args.items()}

    def execute(self, requests):
        text = json.dumps({"args": self.args, "types": self.types}).encode()
        return [pb_utils.InferenceResponse(
                    output_tensors=[pb_utils.Tensor("ARGS", np.array([text], dtype=np.object_))])
                for _ in requests]
