"""Doubles INPUT0 and says which process served it; INPUT0[0] == -9 kills that process
(os.kill(os.getpid(), 9)) inside execute, as a crashing model would."""

import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.name = args["model_instance_name"]

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            if x.size and x.reshape(-1)[0] == -9:
                os.kill(os.getpid(), 9)
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT0", (x * 2).astype(np.float32)),
                pb_utils.Tensor("OUTPUT1", np.array([os.getpid()], dtype=np.int64)),
            ]))
        return responses
