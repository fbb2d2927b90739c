import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            if int(x[0]) % 10 == 0:
                raise ValueError("py_stress: %d is a multiple of 10" % int(x[0]))
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUT", (x + 1).astype(np.int32))]))
        return responses
