import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            count = int(pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy()[0])
            sender = request.get_response_sender()
            for i in range(count):
                if sender.is_cancelled():
                    sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(
                        "py_slow_stream: cancelled after %d responses" % i,
                        pb_utils.TritonError.CANCELLED)),
                        flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                    break
                sender.send(pb_utils.InferenceResponse(output_tensors=[
                    pb_utils.Tensor("OUT", np.array([i], dtype=np.int32))]))
                time.sleep(0.01)
            else:
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
