"""Imports `envmarker`, a module that exists only in the model's EXECUTION_ENV_PATH (the test
writes it there), and answers with its WHERE, the Python's sys.prefix and its pid."""

import os
import sys

import envmarker
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        answer = np.array([envmarker.WHERE.encode(), sys.prefix.encode()], dtype=np.object_)
        return [pb_utils.InferenceResponse(output_tensors=[
            pb_utils.Tensor("OUTPUT0", answer),
            pb_utils.Tensor("OUTPUT1", np.array([os.getpid()], dtype=np.int64)),
        ]) for _ in requests]
