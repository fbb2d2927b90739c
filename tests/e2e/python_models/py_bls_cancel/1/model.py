import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            cancel_after = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            count = 200 if cancel_after > 0 else 5
            stream = pb_utils.InferenceRequest(
                model_name="py_slow_stream",
                inputs=[pb_utils.Tensor("COUNT", np.array([count], dtype=np.int32))],
                requested_output_names=["OUT"]).exec(decoupled=True)
            outs, error = [], None
            for answer in stream:
                if answer.has_error():
                    error = answer.error().message()
                    continue
                out = pb_utils.get_output_tensor_by_name(answer, "OUT")
                if out is None:
                    continue  # the final flag alone
                outs.append(int(out.as_numpy()[0]))
                if len(outs) == cancel_after:
                    stream.cancel()
                    stream.cancel()  # a second cancel does nothing more
            stream.cancel()  # after the end: nothing
            result = json.dumps({"outs": outs, "error": error}).encode()
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("RESULT", np.array([result], dtype=np.object_))]))
        return responses
