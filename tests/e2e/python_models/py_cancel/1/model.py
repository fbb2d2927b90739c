import json
import os
import time

import triton_python_backend_utils as pb_utils


def _mark(directory, name, text=""):
    with open(os.path.join(directory, name), "w") as f:
        f.write(text)


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            params = json.loads(request.parameters())
            directory, tag = params["marker_dir"], params["tag"]
            _mark(directory, tag + ".started")
            start = time.monotonic()
            cancelled = False
            while time.monotonic() - start < 10.0:
                if request.is_cancelled():
                    cancelled = True
                    break
                time.sleep(0.01)
            elapsed = "%.3f" % (time.monotonic() - start)
            if cancelled:
                _mark(directory, tag + ".cancelled", elapsed)
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(
                    "py_cancel: cancelled", pb_utils.TritonError.CANCELLED)))
            else:
                _mark(directory, tag + ".timeout", elapsed)
                responses.append(pb_utils.InferenceResponse(output_tensors=[
                    pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(request, "IN")
                                    .as_numpy().copy())]))
        return responses
