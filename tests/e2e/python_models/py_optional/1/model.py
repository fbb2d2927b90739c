import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            names = sorted(t.name() for t in request.inputs())
            total = 0.0
            for name in ("INPUT0", "OPT1", "OPT2"):
                t = pb_utils.get_input_tensor_by_name(request, name)
                if t is not None:
                    total += float(t.as_numpy().sum())
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("PRESENT",
                                np.array([json.dumps(names).encode()], dtype=np.object_)),
                pb_utils.Tensor("SUM", np.array([total], dtype=np.float32)),
            ]))
        return responses
