import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            target = json.loads(request.parameters()).get("target", "bls_identity")
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            bls = pb_utils.InferenceRequest(
                model_name=target,
                inputs=[pb_utils.Tensor("INPUT0", x)],
                requested_output_names=["OUTPUT0"])
            answer = bls.exec()
            if answer.has_error():
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(
                    "BLS to %s failed: %s" % (target, answer.error().message()))))
                continue
            y = pb_utils.get_output_tensor_by_name(answer, "OUTPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUT", (y * np.float32(2)).astype(np.float32))]))
        return responses
