import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            params = request.parameters()
            parsed = json.loads(params)
            responses.append(pb_utils.InferenceResponse(
                output_tensors=[
                    pb_utils.Tensor("PARAMS", np.array([params.encode()], dtype=np.object_)),
                    pb_utils.Tensor("PARAMS_TYPE",
                                    np.array([type(params).__name__.encode()], dtype=np.object_)),
                ],
                parameters={"echo_count": len(parsed), "model_says": "hello", "flag": True}))
        return responses
