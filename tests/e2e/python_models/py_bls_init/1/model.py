import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.raised = {"type": None}
        try:
            pb_utils.InferenceRequest(
                model_name="bls_identity",
                inputs=[pb_utils.Tensor("INPUT0", np.zeros(2, dtype=np.float32))],
                requested_output_names=["OUTPUT0"]).exec()
        except Exception as e:  # noqa: BLE001
            self.raised = {"type": type(e).__name__, "message": str(e),
                           "is_model_exception": isinstance(e, pb_utils.TritonModelException)}

    def execute(self, requests):
        text = json.dumps(self.raised).encode()
        return [pb_utils.InferenceResponse(output_tensors=[
            pb_utils.Tensor("RAISED", np.array([text], dtype=np.object_))]) for _ in requests]
