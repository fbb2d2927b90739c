import numpy as np
import triton_python_backend_utils as pb_utils

CODES = [None,
         pb_utils.TritonError.INVALID_ARG,
         pb_utils.TritonError.NOT_FOUND,
         pb_utils.TritonError.UNAVAILABLE,
         pb_utils.TritonError.UNSUPPORTED,
         pb_utils.TritonError.INTERNAL]


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            k = int(value.reshape(-1)[0])
            if k > 0:
                error = pb_utils.TritonError("py_batch_error: request %d refused" % k, CODES[k])
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUT", value.copy()),
                pb_utils.Tensor("BATCH", np.full(value.shape, len(requests), dtype=np.int32)),
            ]))
        return responses
