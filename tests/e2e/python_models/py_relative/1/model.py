import numpy as np
import triton_python_backend_utils as pb_utils

from . import helper
from .helper import twice


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUT", twice(x).astype(np.int32)),
                pb_utils.Tensor("TAG", np.array([helper.TAG.encode()], dtype=np.object_))]))
        return responses
