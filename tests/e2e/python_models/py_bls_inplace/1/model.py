import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            n = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            x = np.arange(n, dtype=np.float32)
            mine = x.__array_interface__["data"][0]
            result = {"mine": mine}
            for how, decoupled in (("exec", False), ("decoupled", True)):
                call = pb_utils.InferenceRequest(
                    model_name="py_ptr", inputs=[pb_utils.Tensor("IN", x)],
                    requested_output_names=["PTR", "SUM"])
                answers = list(call.exec(decoupled=True)) if decoupled else [call.exec()]
                answer = answers[0]
                if answer.has_error():
                    raise pb_utils.TritonModelException(answer.error().message())
                result[how] = {
                    "ptr": int(pb_utils.get_output_tensor_by_name(answer, "PTR").as_numpy()[0]),
                    "sum": float(pb_utils.get_output_tensor_by_name(answer, "SUM").as_numpy()[0]),
                    "on_cpu": pb_utils.get_output_tensor_by_name(answer, "SUM").is_cpu()}
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor(
                "RESULT", np.array([json.dumps(result).encode()], dtype=np.object_))]))
        return responses
